// The global, seeded order in which training windows are visited.
//
// A window is seq_len + 1 consecutive tokens (inputs, and targets shifted by one). Epoch e uses
// non-overlapping windows at stride seq_len starting from a phase p_e in [0, seq_len) drawn from
// (seed, e), and visits them in the order of an IndexPermutation keyed by (seed, e). The phase
// moves the window boundaries every epoch, so over several epochs every position of the corpus
// is seen at every depth of the context. Everything derives from (seed, epoch, position): the
// order does not depend on threads or ranks, and a state of three integers resumes it exactly.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/data/index_permutation.h"
#include "runtime/status.h"

namespace sluice::data {

struct SamplerState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t position = 0;  // global samples already drawn in `epoch`

  bool operator==(const SamplerState&) const = default;
};

class WindowSampler {
 public:
  // A sampler over a region of `num_tokens` tokens; needs num_tokens >= seq_len + 1.
  WindowSampler(int64_t num_tokens, int64_t seq_len, uint64_t seed);

  int64_t num_tokens() const { return num_tokens_; }
  int64_t seq_len() const { return seq_len_; }
  const SamplerState& state() const { return state_; }
  // Replaces the position (and seed) with a saved one; fails when it is out of range.
  Status Restore(const SamplerState& state);

  // The first window's token offset in epoch `epoch`.
  int64_t Phase(int64_t epoch) const;
  int64_t WindowsInEpoch(int64_t epoch) const;
  // The token offset (within the region) of the `index`-th window visited in `epoch`.
  int64_t WindowStart(int64_t epoch, int64_t index) const;

  // The next `count` windows of the global order (crossing into following epochs as needed),
  // as token offsets within the region; advances the state past them.
  std::vector<int64_t> Take(int64_t count);

 private:
  IndexPermutation EpochPermutation(int64_t epoch) const;

  int64_t num_tokens_;
  int64_t seq_len_;
  int64_t phase_range_;  // phases are drawn from [0, phase_range_)
  SamplerState state_;
};

}  // namespace sluice::data
