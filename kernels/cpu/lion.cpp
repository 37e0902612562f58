#include "kernels/cpu/lion.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/lion_internal.h"

namespace sluice::kernels {
namespace {

const internal::LionVariant& SelectedVariant() {
  switch (LionIsa()) {
    case Isa::kAvx512:
      return internal::LionAvx512Variant();
    case Isa::kAvx2:
      return internal::LionAvx2Variant();
    case Isa::kScalar:
      break;
  }
  return internal::LionScalarVariant();
}

}  // namespace

std::string LionStepArgsError(const LionTensors& t, const LionHyperparams& hyper,
                              const AdamThreading& threading) {
  std::string error = LionTensorsError(t);
  if (error.empty()) error = LionHyperparamsError(hyper);
  if (error.empty()) error = AdamThreadingError(threading);
  return error;
}

Isa LionIsa() { return SelectedIsa(); }

void LionStep(const LionTensors& t, const LionHyperparams& hyper, float grad_scale,
              const AdamThreading& threading) {
  if (std::string error = LionStepArgsError(t, hyper, threading); !error.empty()) {
    // Kernels sit below runtime/ and its CHECK; this is the same contract, spelled out.
    std::fprintf(stderr, "LionStep: invalid arguments: %s\n", error.c_str());
    std::abort();
  }
  const internal::LionVariant& variant = SelectedVariant();
  const LionStepConstants constants = MakeLionStepConstants(hyper, grad_scale);
  ForEachAdamRange(t.count, t.params, threading, [&](size_t begin, size_t end) {
    variant.step(SliceLionTensors(t, begin, end - begin), constants);
  });
}

}  // namespace sluice::kernels
