#include "kernels/cpu/adam.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/adam_internal.h"

namespace sluice::kernels {
namespace {

const internal::AdamVariant& SelectedVariant() {
  switch (AdamIsa()) {
    case Isa::kAvx512:
      return internal::AdamAvx512Variant();
    case Isa::kAvx2:
      return internal::AdamAvx2Variant();
    case Isa::kScalar:
      break;
  }
  return internal::AdamScalarVariant();
}

void CheckArgs(const AdamTensors& t, const AdamHyperparams& hyper, const AdamThreading& threading,
               const char* caller) {
  std::string error = AdamStepArgsError(t, hyper, threading);
  if (error.empty()) return;
  // Kernels sit below runtime/ and its CHECK; this is the same contract, spelled out.
  std::fprintf(stderr, "%s: invalid arguments: %s\n", caller, error.c_str());
  std::abort();
}

}  // namespace

std::string AdamStepArgsError(const AdamTensors& t, const AdamHyperparams& hyper,
                              const AdamThreading& threading) {
  std::string error = AdamTensorsError(t);
  if (error.empty()) error = AdamHyperparamsError(hyper);
  if (error.empty()) error = AdamThreadingError(threading);
  return error;
}

Isa AdamIsa() { return SelectedIsa(); }

void AdamStep(const AdamTensors& t, const AdamHyperparams& hyper, float grad_scale,
              const AdamThreading& threading) {
  CheckArgs(t, hyper, threading, "AdamStep");
  const internal::AdamVariant& variant = SelectedVariant();
  const AdamStepConstants constants = MakeAdamStepConstants(hyper, grad_scale);
  ForEachAdamRange(t.count, t.params, threading, [&](size_t begin, size_t end) {
    variant.step(SliceAdamTensors(t, begin, end - begin), constants);
  });
}

void AdamMemoryProbe(const AdamTensors& t, const AdamThreading& threading) {
  CheckArgs(t, AdamHyperparams{}, threading, "AdamMemoryProbe");
  const internal::AdamVariant& variant = SelectedVariant();
  ForEachAdamRange(t.count, t.params, threading, [&](size_t begin, size_t end) {
    variant.probe(SliceAdamTensors(t, begin, end - begin));
  });
}

}  // namespace sluice::kernels
