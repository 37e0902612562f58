// Every file Sluice reads as input (a config, the token data, a checkpoint's manifest and shards, a
// safetensors file, a swap file) must be a regular file: a directory, a device, a FIFO or a socket
// in its place is refused at once with an error naming the path and what it is, and never hangs
// (a FIFO without a writer would block a plain open forever; ctest's timeout catches a
// regression).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/safetensors_file.h"
#include "engine/config/config_tree.h"
#include "engine/data/token_file.h"
#include "offload/aio_engine.h"
#include "offload/swap_store.h"
#include "runtime/durable_file.h"
#include "tests/offload/test_support.h"

namespace sluice {
namespace {

using offload::testutil::TempDir;
using ::testing::HasSubstr;

struct SpecialFile {
  std::string kind;  // FileTypeName's word for it
  std::string path;
};

// A directory, a character device, a FIFO and a socket, the last three made under `dir`.
class SpecialFiles {
 public:
  explicit SpecialFiles(const TempDir& dir) {
    files_.push_back({"directory", dir.Subdir("a_directory")});
    files_.push_back({"character device", "/dev/zero"});
    const std::string fifo = dir.File("a_fifo");
    if (::mkfifo(fifo.c_str(), 0600) == 0) files_.push_back({"FIFO", fifo});
    const std::string socket_path = dir.File("a_socket");
    socket_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (socket_ >= 0 && socket_path.size() < sizeof(address.sun_path)) {
      socket_path.copy(address.sun_path, socket_path.size());
      if (::bind(socket_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
        files_.push_back({"socket", socket_path});
      }
    }
  }
  ~SpecialFiles() {
    if (socket_ >= 0) ::close(socket_);
  }
  const std::vector<SpecialFile>& files() const { return files_; }

 private:
  std::vector<SpecialFile> files_;
  int socket_ = -1;
};

class SpecialFileInputsTest : public ::testing::Test {
 protected:
  // Runs `open_as(path)` for every special file and expects an InvalidArgument that names the
  // path, what it is and `context`.
  void ExpectRefused(const std::string& context,
                     const std::function<Status(const std::string&)>& open_as) {
    ASSERT_GE(special_.files().size(), 3u);
    for (const SpecialFile& file : special_.files()) {
      SCOPED_TRACE(context + " at a " + file.kind + ": " + file.path);
      const Status status = open_as(file.path);
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
      EXPECT_THAT(status.message(), HasSubstr(file.path));
      EXPECT_THAT(status.message(), HasSubstr("is a " + file.kind + ", not a regular file"));
      EXPECT_THAT(status.message(), HasSubstr(context));
    }
  }

  TempDir dir_;
  SpecialFiles special_{dir_};
};

TEST_F(SpecialFileInputsTest, FileTypeNamesEveryKind) {
  EXPECT_EQ(FileTypeName(S_IFREG), "regular file");
  EXPECT_EQ(FileTypeName(S_IFDIR), "directory");
  EXPECT_EQ(FileTypeName(S_IFCHR), "character device");
  EXPECT_EQ(FileTypeName(S_IFBLK), "block device");
  EXPECT_EQ(FileTypeName(S_IFIFO), "FIFO");
  EXPECT_EQ(FileTypeName(S_IFSOCK), "socket");
  EXPECT_EQ(FileTypeName(S_IFLNK), "symbolic link");
}

TEST_F(SpecialFileInputsTest, ConfigFileIsRefused) {
  ExpectRefused("config file",
                [](const std::string& path) { return ReadConfigFile(path).status(); });
}

TEST_F(SpecialFileInputsTest, TokenDataIsRefused) {
  ExpectRefused("token file", [](const std::string& path) {
    return data::TokenFile::Open(path, data::TokenFormat::kNanogptU16, 50257).status();
  });
}

// A checkpoint's manifest and a safetensors file are read through OpenForRead / ReadWholeFile,
// as every checkpoint shard is.
TEST_F(SpecialFileInputsTest, CheckpointFilesAreRefused) {
  ExpectRefused("", [](const std::string& path) { return OpenForRead(path).status(); });
  ExpectRefused("", [](const std::string& path) { return ReadWholeFile(path).status(); });
  ExpectRefused(
      "", [](const std::string& path) { return checkpoint::SafetensorsFile::Open(path).status(); });
}

TEST_F(SpecialFileInputsTest, ManifestInPlaceOfAFileIsRefused) {
  const std::string step = dir_.Subdir("step_00000001");
  ASSERT_EQ(::mkfifo((step + "/manifest.json").c_str(), 0600), 0);
  const Status status = checkpoint::ReadManifest(step).status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("is a FIFO, not a regular file")) << status.ToString();
}

TEST_F(SpecialFileInputsTest, SwapFileIsRefused) {
  Result<std::unique_ptr<offload::AioEngine>> engine =
      offload::AioEngine::Create(offload::AioOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const std::string nvme = dir_.Subdir("nvme");
  offload::SwapStoreOptions options;
  options.paths = {nvme};
  options.file_name = "swap.swp";
  const std::string swap = nvme + "/swap.swp";
  ASSERT_EQ(::mkfifo(swap.c_str(), 0600), 0);
  for (const bool create : {false, true}) {
    SCOPED_TRACE(create ? "create" : "open");
    const Status status = create ? offload::SwapStore::Create(**engine, options).status()
                                 : offload::SwapStore::Open(**engine, options).status();
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_THAT(status.message(), HasSubstr(swap + " is a FIFO, not a regular file"));
    EXPECT_THAT(status.message(), HasSubstr("swap file"));
  }
}

// Two stores on one swap file (two runs sharing an nvme_path): the second is refused before it
// truncates or reads anything, naming the file and the holder; the first keeps working.
TEST_F(SpecialFileInputsTest, ASwapFileHasOneOwner) {
  Result<std::unique_ptr<offload::AioEngine>> engine =
      offload::AioEngine::Create(offload::AioOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  offload::SwapStoreOptions options;
  options.paths = {dir_.Subdir("shared_nvme")};
  options.file_name = "swap.swp";
  options.capacity_bytes = 1 << 20;
  Result<std::unique_ptr<offload::SwapStore>> first = offload::SwapStore::Create(**engine, options);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  for (const bool create : {true, false}) {
    SCOPED_TRACE(create ? "create" : "open");
    const Status status = create ? offload::SwapStore::Create(**engine, options).status()
                                 : offload::SwapStore::Open(**engine, options).status();
    EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition) << status.ToString();
    EXPECT_THAT(status.message(),
                HasSubstr("swap file " + options.paths[0] +
                          "/swap.swp is in use by another run (pid " + std::to_string(getpid())));
    EXPECT_THAT(status.message(), HasSubstr("nvme_path"));
  }
  EXPECT_TRUE((*first)->Flush().ok());
  first->reset();
  EXPECT_TRUE(offload::SwapStore::Open(**engine, options).ok());
}

}  // namespace
}  // namespace sluice
