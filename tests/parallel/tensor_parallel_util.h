// What the tensor- and sequence-parallel tests on real ranks share: small models whose every split
// is real, a cpu device whose memory the host cannot touch, the process grid's tensor group, and
// the whole model's slices by global index. One test binary includes it.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/parallel/process_groups.h"
#include "engine/parallel/sequence_parallel_grads.h"
#include "engine/parallel/tensor_comm.h"
#include "runtime/device/device_factory.h"
#include "runtime/ops/ops_factory.h"
#include "runtime/trace.h"
#include "tests/common/test_world.h"
#include "tests/model/model_test_util.h"

namespace sluice::parallel {

using model::Family;
using model::HostAllocator;
using model::Model;
using model::ModelOptions;
using model::ParameterInfo;
using ::sluice::testing::TestWorld;

inline constexpr int64_t kBatch = 2;
inline constexpr uint64_t kSeed = 1234;

// Small, but every split is real: GPT-2 with 4 heads, Llama with 8 query and 4 key/value heads
// (two query heads per key/value head), untied; both split 2 and 4 ways.
inline ModelOptions Options(Family family) {
  ModelOptions o = model::testing::SmallOptions(family, /*n_layer=*/2, /*num_threads=*/1);
  if (family == Family::kLlama) {
    o.n_head = 8;
    o.n_kv_head = 4;
    o.d_model = 64;
    o.d_ff = 128;
    o.tie_embeddings = false;
  }
  return o;
}

// A cpu device whose memory the host cannot touch where the CPU allows it, and its cpu ops.
struct ProtectedOps {
  ProtectedOps() {
    DeviceOptions options;
    options.kind = DeviceKind::kCpu;
    options.memory_limit_bytes = uint64_t{256} << 20;
    options.memory_protection = DeviceMemoryProtection::kAuto;
    auto made = CreateDevice(options);
    SLUICE_CHECK(made.ok()) << made.status().ToString();
    device = std::move(made).value();
    auto cpu = ops::CreateOpsBackend(*device);
    SLUICE_CHECK(cpu.ok()) << cpu.status().ToString();
    ops = std::move(cpu).value();
    auto ref = ops::CreateReferenceOpsBackend(*device);
    SLUICE_CHECK(ref.ok()) << ref.status().ToString();
    reference = std::move(ref).value();
  }
  // The backend that computes in T: cpu for float, the fp64 reference for double.
  template <typename T>
  ops::OpsBackend& For() const {
    return std::is_same_v<T, float> ? *ops : *reference;
  }
  std::unique_ptr<Device> device;
  std::unique_ptr<ops::OpsBackend> ops;
  std::unique_ptr<ops::OpsBackend> reference;
};

inline ProtectedOps& SharedOps() {
  static ProtectedOps* const ops = new ProtectedOps();  // never destroyed: stream workers
  return *ops;
}

// The tensor sizes this world can run: 2, and the world's size when it is larger.
inline std::vector<int> TensorSizes() {
  std::vector<int> sizes;
  for (int t = 2; t <= TestWorld().size(); t *= 2) {
    if (TestWorld().size() % t == 0) sizes.push_back(t);
  }
  return sizes;
}

struct TensorSetup {
  std::unique_ptr<ProcessGroups> groups;
  ModelOptions options;
};

// The world as a grid of tensor groups of `tensor` ranks; `options` as this rank's piece.
inline TensorSetup MakeSetup(const ModelOptions& options, int tensor) {
  Result<ProcessGrid> grid = ProcessGrid::Create(TestWorld().size(), tensor, 1);
  SLUICE_CHECK(grid.ok()) << grid.status().ToString();
  auto groups = ProcessGroups::Create(TestWorld(), *grid);
  SLUICE_CHECK(groups.ok()) << groups.status().ToString();
  TensorSetup setup{std::move(groups).value(), options};
  setup.options.tensor_parallel_size = tensor;
  setup.options.tensor_parallel_rank = setup.groups->coords().tensor;
  return setup;
}

inline TensorSetup MakeSetup(Family family, int tensor) {
  return MakeSetup(Options(family), tensor);
}

template <typename T = float>
std::unique_ptr<Model<T>> Build(const ModelOptions& options, HostAllocator& host,
                                Comm* tensor = nullptr) {
  auto made =
      Model<T>::Create(options, host, SharedOps().For<T>(), model::ModelStorage::kFlat, tensor);
  SLUICE_CHECK(made.ok()) << made.status().ToString();
  return std::move(made).value();
}

inline ModelOptions Whole(ModelOptions options) {
  options.tensor_parallel_size = 1;
  options.tensor_parallel_rank = 0;
  options.sequence_parallel = false;
  return options;
}

template <typename T>
int WholeIndex(const Model<T>& whole, const ParameterInfo& piece) {
  const std::optional<int> index = whole.registry().Find(piece.name);
  SLUICE_CHECK(index.has_value()) << piece.name;
  return *index;
}

inline uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

template <typename T>
bool SameBits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Copies `whole`'s values into `piece` by global index.
template <typename T>
void CopySlices(const Model<T>& whole, Model<T>& piece) {
  const auto& params = piece.registry().parameters();
  for (int p = 0; p < static_cast<int>(params.size()); ++p) {
    if (params[p].is_alias()) continue;
    const int w = WholeIndex(whole, params[p]);
    for (int64_t e = 0; e < params[p].numel; ++e) {
      piece.SetParameterValue(p, e, whole.ParameterValue(w, params[p].sharding.GlobalIndex(e)));
    }
  }
}

// Sums the piece's partial gradients as the ZeRO engine does after a backward, through
// communicators of the test's own over the same ranks: the replicated ones' over the tensor group
// (sequence-parallel norms, a single key/value head), the shared key/value pieces' over their
// share groups. Nothing when there are none.
template <typename T>
void SumPartialGradients(const TensorSetup& setup, Model<T>& piece) {
  const model::ParameterRegistry& registry = piece.registry();
  if (!PartialGradParameters(registry).empty()) {
    auto comm = TensorComm::Create(setup.groups->tensor(), *SharedOps().device);
    SLUICE_CHECK(comm.ok()) << comm.status().ToString();
    const Status summed =
        ReduceSequenceParallelGrads<T>(**comm, piece.stream(), registry, piece.grads_data());
    SLUICE_CHECK(summed.ok()) << summed.ToString();
    SLUICE_CHECK(piece.stream().Synchronize().ok());
    SLUICE_CHECK((*comm)->Synchronize().ok());
  }
  if (!PartialGradParameters(registry, {}, PartialOver::kShareGroup).empty()) {
    auto group = SplitShareGroup(setup.groups->tensor(), ShareGroupSize(registry));
    SLUICE_CHECK(group.ok()) << group.status().ToString();
    auto comm = TensorComm::Create(**group, *SharedOps().device);
    SLUICE_CHECK(comm.ok()) << comm.status().ToString();
    const Status summed = ReduceSequenceParallelGrads<T>(
        **comm, piece.stream(), registry, piece.grads_data(), PartialOver::kShareGroup);
    SLUICE_CHECK(summed.ok()) << summed.ToString();
    SLUICE_CHECK(piece.stream().Synchronize().ok());
    SLUICE_CHECK((*comm)->Synchronize().ok());
  }
}

// Comm-lane events of the last pass whose names start with `prefix`, by name.
inline std::map<std::string, int> CommEvents(std::string_view prefix, uint64_t* bytes) {
  std::map<std::string, int> by_name;
  for (const TraceEvent& event : TraceRecorder::Global().Snapshot()) {
    if (event.lane != kTraceLaneComm || !event.name.starts_with(prefix)) continue;
    ++by_name[event.name];
    *bytes += event.bytes;
  }
  return by_name;
}

}  // namespace sluice::parallel
