// Runs one op scenario on three backends over the same fp32 inputs: the fp64 reference (the
// truth), the fp32 reference and the CPU kernel, and checks both fp32 runs against the truth
// within the scenario's declared tolerance (criterion: testing::ExpectClose).
//
// A scenario is a generic lambda taking a backend tag and returning its named outputs:
//   [&](auto backend) {
//     using T = typename decltype(backend)::T;
//     std::vector<T> x = Cast<T>(x_f32), y(n);
//     SLUICE_OPS_CALL(backend, GeluForward, x.data(), y.data(), n);
//     return Outputs{{"y", AsDouble(y)}};
//   }
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "tests/ops/ops_test_util.h"

namespace sluice::kernels::testing {

// How far the CPU kernels may stray from the fp64 references (relative), by kind of op.
inline constexpr double kActivationTol = 2e-6;
inline constexpr double kReductionTol = 1e-5;
inline constexpr double kAttentionTol = 1e-5;

struct CpuBackend {
  using T = float;
  static constexpr bool kCpu = true;
};

template <typename S>
struct RefBackend {
  using T = S;
  static constexpr bool kCpu = false;
};

using Outputs = std::vector<std::pair<std::string, std::vector<double>>>;

template <typename T, typename S>
std::vector<T> Cast(const std::vector<S>& values) {
  return std::vector<T>(values.begin(), values.end());
}

template <typename S>
std::vector<double> AsDouble(const std::vector<S>& values) {
  return Cast<double>(values);
}

template <typename Scenario>
void CompareBackends(Scenario scenario, double tol, const std::string& what) {
  const Outputs want = scenario(RefBackend<double>{});
  const Outputs ref32 = scenario(RefBackend<float>{});
  const Outputs cpu = scenario(CpuBackend{});
  ASSERT_EQ(want.size(), cpu.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ExpectClose(cpu[i].second, want[i].second, tol, what + " cpu " + want[i].first);
    ExpectClose(ref32[i].second, want[i].second, tol, what + " ref<float> " + want[i].first);
  }
}

// Runs body(name) once with each CPU GEMM backend (kernels/cpu/gemm.h: OpenBLAS and GemmFixed)
// in force, for the ops whose products go through it (linear, attention); restores the backend
// that was current.
template <typename Body>
void ForEachGemmBackend(Body body) {
  const cpu::GemmBackend saved = cpu::CurrentGemmBackend();
  for (cpu::GemmBackend backend : {cpu::GemmBackend::kBlas, cpu::GemmBackend::kDeterministic}) {
    const std::string name(cpu::GemmBackendName(backend));
    SCOPED_TRACE("device.cpu_gemm " + name);
    cpu::SetGemmBackend(backend);
    body(name);
  }
  cpu::SetGemmBackend(saved);
}

}  // namespace sluice::kernels::testing

// Calls op from kernels::cpu for the CPU backend, else the reference instantiation that the
// arguments' scalar type selects.
#define SLUICE_OPS_CALL(backend, op, ...)      \
  do {                                         \
    if constexpr (decltype(backend)::kCpu) {   \
      ::sluice::kernels::cpu::op(__VA_ARGS__); \
    } else {                                   \
      ::sluice::kernels::ref::op(__VA_ARGS__); \
    }                                          \
  } while (false)
