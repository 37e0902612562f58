#include "engine/parallel/sequence_parallel_grads.h"

#include <string>

namespace sluice::parallel {

std::vector<int> PartialGradParameters(const model::ParameterRegistry& registry,
                                       std::span<const int> params) {
  std::vector<int> all;
  if (params.empty()) {
    for (int p = 0; p < static_cast<int>(registry.parameters().size()); ++p) all.push_back(p);
    params = all;
  }
  std::vector<int> partial;
  for (const int p : params) {
    const model::ParameterInfo& info = registry.parameter(p);
    if (!info.is_alias() && info.sharding.partial_grad) partial.push_back(p);
  }
  return partial;
}

template <typename T>
Status ReduceSequenceParallelGrads(TensorComm& comm, Stream& stream,
                                   const model::ParameterRegistry& registry,
                                   const std::function<T*(int param)>& grad,
                                   std::span<const int> params) {
  // Runs of gradients that lie end to end, each one all-reduce.
  T* run = nullptr;
  int64_t run_count = 0;
  std::string run_name;
  const auto flush = [&]() -> Status {
    if (run == nullptr) return OkStatus();
    Status status = comm.AllReduce(stream, run, run_count, "tp.sp.grads " + run_name);
    run = nullptr;
    run_count = 0;
    if (!status.ok()) status.WithContext("summing the partial gradients of " + run_name);
    return status;
  };
  for (const int p : PartialGradParameters(registry, params)) {
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
                                   const model::ParameterRegistry& registry, T* flat_grads) {
  const std::function<T*(int)> grad = [&](int p) {
    return flat_grads + registry.parameter(p).offset;
  };
  return ReduceSequenceParallelGrads<T>(comm, stream, registry, grad);
}

template Status ReduceSequenceParallelGrads<float>(TensorComm&, Stream&,
                                                   const model::ParameterRegistry&,
                                                   const std::function<float*(int)>&,
                                                   std::span<const int>);
template Status ReduceSequenceParallelGrads<double>(TensorComm&, Stream&,
                                                    const model::ParameterRegistry&,
                                                    const std::function<double*(int)>&,
                                                    std::span<const int>);
template Status ReduceSequenceParallelGrads<float>(TensorComm&, Stream&,
                                                   const model::ParameterRegistry&, float*);
template Status ReduceSequenceParallelGrads<double>(TensorComm&, Stream&,
                                                    const model::ParameterRegistry&, double*);

}  // namespace sluice::parallel
