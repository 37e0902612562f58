// Deterministic parameter initialization, GPT-2 style: weights and embeddings normal(0, std),
// projections into the residual stream (attn c_proj / o_proj, mlp c_proj / down_proj)
// normal(0, std / sqrt(2 * n_layer)), biases zero, norm weights one.
//
// Counter-based: element e of a parameter is a pure function of (seed, the parameter's name, e),
// a splitmix64 hash turned into a normal by Box-Muller. Any thread, shard or layout computes the
// same value for the same element, so a ZeRO rank can initialize just its shard. The element is
// the global one (ParameterInfo::sharding): a tensor rank's piece holds bit for bit the values
// the whole model has there.
#pragma once

#include <cstdint>
#include <string_view>

#include "engine/model/parameter_registry.h"

namespace sluice::model {

// The per-parameter key the element values derive from.
uint64_t ParameterInitKey(uint64_t seed, std::string_view name);

// A standard normal value for (key, element).
double StandardNormal(uint64_t key, int64_t element);

// The initial value of `element` of a parameter of kind `kind` keyed by `key`.
double InitialValue(InitKind kind, uint64_t key, int64_t element, double std, int64_t n_layer);

// Writes elements [begin, end) of this rank's piece of parameter `info` (each the value of its
// global element) into dst[0 .. end - begin) (fp32 or fp64).
template <typename T>
void InitializeRange(const ParameterInfo& info, uint64_t seed, double std, int64_t n_layer,
                     int64_t begin, int64_t end, T* dst);

}  // namespace sluice::model
