// The data loader: batch contents, determinism, sharding across ranks, the train/validation
// split, the validation iterator and exact resume from a serialized state.
#include "engine/data/data_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "engine/data/token_writer.h"
#include "engine/train/run_setup.h"
#include "tests/data/test_files.h"

namespace sluice::data {
namespace {

using ::testing::HasSubstr;
using testing::MakeText;
using testing::ScratchDir;
using testing::WriteString;

constexpr int64_t kSeqLen = 16;

// The next batch of `loader`, which must succeed.
Batch Take(DataLoader& loader, int64_t batch_size) {
  Result<Batch> batch = loader.NextBatch(batch_size);
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  return batch.ok() ? std::move(batch).value() : Batch{};
}

// ValidationIterator::Next, which must succeed.
bool NextOf(ValidationIterator& it, Batch* batch) {
  Result<bool> more = it.Next(batch);
  EXPECT_TRUE(more.ok()) << more.status().ToString();
  return more.ok() && *more;
}

class DataLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    text_ = MakeText(20000);
    path_ = dir_.File("corpus.txt");
    WriteString(path_, text_);
  }

  DataOptions Options(uint64_t seed = 1234) const {
    DataOptions o = train::DefaultDataOptions();
    o.train_path = path_;
    o.seq_len = kSeqLen;
    o.val_fraction = 0.1;
    o.seed = seed;
    return o;
  }

  DataLoader Open(const DataOptions& o, int rank = 0, int world = 1) const {
    Result<DataLoader> loader = DataLoader::Open(o, rank, world);
    EXPECT_TRUE(loader.ok()) << loader.status().ToString();
    return std::move(loader).value();
  }

  ScratchDir dir_;
  std::string text_;
  std::string path_;
};

// The window starts of `steps` global batches of `global_batch` rows read by `world` ranks, one
// set per step (the union over ranks).
std::vector<std::multiset<int64_t>> GlobalBatches(const DataOptions& o, int world,
                                                  int64_t global_batch, int steps) {
  std::vector<DataLoader> ranks;
  for (int r = 0; r < world; ++r) ranks.push_back(std::move(DataLoader::Open(o, r, world)).value());
  std::vector<std::multiset<int64_t>> out(static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    for (DataLoader& loader : ranks) {
      const Batch b = Take(loader, global_batch / world);
      out[static_cast<size_t>(s)].insert(b.window_starts.begin(), b.window_starts.end());
    }
    for (DataLoader& loader : ranks) EXPECT_EQ(loader.sampler_state(), ranks[0].sampler_state());
  }
  return out;
}

TEST_F(DataLoaderTest, RowsAreFileWindowsWithTargetsShiftedByOne) {
  DataLoader loader = Open(Options());
  const Batch b = Take(loader, 8);
  ASSERT_EQ(b.batch_size, 8);
  ASSERT_EQ(b.seq_len, kSeqLen);
  ASSERT_EQ(b.inputs.size(), 8u * kSeqLen);
  ASSERT_EQ(b.targets.size(), 8u * kSeqLen);
  for (int64_t r = 0; r < 8; ++r) {
    const int64_t start = b.window_starts[static_cast<size_t>(r)];
    for (int64_t t = 0; t < kSeqLen; ++t) {
      ASSERT_EQ(b.inputs[static_cast<size_t>(r * kSeqLen + t)],
                static_cast<unsigned char>(text_[static_cast<size_t>(start + t)]));
      ASSERT_EQ(b.targets[static_cast<size_t>(r * kSeqLen + t)],
                static_cast<unsigned char>(text_[static_cast<size_t>(start + t + 1)]));
    }
  }
}

TEST_F(DataLoaderTest, SameSeedSameBatchesDifferentSeedDifferentBatches) {
  DataLoader a = Open(Options(7)), b = Open(Options(7)), c = Open(Options(8));
  bool any_difference = false;
  for (int step = 0; step < 200; ++step) {  // about 2.7 epochs of 1124 training windows
    const Batch ba = Take(a, 16), bb = Take(b, 16), bc = Take(c, 16);
    ASSERT_EQ(ba.inputs, bb.inputs) << "step " << step;
    ASSERT_EQ(ba.targets, bb.targets) << "step " << step;
    any_difference |= ba.window_starts != bc.window_starts;
  }
  EXPECT_TRUE(any_difference);
  EXPECT_GE(a.sampler_state().epoch, 2);
}

