#include "engine/parallel/sequence_parallel_grads.h"

#include <fmt/format.h>

#include <string>

#include "runtime/check.h"

namespace sluice::parallel {

std::vector<int> PartialGradParameters(const model::ParameterRegistry& registry,
                                       std::span<const int> params, PartialOver over) {
  std::vector<int> all;
  if (params.empty()) {
    for (int p = 0; p < static_cast<int>(registry.parameters().size()); ++p) all.push_back(p);
    params = all;
  }
  std::vector<int> partial;
  for (const int p : params) {
    const model::ParameterInfo& info = registry.parameter(p);
    const bool shared = info.sharding.shared();
    if (!info.is_alias() && info.sharding.partial_grad &&
        shared == (over == PartialOver::kShareGroup)) {
      partial.push_back(p);
    }
  }
  return partial;
}

int64_t ShareGroupSize(const model::ParameterRegistry& registry) {
  int64_t size = 1;
  for (const int p : PartialGradParameters(registry, {}, PartialOver::kShareGroup)) {
    const TensorSharding& s = registry.parameter(p).sharding;
    SLUICE_CHECK(size == 1 || size == s.replicas) << registry.parameter(p).name << " is shared by "
                                                  << s.replicas << " ranks, another by " << size;
    size = s.replicas;
  }
  return size;
}

Result<std::unique_ptr<Comm>> SplitShareGroup(Comm& tensor, int64_t replicas) {
  SLUICE_CHECK(replicas >= 1 && tensor.size() % replicas == 0)
      << "share groups of " << replicas << " in a tensor group of " << tensor.size();
  Result<std::unique_ptr<Comm>> group =
      tensor.Split(static_cast<int>(tensor.rank() / replicas), tensor.rank());
  if (!group.ok()) {
    return Status(group.status())
        .WithContext(
            fmt::format("splitting {} into share groups of {} ranks", tensor.name(), replicas));
  }
  return group;
}

template <typename T>
Status ReduceSequenceParallelGrads(TensorComm& comm, Stream& stream,
                                   const model::ParameterRegistry& registry,
                                   const std::function<T*(int param)>& grad,
                                   std::span<const int> params, PartialOver over) {
  const std::string label = over == PartialOver::kTensorGroup ? "tp.sp.grads " : "tp.kv.grads ";
  // Runs of gradients that lie end to end, each one all-reduce.
  T* run = nullptr;
  int64_t run_count = 0;
  std::string run_name;
  const auto flush = [&]() -> Status {
    if (run == nullptr) return OkStatus();
    Status status = comm.AllReduce(stream, run, run_count, label + run_name);
    run = nullptr;
    run_count = 0;
    if (!status.ok()) status.WithContext("summing the partial gradients of " + run_name);
    return status;
  };
  for (const int p : PartialGradParameters(registry, params, over)) {
    T* g = grad(p);
    if (g == nullptr) continue;
    const model::ParameterInfo& info = registry.parameter(p);
    if (run != nullptr && run + run_count == g) {
      run_count += info.numel;
      continue;
    }
    SLUICE_RETURN_IF_ERROR(flush());
    run = g;
    run_count = info.numel;
    run_name = info.name;
  }
  return flush();
}

template <typename T>
Status ReduceSequenceParallelGrads(TensorComm& comm, Stream& stream,
                                   const model::ParameterRegistry& registry, T* flat_grads,
                                   PartialOver over) {
  const std::function<T*(int)> grad = [&](int p) {
    return flat_grads + registry.parameter(p).offset;
  };
  return ReduceSequenceParallelGrads<T>(comm, stream, registry, grad, {}, over);
}

template Status ReduceSequenceParallelGrads<float>(TensorComm&, Stream&,
                                                   const model::ParameterRegistry&,
                                                   const std::function<float*(int)>&,
                                                   std::span<const int>, PartialOver);
template Status ReduceSequenceParallelGrads<double>(TensorComm&, Stream&,
                                                    const model::ParameterRegistry&,
                                                    const std::function<double*(int)>&,
                                                    std::span<const int>, PartialOver);
template Status ReduceSequenceParallelGrads<float>(TensorComm&, Stream&,
                                                   const model::ParameterRegistry&, float*,
                                                   PartialOver);
template Status ReduceSequenceParallelGrads<double>(TensorComm&, Stream&,
                                                    const model::ParameterRegistry&, double*,
                                                    PartialOver);

}  // namespace sluice::parallel
