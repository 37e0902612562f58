// A token file that shrinks under a running job: the tokens are read in place from a mapping, so
// the lost pages fault with SIGBUS; the guarded reads turn that into DataLoss naming the file,
// and the process survives. A SIGBUS outside a guarded read still ends the process as before.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "engine/data/data_loader.h"
#include "engine/data/mapped_read_guard.h"
#include "engine/train/run_setup.h"
#include "tests/data/test_files.h"

namespace sluice::data {
namespace {

using ::testing::HasSubstr;
using testing::MakeText;
using testing::ScratchDir;
using testing::WriteString;

constexpr int64_t kShrunkSeqLen = 16;
constexpr size_t kFileBytes = 1 << 20;  // 256 pages: the windows land far past the first

void Truncate(const std::string& path, off_t bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::ftruncate(fd, bytes), 0) << path;
  ::close(fd);
}

class ShrunkFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    text_ = MakeText(kFileBytes);
    path_ = dir_.File("corpus.txt");
    WriteString(path_, text_);
  }

  DataOptions Options(double val_fraction) const {
    DataOptions o = train::DefaultDataOptions();
    o.train_path = path_;
    o.seq_len = kShrunkSeqLen;
    o.val_fraction = val_fraction;
    o.seed = 7;
    return o;
  }

  ScratchDir dir_;
  std::string text_;
  std::string path_;
};

TEST_F(ShrunkFileTest, TrainingFileTruncatedUnderAnOpenLoaderIsDataLossNamingIt) {
  Result<DataLoader> loader = DataLoader::Open(Options(0.0));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Batch batch;
  ASSERT_TRUE(loader->NextBatch(16, &batch).ok());

  Truncate(path_, 8);
  const Status status = loader->NextBatch(16, &batch);
  ASSERT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
  const std::string& m = status.message();
  EXPECT_THAT(m, HasSubstr(path_));
  EXPECT_THAT(m, HasSubstr("shrank while the run was reading it"));
  EXPECT_THAT(m, HasSubstr("held 1048576 bytes when the run mapped it"));
  EXPECT_THAT(m, HasSubstr("has 8 bytes now"));
  EXPECT_THAT(m, HasSubstr("SIGBUS"));
  EXPECT_THAT(m, HasSubstr("restore it"));
  EXPECT_THAT(m, HasSubstr("--resume latest"));
  EXPECT_THAT(m, HasSubstr("rank 0's next training batch (data.train_path)"));

  // Still alive, and the guard re-arms: the next batch fails the same way, not with a crash.
  EXPECT_EQ(loader->NextBatch(16).status().code(), StatusCode::kDataLoss);

  // With the same bytes back in place the mapping reads them again.
  WriteString(path_, text_);
  Result<Batch> again = loader->NextBatch(16);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (int64_t r = 0; r < again->batch_size; ++r) {
    const int64_t start = again->window_starts[static_cast<size_t>(r)];
    EXPECT_EQ(again->inputs[static_cast<size_t>(r * kShrunkSeqLen)],
              static_cast<unsigned char>(text_[static_cast<size_t>(start)]));
  }
}

TEST_F(ShrunkFileTest, ValidationBatchOfATruncatedFileIsDataLoss) {
  Result<DataLoader> loader = DataLoader::Open(Options(0.1));
  ASSERT_TRUE(loader.ok()) << loader.status().ToString();
  Result<ValidationIterator> val = loader->Validation(8, 4);
  ASSERT_TRUE(val.ok()) << val.status().ToString();
  Batch batch;
  Result<bool> first = val->Next(&batch);
  ASSERT_TRUE(first.ok() && *first) << first.status().ToString();

  Truncate(path_, 0);
  Result<bool> next = val->Next(&batch);
  ASSERT_EQ(next.status().code(), StatusCode::kDataLoss) << next.status().ToString();
  EXPECT_THAT(next.status().message(), HasSubstr(path_));
  EXPECT_THAT(next.status().message(), HasSubstr("has 0 bytes now"));
  EXPECT_THAT(next.status().message(), HasSubstr("validation batch 2 of 4"));
}

TEST_F(ShrunkFileTest, GuardedReadNamesTheByteOffsetThatFaulted) {
  Result<MappedFile> file = MappedFile::Open(path_);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Truncate(path_, 4096);  // page 0 stays, page 1 is gone
  const auto* bytes = reinterpret_cast<const volatile unsigned char*>(file->bytes().data());
  unsigned sum = 0;
  EXPECT_TRUE(GuardMappedRead(*file, "page 0", [&] { sum += bytes[100]; }).ok());
  const Status status = GuardMappedRead(*file, "page 1", [&] { sum += bytes[5000]; });
  ASSERT_EQ(status.code(), StatusCode::kDataLoss) << status.ToString();
  EXPECT_THAT(status.message(), HasSubstr("(page 1)"));
  EXPECT_THAT(status.message(), HasSubstr("reading byte offset 5000 faulted"));
  EXPECT_THAT(status.message(), HasSubstr("has 4096 bytes now"));
  EXPECT_EQ(sum, static_cast<unsigned char>(text_[100]));
}

// The handler only answers for guarded reads: the same fault outside a guard (here after one
// guarded read installed the handler) ends the process with SIGBUS, as without Sluice's handler.
TEST_F(ShrunkFileTest, FaultOutsideAGuardStillKillsWithSigbus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Result<MappedFile> file = MappedFile::Open(path_);
        if (!file.ok()) std::_Exit(2);
        const auto* bytes = reinterpret_cast<const volatile unsigned char*>(file->bytes().data());
        if (!GuardMappedRead(*file, "warm-up", [&] { (void)bytes[0]; }).ok()) std::_Exit(3);
        Truncate(path_, 0);
        (void)bytes[8192];
        std::_Exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace sluice::data
