// Shared helpers of the model tests: a parameter binding over plain vectors, seeded random
// fills, and the central finite-difference check in fp64.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "engine/model/forward_context.h"
#include "engine/model/model.h"
#include "engine/model/parameter_registry.h"
#include "engine/train/run_setup.h"
#include "runtime/device.h"
#include "tests/common/test_ops.h"

namespace sluice::model::testing {

// Parameters and gradients of a standalone module, in flat vectors laid out by the registry.
template <typename T>
class VectorBinding final : public ParameterBinding<T> {
 public:
  explicit VectorBinding(const ParameterRegistry& registry)
      : registry_(&registry), values(registry.total_elements()), grads(registry.total_elements()) {}

  const T* Value(int param) const override {
    return values.data() + registry_->parameter(param).offset;
  }
  T* Grad(int param) const override {
    return const_cast<T*>(grads.data()) + registry_->parameter(param).offset;
  }

  const ParameterRegistry* registry_;
  std::vector<T> values;
  std::vector<T> grads;
};

// A copy of `host` in stream-ordered device memory of `stream`, complete on return.
template <typename V>
DeviceBuffer ToDevice(Stream& stream, const std::vector<V>& host) {
  Device& device = stream.device();
  auto buffer = device.AllocateAsync(host.size() * sizeof(V), MemoryCategory::kActivations, stream);
  SLUICE_CHECK(buffer.ok()) << buffer.status().ToString();
  SLUICE_CHECK(
      device.CopyAsync(buffer->data(), host.data(), host.size() * sizeof(V), CopyKind::kH2D, stream)
          .ok());
  const Status synced = stream.Synchronize();
  SLUICE_CHECK(synced.ok()) << synced.ToString();
  return std::move(buffer).value();
}

// `count` elements of device memory, read back after everything enqueued on `stream`.
template <typename V>
std::vector<V> ToHost(Stream& stream, const V* data, int64_t count) {
  std::vector<V> host(static_cast<size_t>(count));
  SLUICE_CHECK(stream.device()
                   .CopyAsync(host.data(), data, host.size() * sizeof(V), CopyKind::kD2H, stream)
                   .ok());
  const Status synced = stream.Synchronize();
  SLUICE_CHECK(synced.ok()) << synced.ToString();
  return host;
}

inline std::vector<double> RandomVector(int64_t n, uint64_t seed, double lo = -1.0,
                                        double hi = 1.0) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> out(static_cast<size_t>(n));
  for (double& v : out) v = dist(engine);
  return out;
}

inline std::vector<int32_t> RandomTokens(int64_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t& v : out) v = dist(engine);
  return out;
}

// Central difference of f at x[i] with step h (x[i] is restored).
inline double CentralDifference(const std::function<double()>& f, double* x, double h) {
  const double saved = *x;
  *x = saved + h;
  const double plus = f();
  *x = saved - h;
  const double minus = f();
  *x = saved;
  return (plus - minus) / (2.0 * h);
}

// The fp64 finite-difference criterion: analytic and numeric agree to 1e-6 relative to the
// larger of the two (and 1e-9 absolute). Central differences with h = 1e-5 carry an O(h^2)
// truncation error of about 1e-10 and a rounding error of about 1e-16 / 1e-5.
inline void ExpectGradientsAgree(double analytic, double numeric, const std::string& what) {
  const double tolerance = 1e-9 + 1e-6 * std::max(std::abs(analytic), std::abs(numeric));
  EXPECT_NEAR(analytic, numeric, tolerance) << what;
}

inline constexpr double kStep = 1e-5;

// Tiny model options shared by the whole-model tests: B = 2, T = 5, d = 8, 2 heads, vocab 11.
inline ModelOptions TinyOptions(Family family) {
  ModelOptions o = train::DefaultModelOptions();
  o.family = family;
  o.n_layer = 2;
  o.n_head = 2;
  o.n_kv_head = family == Family::kLlama ? 1 : 2;
  o.d_model = 8;
  o.d_ff = 12;
  o.vocab_size = 11;
  o.seq_len = 7;
  o.tie_embeddings = family == Family::kGpt2;
  o.init_std = 0.3;
  o.num_threads = 1;
  return o;
}

// A small model that still exercises the blocked and BLAS paths of the CPU ops: d = 32, 4 heads,
// d_ff 64, vocab 50, T = 16.
inline ModelOptions SmallOptions(Family family, int64_t n_layer = 2, int num_threads = 2) {
  ModelOptions o = TinyOptions(family);
  o.n_layer = n_layer;
  o.n_head = 4;
  o.n_kv_head = family == Family::kLlama ? 2 : 4;
  o.d_model = 32;
  o.d_ff = 64;
  o.vocab_size = 50;
  o.seq_len = 16;
  o.init_std = 0.1;
  o.num_threads = num_threads;
  return o;
}

// Sets every parameter element to a random value around its initial kind (weights around 0,
// norm weights around 1), so no bias is exactly zero and no norm weight exactly one.
template <typename T>
void Randomize(Model<T>& model, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> dist(-0.5, 0.5);
  const auto& params = model.registry().parameters();
  for (int p = 0; p < static_cast<int>(params.size()); ++p) {
    if (params[p].is_alias()) continue;
    const double center = params[p].init == InitKind::kOnes ? 1.0 : 0.0;
    for (int64_t e = 0; e < params[p].numel; ++e) {
      model.SetParameterValue(p, e, static_cast<T>(center + dist(engine)));
    }
  }
}

}  // namespace sluice::model::testing
