#include "engine/parallel/tensor_comm.h"

#include <type_traits>
#include <utility>

namespace sluice::parallel {

Result<std::unique_ptr<TensorComm>> TensorComm::Create(Comm& tensor, Device& device) {
  Result<std::unique_ptr<Comm>> own = tensor.Split(0, tensor.rank());
  if (!own.ok()) {
    return Status(own.status()).WithContext("splitting the tensor-parallel communicator");
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<zero::CommQueue> queue,
                          zero::CommQueue::Create(device, std::move(own).value(),
                                                  /*overlap=*/true));
  return std::unique_ptr<TensorComm>(new TensorComm(std::move(queue)));
}

template <typename T>
Status TensorComm::AllReduce(Stream& compute, T* data, int64_t count, std::string name) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  constexpr DType kDType = std::is_same_v<T, float> ? DType::kF32 : DType::kF64;
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(compute));
  const auto n = static_cast<size_t>(count);
  SLUICE_ASSIGN_OR_RETURN(
      zero::CommTicket ticket,
      queue_->Enqueue(std::move(name), n * sizeof(T), [data, n](Comm& comm) -> Status {
        return comm.AllReduce(data, n, kDType, ReduceOp::kSum);
      }));
  return queue_->Join(compute, ticket);
}

template <typename T>
Status TensorComm::AllGather(Stream& compute, T* full, int64_t count, std::string name) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  constexpr DType kDType = std::is_same_v<T, float> ? DType::kF32 : DType::kF64;
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(compute));
  const auto n = static_cast<size_t>(count);
  const auto total = n * static_cast<size_t>(size());
  const T* mine = full + n * static_cast<size_t>(rank());
  SLUICE_ASSIGN_OR_RETURN(zero::CommTicket ticket,
                          queue_->Enqueue(std::move(name), total * sizeof(T),
                                          [full, mine, total](Comm& comm) -> Status {
                                            return comm.AllGather(mine, full, total, kDType);
                                          }));
  return queue_->Join(compute, ticket);
}

template <typename T>
Status TensorComm::ReduceScatter(Stream& compute, T* full, T* shard, int64_t count,
                                 std::string name) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  constexpr DType kDType = std::is_same_v<T, float> ? DType::kF32 : DType::kF64;
  SLUICE_RETURN_IF_ERROR(queue_->OrderAfter(compute));
  const auto total = static_cast<size_t>(count) * static_cast<size_t>(size());
  SLUICE_ASSIGN_OR_RETURN(zero::CommTicket ticket,
                          queue_->Enqueue(std::move(name), total * sizeof(T),
                                          [full, shard, total](Comm& comm) -> Status {
                                            return comm.ReduceScatter(full, shard, total, kDType,
                                                                      ReduceOp::kSum);
                                          }));
  return queue_->Join(compute, ticket);
}

template Status TensorComm::AllReduce<float>(Stream&, float*, int64_t, std::string);
template Status TensorComm::AllReduce<double>(Stream&, double*, int64_t, std::string);
template Status TensorComm::AllGather<float>(Stream&, float*, int64_t, std::string);
template Status TensorComm::AllGather<double>(Stream&, double*, int64_t, std::string);
template Status TensorComm::ReduceScatter<float>(Stream&, float*, float*, int64_t, std::string);
template Status TensorComm::ReduceScatter<double>(Stream&, double*, double*, int64_t, std::string);

}  // namespace sluice::parallel
