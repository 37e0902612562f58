#include "engine/train/layer_timing.h"

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "runtime/check.h"

namespace sluice::train {
namespace {

// Records an event on the model's stream at each unit hook; a pass's events in hook order.
class UnitClock final : public model::UnitHooks {
 public:
  UnitClock(Device& device, Stream& stream) : device_(&device), stream_(&stream) {}

  Status BeforeForward(int) override { return Mark(); }
  Status AfterForward(int) override { return Mark(); }
  Status BeforeBackward(int) override { return Mark(); }
  Status AfterBackward(int) override { return Mark(); }

  void BeginPass() { used_ = 0; }
  // The time from mark `from` to mark `to` of the last pass (the stream has run it).
  Result<double> Ms(size_t from, size_t to) const {
    SLUICE_CHECK(to < used_ && from <= to) << from << " to " << to << " of " << used_;
    SLUICE_ASSIGN_OR_RETURN(const float ms, ElapsedMs(*events_[from], *events_[to]));
    return static_cast<double>(ms);
  }

 private:
  Status Mark() {
    if (used_ == events_.size()) {
      SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Event> event, device_->CreateEvent());
      events_.push_back(std::move(event));
    }
    return events_[used_++]->Record(*stream_);
  }

  Device* device_;
  Stream* stream_;
  std::vector<std::unique_ptr<Event>> events_;
  size_t used_ = 0;
};

// Every parameter in one device buffer of a constant value, its gradient in another.
class ProbeBinding final : public model::ParameterBinding<float> {
 public:
  static Result<std::unique_ptr<ProbeBinding>> Create(const model::ParameterRegistry& registry,
                                                      Device& device, Stream& stream) {
    auto binding = std::unique_ptr<ProbeBinding>(new ProbeBinding());
    const size_t bytes = static_cast<size_t>(registry.total_elements()) * sizeof(float);
    SLUICE_ASSIGN_OR_RETURN(binding->values_, device.Allocate(bytes, MemoryCategory::kParams));
    SLUICE_ASSIGN_OR_RETURN(binding->grads_, device.Allocate(bytes, MemoryCategory::kGrads));
    // 0x3c3c3c3c: about 0.0115, finite and not 0.
    SLUICE_RETURN_IF_ERROR(device.MemsetAsync(binding->values_.data(), 0x3c, bytes, stream));
    SLUICE_RETURN_IF_ERROR(device.MemsetAsync(binding->grads_.data(), 0, bytes, stream));
    for (const model::ParameterInfo& p : registry.parameters()) {
      binding->offsets_.push_back(p.offset);
    }
    return binding;
  }
  const float* Value(int param) const override {
    return values_.data_as<float>() + offsets_[param];
  }
  float* Grad(int param) const override { return grads_.data_as<float>() + offsets_[param]; }

 private:
  ProbeBinding() = default;
  DeviceBuffer values_;
  DeviceBuffer grads_;
  std::vector<int64_t> offsets_;
};

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

Result<estimate::LayerTimes> MeasureLayerTimes(const model::ModelOptions& options,
                                               ops::OpsBackend& ops, int64_t micro_batch,
                                               int64_t seq_len, int repeats) {
  SLUICE_CHECK_GE(repeats, 1);
  model::ModelOptions probe = options;
  probe.n_layer = 2;
  probe.tensor_parallel_size = 1;
  probe.tensor_parallel_rank = 0;
  probe.sequence_parallel = false;
  probe.param_dtype = DType::kF32;
  Device& device = ops.device();
  model::DeviceAllocator allocator(device);
  SLUICE_ASSIGN_OR_RETURN(
      std::unique_ptr<model::Model<float>> net,
      model::Model<float>::Create(probe, allocator, ops, model::ModelStorage::kExternal));
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<ProbeBinding> binding,
                          ProbeBinding::Create(net->registry(), device, net->stream()));
  net->SetParameterBinding(binding.get());
  UnitClock clock(device, net->stream());
  net->SetHooks(&clock);

  const int64_t rows = micro_batch * seq_len;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(probe.vocab_size - 1));
  std::vector<int32_t> tokens(static_cast<size_t>(rows));
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int32_t& t : tokens) t = token(rng);
  for (int32_t& t : targets) t = token(rng);

  // Marks of a pass: units 0..U-1 forward (before, after), then U-1..0 backward (before, after).
  const size_t units = net->units().size();
  const auto forward = [](size_t u) { return 2 * u; };
  const auto backward = [units](size_t u) { return 2 * units + 2 * (units - 1 - u); };
  std::vector<double> embeddings, block, tail;
  for (int pass = 0; pass <= repeats; ++pass) {
    clock.BeginPass();
    Result<double> loss = net->ForwardBackward(tokens.data(), targets.data(), micro_batch, seq_len);
    if (!loss.ok()) {
      net->SetHooks(nullptr);
      return Status(loss.status()).WithContext("timing the model's layers for the partition");
    }
    if (pass == 0) continue;  // warm-up: first-touch allocations, the BLAS's set-up
    std::vector<double> unit(units);
    for (size_t u = 0; u < units; ++u) {
      SLUICE_ASSIGN_OR_RETURN(const double f, clock.Ms(forward(u), forward(u) + 1));
      SLUICE_ASSIGN_OR_RETURN(const double b, clock.Ms(backward(u), backward(u) + 1));
      unit[u] = f + b;
    }
    // The loss runs between the head's forward and its backward.
    SLUICE_ASSIGN_OR_RETURN(const double loss_ms,
                            clock.Ms(forward(units - 1) + 1, backward(units - 1)));
    // Units: embeddings, blocks 0 and 1, final norm, LM head.
    SLUICE_CHECK_EQ(units, 5u);
    embeddings.push_back(unit[0]);
    block.push_back((unit[1] + unit[2]) / 2);
    tail.push_back(unit[3] + unit[4] + loss_ms);
  }
  net->SetHooks(nullptr);
  return estimate::LayerTimes{Median(embeddings), Median(block), Median(tail)};
}

}  // namespace sluice::train
