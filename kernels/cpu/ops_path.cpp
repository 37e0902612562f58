#include "kernels/cpu/ops_path.h"

#include <atomic>

#include "kernels/cpu/ops_vector_internal.h"

namespace sluice::kernels::cpu {
namespace {

std::atomic<int> current_path{static_cast<int>(OpsPath::kFixed)};

}  // namespace

void SetOpsPath(OpsPath path) { current_path.store(static_cast<int>(path)); }

OpsPath CurrentOpsPath() { return static_cast<OpsPath>(current_path.load()); }

Isa OpsVectorIsa() { return SelectedIsa(); }

std::string OpsPathName(OpsPath path) {
  if (path == OpsPath::kFixed) return "fixed";
  const Isa isa = OpsVectorIsa();
  if (isa == Isa::kScalar) return "vector (no AVX2: fixed)";
  return "vector " + std::string(IsaName(isa));
}

}  // namespace sluice::kernels::cpu

namespace sluice::kernels::cpu::internal {

const OpsVectorVariant* OpsVectorVariantFor(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return &OpsVectorAvx512Variant();
    case Isa::kAvx2:
      return &OpsVectorAvx2Variant();
    case Isa::kScalar:
      break;
  }
  return nullptr;
}

const OpsVectorVariant* ActiveOpsVectorVariant() {
  if (CurrentOpsPath() == OpsPath::kFixed) return nullptr;
  return OpsVectorVariantFor(OpsVectorIsa());
}

}  // namespace sluice::kernels::cpu::internal