TEST_F(DataLoaderTest, GlobalBatchIsTheSameSetForAnyWorldSize) {
  const DataOptions o = Options(11);
  const int steps = 150;  // crosses epoch boundaries
  const auto one = GlobalBatches(o, 1, 8, steps);
  EXPECT_EQ(GlobalBatches(o, 2, 8, steps), one);
  EXPECT_EQ(GlobalBatches(o, 4, 8, steps), one);
  EXPECT_EQ(GlobalBatches(o, 8, 8, steps), one);
}

TEST_F(DataLoaderTest, RankTakesEveryWorldSizethSampleOfTheGlobalOrder) {
  const DataOptions o = Options(5);
  DataLoader single = Open(o);
  DataLoader r0 = Open(o, 0, 2), r1 = Open(o, 1, 2);
  for (int step = 0; step < 10; ++step) {
    const Batch g = Take(single, 6);
    const Batch a = Take(r0, 3), b = Take(r1, 3);
    for (size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(a.window_starts[j], g.window_starts[2 * j]);
      EXPECT_EQ(b.window_starts[j], g.window_starts[2 * j + 1]);
    }
  }
}

TEST_F(DataLoaderTest, SplitHoldsOutEvenlySpacedBlocks) {
  // Token i of this file is i, so every token read says where in the file it came from.
  const int64_t n = 20000;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  DataOptions o = Options();
  o.train_path = dir_.File("positions.bin");
  o.format = TokenFormat::kNanogptU16;
  o.vocab_size = 65536;
  ASSERT_TRUE(WriteNanogptU16(o.train_path, ids).ok());
  DataLoader loader = Open(o);
  const TokenDataset& ds = loader.dataset();

  // 1249 windows: blocks of 1249 / 200 = 6 windows (97 tokens), 207 blocks, round(20.7) = 21
  // held out, spread evenly: the gaps between them are 9 or 10 blocks.
  const int64_t block = 6 * kSeqLen + 1;
  const auto& val = ds.val().stretches();
  ASSERT_EQ(val.size(), 21u);
  EXPECT_EQ(ds.val().size(), 21 * block);
  EXPECT_EQ(ds.train().size() + ds.val().size(), n);
  EXPECT_EQ(ds.val().NumWindows(kSeqLen), (21 * block - 1) / kSeqLen);
  std::vector<bool> is_val(static_cast<size_t>(n), false);
  for (size_t k = 0; k < val.size(); ++k) {
    EXPECT_EQ(val[k].count, block);
    EXPECT_EQ(val[k].begin % block, 0);
    if (k > 0) {
      EXPECT_THAT(val[k].begin - val[k - 1].begin, ::testing::AnyOf(9 * block, 10 * block));
    }
    for (int64_t i = val[k].begin; i < val[k].begin + val[k].count; ++i)
      is_val[static_cast<size_t>(i)] = true;
  }
  EXPECT_LT(val.front().begin, n / 10);
  EXPECT_GT(val.back().begin, n - n / 10);

  // Three epochs of training never read a validation token, and reach nearly every other one
  // (a few at the ends of the stream fall outside every epoch's phase).
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int step = 0; step < 300; ++step) {
    const Batch b = Take(loader, 16);
    for (int32_t t : b.inputs) seen[static_cast<size_t>(t)] = true;
    for (int32_t t : b.targets) seen[static_cast<size_t>(t)] = true;
    for (int64_t r = 0; r < b.batch_size; ++r) {
      EXPECT_EQ(b.window_starts[static_cast<size_t>(r)],
                b.inputs[static_cast<size_t>(r * kSeqLen)]);
    }
  }
  int64_t train_seen = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!seen[static_cast<size_t>(i)]) continue;
    ASSERT_FALSE(is_val[static_cast<size_t>(i)]) << "training read held-out token " << i;
    ++train_seen;
  }
  EXPECT_GT(train_seen, ds.train().size() - 2 * kSeqLen);

  // Validation (128 samples of 127 windows: all of them) reads only held-out tokens, and all
  // of them but the few after the stream's last whole window.
  Result<ValidationIterator> it = loader.Validation(8, 16);
  ASSERT_TRUE(it.ok());
  std::vector<bool> read(static_cast<size_t>(n), false);
  Batch b;
  while (NextOf(*it, &b)) {
    for (int32_t t : b.inputs) read[static_cast<size_t>(t)] = true;
    for (int32_t t : b.targets) read[static_cast<size_t>(t)] = true;
  }
  int64_t val_read = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!read[static_cast<size_t>(i)]) continue;
    ASSERT_TRUE(is_val[static_cast<size_t>(i)]) << "validation read training token " << i;
    ++val_read;
  }
  EXPECT_EQ(val_read, 127 * kSeqLen + 1);
}

