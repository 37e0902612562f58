#include "kernels/cpu/lamb.h"

#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/lamb_internal.h"
#include "kernels/cpu/thread_binding.h"

namespace sluice::kernels {
namespace {

const internal::LambVariant& SelectedVariant() {
  switch (LambIsa()) {
    case Isa::kAvx512:
      return internal::LambAvx512Variant();
    case Isa::kAvx2:
      return internal::LambAvx2Variant();
    case Isa::kScalar:
      break;
  }
  return internal::LambScalarVariant();
}

void CheckArgs(const char* what, const LambTensors& t, const LambHyperparams& hyper,
               const AdamThreading& threading, bool need_grads) {
  if (std::string error = LambArgsError(t, hyper, threading, need_grads); !error.empty()) {
    // Kernels sit below runtime/ and its CHECK; this is the same contract, spelled out.
    std::fprintf(stderr, "%s: invalid arguments: %s\n", what, error.c_str());
    std::abort();
  }
}

}  // namespace

std::string LambArgsError(const LambTensors& t, const LambHyperparams& hyper,
                          const AdamThreading& threading, bool need_grads) {
  std::string error = LambTensorsError(t, need_grads);
  if (error.empty()) error = LambHyperparamsError(hyper);
  if (error.empty()) error = AdamThreadingError(threading);
  return error;
}

Isa LambIsa() { return SelectedIsa(); }

LambNormSums LambMoments(const LambTensors& t, const LambHyperparams& hyper, float grad_scale,
                         const AdamThreading& threading) {
  CheckArgs("LambMoments", t, hyper, threading, /*need_grads=*/true);
  const internal::LambVariant& variant = SelectedVariant();
  const LambStepConstants constants = MakeLambStepConstants(hyper, grad_scale);
  const size_t blocks = (t.count + kLambSumBlock - 1) / kLambSumBlock;
  std::vector<LambNormSums> block_sums(blocks);
  const size_t wanted = std::min<size_t>(AdamThreadCount(threading), blocks);
  if (wanted <= 1) {
    if (blocks > 0) {
      ScopedThreadBinding binding(threading.cpuset, 0);
      variant.moments(t, constants, block_sums.data());
    }
  } else {
#pragma omp parallel num_threads(static_cast <int>(wanted))
    {
      // Whole blocks per thread, over the team actually running (it may be smaller than asked).
      const size_t team = static_cast<size_t>(omp_get_num_threads());
      const size_t index = static_cast<size_t>(omp_get_thread_num());
      const size_t first = blocks * index / team;
      const size_t last = blocks * (index + 1) / team;
      if (first < last) {
        ScopedThreadBinding binding(threading.cpuset, static_cast<int>(index));
        const size_t begin = first * kLambSumBlock;
        const size_t end = std::min(t.count, last * kLambSumBlock);
        variant.moments(SliceLambTensors(t, begin, end - begin), constants,
                        block_sums.data() + first);
      }
    }
  }
  LambNormSums total;
  for (const LambNormSums& block : block_sums) {
    total.param_sq += block.param_sq;
    total.update_sq += block.update_sq;
  }
  return total;
}

void LambApply(const LambTensors& t, const LambHyperparams& hyper, float trust,
               const AdamThreading& threading) {
  CheckArgs("LambApply", t, hyper, threading, /*need_grads=*/false);
  const internal::LambVariant& variant = SelectedVariant();
  const LambStepConstants constants = MakeLambStepConstants(hyper, 1.0f);
  const float scale = LambApplyScale(constants, trust);
  ForEachAdamRange(t.count, t.params, threading, [&](size_t begin, size_t end) {
    variant.apply(SliceLambTensors(t, begin, end - begin), constants, scale);
  });
}

}  // namespace sluice::kernels
