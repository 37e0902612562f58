// Shared by the checkpoint tests: temporary directories, a small "model" of named tensors with
// values that depend only on (seed, kind, tensor, element), and a save that simulates `world`
// ranks as threads agreeing through a std::barrier.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "engine/checkpoint/checkpoint_writer.h"
#include "runtime/comm.h"

namespace sluice::checkpoint::testing {

class TempDir {
 public:
  explicit TempDir(const std::filesystem::path& base = std::filesystem::temp_directory_path()) {
    std::string pattern = (base / "sluice_ckpt_XXXXXX").string();
    char* made = ::mkdtemp(pattern.data());
    SLUICE_CHECK(made != nullptr) << "mkdtemp failed";
    path_ = made;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct TensorSpec {
  std::string name;
  Shape shape;
};

// Sizes chosen so that ranges split unevenly for worlds 1-4 and some ranks own nothing of the
// small tensors (numel 3 with world 4).
inline std::vector<TensorSpec> SmallModel() {
  return {{"transformer.wte.weight", Shape{37, 8}},
          {"transformer.h.0.ln_1.bias", Shape{3}},
          {"transformer.h.0.attn.c_attn.weight", Shape{24, 8}},
          {"transformer.h.0.attn.c_proj.weight", Shape{8, 8}},
          {"transformer.ln_f.weight", Shape{5}}};
}

inline float ExpectedValue(uint64_t seed, StateKind kind, size_t tensor, int64_t element) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(kind) * 1000003ull +
               tensor * 7919ull + static_cast<uint64_t>(element);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return static_cast<float>(static_cast<int64_t>(x % 2000001) - 1000000) / 1000.0f;
}

// The full flattened values of one tensor.
inline std::vector<float> FullValues(uint64_t seed, StateKind kind, size_t tensor, int64_t numel) {
  std::vector<float> v(numel);
  for (int64_t e = 0; e < numel; ++e) v[e] = ExpectedValue(seed, kind, tensor, e);
  return v;
}

// Every kind of every tensor of `model` for `rank` of `world` (ZeRO's ShardRange split). The
// returned ShardTensors point into *storage.
inline std::vector<ShardTensor> RankTensors(const std::vector<TensorSpec>& model, uint64_t seed,
                                            int rank, int world,
                                            std::vector<std::vector<float>>* storage) {
  std::vector<ShardTensor> out;
  storage->reserve(model.size() * 3);
  for (StateKind kind : kAllStateKinds) {
    for (size_t i = 0; i < model.size(); ++i) {
      const int64_t numel = model[i].shape.numel();
      ShardSpan span = ShardRange(static_cast<size_t>(numel), world, rank);
      std::vector<float> all = FullValues(seed, kind, i, numel);
      storage->emplace_back(all.begin() + span.offset, all.begin() + span.offset + span.count);
      ShardTensor t;
      t.kind = kind;
      t.name = model[i].name;
      t.dtype = DType::kF32;
      t.shape = model[i].shape;
      t.begin = static_cast<int64_t>(span.offset);
      t.end = static_cast<int64_t>(span.offset + span.count);
      t.data = storage->back().data();
      out.push_back(t);
    }
  }
  return out;
}

// `agree` for ranks simulated as threads: call k of every rank meets at a barrier and sees
// whether any rank passed false to its call k.
class ThreadAgreement {
 public:
  explicit ThreadAgreement(int world) : barrier_(world), failed_(64) {}
  AgreeFn ForRank() {
    auto calls = std::make_shared<int>(0);
    return [this, calls](bool ok) -> Result<bool> {
      const int call = (*calls)++;
      if (!ok) failed_[call].store(true);
      barrier_.arrive_and_wait();
      return !failed_[call].load();
    };
  }

 private:
  std::barrier<> barrier_;
  std::vector<std::atomic<bool>> failed_;
};

struct WorldSaveResult {
  std::vector<Status> statuses;  // per rank
  bool all_ok() const {
    for (const Status& s : statuses) {
      if (!s.ok()) return false;
    }
    return true;
  }
};

// Saves checkpoint `step` of `model` written by `world` simulated ranks. `tweak` may alter a
// rank's tensors (fault tests).
template <typename Tweak>
WorldSaveResult SaveWorld(const std::filesystem::path& checkpoints_dir, int64_t step, int world,
                          const std::vector<TensorSpec>& model, uint64_t seed, int keep_last,
                          Tweak tweak) {
  WorldSaveResult result;
  result.statuses.resize(world);
  ThreadAgreement agreement(world);
  const std::string tag = fmt::format("t{}x{}", step, seed);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank, agree = agreement.ForRank()] {
      std::vector<std::vector<float>> storage;
      std::vector<ShardTensor> tensors = RankTensors(model, seed, rank, world, &storage);
      tweak(rank, tensors);
      SaveRequest request;
      request.checkpoints_dir = checkpoints_dir;
      request.step = step;
      request.rank = rank;
      request.world = world;
      request.zero_stage = world > 1 ? 3 : 0;
      request.attempt_tag = tag;
      request.keep_last = keep_last;
      request.checksum_block_bytes = 64;  // several blocks per tensor, partial reads cross them
      request.config = {{"model", {{"family", "gpt2"}}}};
      request.states = {{"rng", {{"seed", seed}}}, {"step", step}};
      result.statuses[rank] = SaveCheckpoint(request, tensors, agree).status();
    });
  }
  for (auto& t : threads) t.join();
  return result;
}

inline WorldSaveResult SaveWorld(const std::filesystem::path& checkpoints_dir, int64_t step,
                                 int world, const std::vector<TensorSpec>& model, uint64_t seed,
                                 int keep_last = 0) {
  return SaveWorld(checkpoints_dir, step, world, model, seed, keep_last,
                   [](int, std::vector<ShardTensor>&) {});
}

}  // namespace sluice::checkpoint::testing