TEST_F(DataLoaderTest, TooSmallAFractionStillHoldsOutOneBlockMidFile) {
  DataOptions o = Options();
  o.val_fraction = 0.001;  // 0.2 of a block
  DataLoader loader = Open(o);
  const auto& val = loader.dataset().val().stretches();
  ASSERT_EQ(val.size(), 1u);
  EXPECT_EQ(val[0].begin, 103 * (6 * kSeqLen + 1));  // block 207 / 2
}

TEST_F(DataLoaderTest, SplitTooShortForTwoPartsNamesTheSettings) {
  DataOptions o = Options();
  o.seq_len = 15000;  // one window: nothing left to hold out
  Result<DataLoader> loader = DataLoader::Open(o);
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("data.val_fraction 0.1"));
  EXPECT_THAT(loader.status().message(), HasSubstr("data.val_path"));
}

TEST_F(DataLoaderTest, SeparateValidationFile) {
  const std::string val_text = MakeText(1000, 77);
  DataOptions o = Options();
  o.val_path = dir_.File("val.txt");
  WriteString(o.val_path, val_text);
  DataLoader loader = Open(o);
  EXPECT_EQ(loader.dataset().train().size(), static_cast<int64_t>(text_.size()));
  EXPECT_EQ(loader.dataset().val().file()->path(), o.val_path);
  Result<ValidationIterator> val = loader.Validation(4, 2);
  ASSERT_TRUE(val.ok());
  Batch b;
  ASSERT_TRUE(NextOf(*val, &b));
  const int64_t s = b.window_starts[1];
  EXPECT_EQ(b.inputs[kSeqLen], static_cast<unsigned char>(val_text[static_cast<size_t>(s)]));
}

