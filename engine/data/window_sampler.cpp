#include "engine/data/window_sampler.h"

#include "runtime/check.h"

namespace sluice::data {
namespace {

// Distinct streams of the seed for permutation keys and phases.
constexpr uint64_t kPermutationStream = 0x7065726D75746521ull;
constexpr uint64_t kPhaseStream = 0x7068617365212121ull;

uint64_t EpochKey(uint64_t seed, int64_t epoch, uint64_t stream) {
  return Mix64(Mix64(seed ^ stream) + static_cast<uint64_t>(epoch));
}

}  // namespace

WindowSampler::WindowSampler(int64_t num_tokens, int64_t seq_len, uint64_t seed)
    : num_tokens_(num_tokens), seq_len_(seq_len) {
  SLUICE_CHECK_GE(seq_len, 1);
  SLUICE_CHECK_GE(num_tokens, seq_len + 1) << "no window fits";
  state_.seed = seed;
  // With a single window at phase 0, a phase past the leftover tokens would leave none; a
  // longer region always keeps at least one.
  const int64_t windows_at_zero = (num_tokens - 1) / seq_len;
  const int64_t leftover = (num_tokens - 1) - windows_at_zero * seq_len;
  phase_range_ = windows_at_zero >= 2 ? seq_len : leftover + 1;
}

Status WindowSampler::Restore(const SamplerState& state) {
  if (state.epoch < 0 || state.position < 0 || state.position > WindowsInEpoch(state.epoch)) {
    return InvalidArgumentError(
        "sampler state epoch {} position {} is out of range for {} tokens at seq_len {}",
        state.epoch, state.position, num_tokens_, seq_len_);
  }
  state_ = state;
  return OkStatus();
}

int64_t WindowSampler::Phase(int64_t epoch) const {
  return static_cast<int64_t>(EpochKey(state_.seed, epoch, kPhaseStream) %
                              static_cast<uint64_t>(phase_range_));
}

int64_t WindowSampler::WindowsInEpoch(int64_t epoch) const {
  return (num_tokens_ - 1 - Phase(epoch)) / seq_len_;
}

IndexPermutation WindowSampler::EpochPermutation(int64_t epoch) const {
  return IndexPermutation(static_cast<uint64_t>(WindowsInEpoch(epoch)),
                          EpochKey(state_.seed, epoch, kPermutationStream));
}

int64_t WindowSampler::WindowStart(int64_t epoch, int64_t index) const {
  const IndexPermutation perm = EpochPermutation(epoch);
  return Phase(epoch) + static_cast<int64_t>(perm(static_cast<uint64_t>(index))) * seq_len_;
}

std::vector<int64_t> WindowSampler::Take(int64_t count) {
  SLUICE_CHECK_GE(count, 0);
  std::vector<int64_t> starts;
  starts.reserve(static_cast<size_t>(count));
  while (static_cast<int64_t>(starts.size()) < count) {
    const int64_t windows = WindowsInEpoch(state_.epoch);
    if (state_.position >= windows) {
      ++state_.epoch;
      state_.position = 0;
      continue;
    }
    const IndexPermutation perm = EpochPermutation(state_.epoch);
    const int64_t phase = Phase(state_.epoch);
    while (state_.position < windows && static_cast<int64_t>(starts.size()) < count) {
      const auto k = perm(static_cast<uint64_t>(state_.position++));
      starts.push_back(phase + static_cast<int64_t>(k) * seq_len_);
    }
  }
  return starts;
}

}  // namespace sluice::data
