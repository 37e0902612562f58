// How optimizer state moves in and out of a ZeRO optimizer piece by piece (checkpoint saves and
// restores): a sink receives the state, a source fills it, one tile (or less) at a time in
// increasing shard order, so neither side needs the whole shard in memory.
#pragma once

#include <cstdint>
#include <functional>

#include "runtime/status.h"

namespace sluice::offload {

// One piece of a state stream: elements [begin, begin + n) of the shard, fp32. exp_avg_sq is null
// when the optimizer keeps no second moment (Lion).
using OptimizerStateSink = std::function<Status(int64_t begin, int64_t n, const float* master,
                                                const float* exp_avg, const float* exp_avg_sq)>;

// Fills elements [begin, begin + n) of the state (each pointer: n fp32 values; exp_avg_sq null
// for Lion, which has none): a restore's source, asked for one tile (or less) at a time in
// increasing order.
using OptimizerStateSource = std::function<Status(int64_t begin, int64_t n, float* master,
                                                  float* exp_avg, float* exp_avg_sq)>;

// OK, or OutOfRange naming [begin, begin + n) and the shard of `count` elements it leaves.
Status CheckStateRange(int64_t begin, int64_t n, int64_t count);

// A sink copying the pieces of a stream over [begin, ...) into arrays indexed from `begin`
// (a null array, or a tensor the stream does not have, skips that tensor).
OptimizerStateSink StateArraysSink(int64_t begin, float* master, float* exp_avg, float* exp_avg_sq);

// A source reading whole-shard arrays (each indexed by shard element).
OptimizerStateSource StateArraysSource(const float* master, const float* exp_avg,
                                       const float* exp_avg_sq);

}  // namespace sluice::offload