TEST_F(DataLoaderTest, NoValidationDataIsAClearError) {
  DataOptions o = Options();
  o.val_fraction = 0;
  DataLoader loader = Open(o);
  EXPECT_EQ(loader.dataset().train().size(), static_cast<int64_t>(text_.size()));
  Result<ValidationIterator> val = loader.Validation(4, 2);
  ASSERT_FALSE(val.ok());
  EXPECT_EQ(val.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(val.status().message(), HasSubstr("data.val_path"));
}

TEST_F(DataLoaderTest, ValidationIsTheSameEveryTimeAndSpreadOverTheSplit) {
  DataLoader loader = Open(Options());
  const auto pass = [&] {
    std::vector<int32_t> all;
    Result<ValidationIterator> val = loader.Validation(4, 3);
    EXPECT_TRUE(val.ok());
    Batch b;
    int batches = 0;
    while (NextOf(*val, &b)) {
      all.insert(all.end(), b.inputs.begin(), b.inputs.end());
      ++batches;
    }
    EXPECT_EQ(batches, 3);
    return all;
  };
  const std::vector<int32_t> first = pass();
  Take(loader, 32);  // training in between changes nothing
  EXPECT_EQ(pass(), first);

  Result<ValidationIterator> val = loader.Validation(4, 3);
  Batch b;
  std::vector<int64_t> starts;
  while (NextOf(*val, &b)) {
    starts.insert(starts.end(), b.window_starts.begin(), b.window_starts.end());
  }
  val->Reset();
  ASSERT_TRUE(NextOf(*val, &b));
  EXPECT_EQ(b.window_starts[0], starts[0]);
  // 12 samples of the held-out windows, evenly spaced: from the first block to the last tenth.
  const auto& blocks = loader.dataset().val().stretches();
  EXPECT_EQ(starts.front(), blocks.front().begin);
  ASSERT_EQ(blocks.size(), 21u);
  EXPECT_GE(starts.back(), blocks[19].begin);
}

TEST_F(DataLoaderTest, ValidationShardsLikeTraining) {
  const DataOptions o = Options();
  const auto eval_set = [&](int world) {
    std::multiset<int64_t> all;
    for (int r = 0; r < world; ++r) {
      DataLoader loader = Open(o, r, world);
      Result<ValidationIterator> val = loader.Validation(8 / world, 2);
      Batch b;
      while (NextOf(*val, &b)) all.insert(b.window_starts.begin(), b.window_starts.end());
    }
    return all;
  };
  const std::multiset<int64_t> one = eval_set(1);
  EXPECT_EQ(one.size(), 16u);
  EXPECT_EQ(eval_set(2), one);
  EXPECT_EQ(eval_set(4), one);
}

TEST_F(DataLoaderTest, ResumeFromSerializedStateGivesTheSameFollowingBatches) {
  DataLoader a = Open(Options(21));
  for (int step = 0; step < 70; ++step) Take(a, 16);  // inside epoch 0, near its end
  const std::string saved = a.SaveState().dump();
  std::vector<Batch> expected;
  for (int step = 0; step < 10; ++step) expected.push_back(Take(a, 16));  // crosses an epoch

  DataLoader b = Open(Options(999));  // a different configured seed: the saved one wins
  ASSERT_TRUE(b.RestoreState(nlohmann::json::parse(saved)).ok());
  for (const Batch& e : expected) {
    const Batch got = Take(b, 16);
    ASSERT_EQ(got.window_starts, e.window_starts);
    ASSERT_EQ(got.inputs, e.inputs);
    ASSERT_EQ(got.targets, e.targets);
  }
  EXPECT_EQ(a.sampler_state(), b.sampler_state());
  EXPECT_THAT(saved, HasSubstr("\"seed\":21"));
}

TEST_F(DataLoaderTest, ResumeWithADifferentWorldSizeKeepsTheGlobalOrder) {
  const DataOptions o = Options(3);
  DataLoader single = Open(o);
  for (int step = 0; step < 5; ++step) Take(single, 8);
  const nlohmann::json saved = single.SaveState();
  const Batch next = Take(single, 8);

  std::multiset<int64_t> union_of_ranks;
  for (int r = 0; r < 4; ++r) {
    DataLoader rank = Open(o, r, 4);
    ASSERT_TRUE(rank.RestoreState(saved).ok());
    const Batch b = Take(rank, 2);
    union_of_ranks.insert(b.window_starts.begin(), b.window_starts.end());
  }
  EXPECT_EQ(union_of_ranks,
            std::multiset<int64_t>(next.window_starts.begin(), next.window_starts.end()));
}

TEST_F(DataLoaderTest, RestoreRejectsAStateForOtherData) {
  DataLoader a = Open(Options());
  nlohmann::json state = a.SaveState();

  DataOptions other = Options();
  other.seq_len = 32;
  DataLoader b = Open(other);
  Status s = b.RestoreState(state);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("saved for 17963 training tokens at seq_len 16"));

  nlohmann::json broken = state;
  broken.erase("position");
  s = a.RestoreState(broken);
  EXPECT_THAT(s.message(), HasSubstr("key 'position' is missing"));
  broken = state;
  broken["position"] = 1 << 30;
  EXPECT_THAT(a.RestoreState(broken).message(), HasSubstr("out of range"));
  EXPECT_FALSE(a.RestoreState(nlohmann::json::array()).ok());
}

TEST(DataOptionsErrors, NameTheSetting) {
  DataOptions o = train::DefaultDataOptions();
  o.seq_len = 8;
  EXPECT_THAT(DataLoader::Open(o).status().message(), HasSubstr("data.train_path is not set"));
  o.train_path = "/nonexistent/corpus.txt";
  o.seq_len = 0;
  EXPECT_THAT(DataLoader::Open(o).status().message(), HasSubstr("model.seq_len is 0"));
  o.seq_len = 8;
  o.val_fraction = 1.0;
  EXPECT_THAT(DataLoader::Open(o).status().message(), HasSubstr("data.val_fraction is 1"));
  o.val_fraction = 0.1;
  EXPECT_EQ(DataLoader::Open(o).status().code(), StatusCode::kNotFound);
  EXPECT_THAT(DataLoader::Open(o, 2, 2).status().message(), HasSubstr("rank 2 of world size 2"));
}

}  // namespace
}  // namespace sluice::data
