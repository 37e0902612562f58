#include "engine/model/model_pass.h"

#include <fmt/format.h>

#include <string>
#include <utility>

#include "engine/model/deferred_weight_grads.h"
#include "kernels/ref/ops_embedding.h"
#include "kernels/ref/ops_loss.h"

namespace sluice::model {

// One micro-batch between its Forward and its Backward. Destroyed in reverse order: the context
// (its saved activations) before the device copies of the ids it points at; every buffer is
// freed on the stream, after the work queued so far.
template <typename T>
struct ModelPass<T>::MicroBatch {
  DeviceBuffer tokens;   // first stage
  DeviceBuffer targets;  // last stage
  std::optional<ForwardContext<T>> ctx;
  Scratch<T> loss;  // last stage: the device scalar the loss is read back from
  // A split backward's: the weight gradients pending from BackwardInput to BackwardWeight.
  std::shared_ptr<DeferredWeightGrads<T>> deferred;
};

template <typename T>
ModelPass<T>::ModelPass(StageModules<T> modules) : m_(std::move(modules)) {}

template <typename T>
ModelPass<T>::~ModelPass() {
  if (open_) (void)Abort(OkStatus());
}

template <typename T>
Status ModelPass<T>::Begin(const ParameterBinding<T>* binding, UnitHooks* hooks, bool gradients,
                           std::shared_ptr<ActivationMeter> meter) {
  if (open_) {
    return FailedPreconditionError(
        "BeginPass on {} while a pass is open: end it with EndPass first", Describe());
  }
  open_ = true;
  gradients_ = gradients;
  binding_ = binding;
  hooks_ = hooks;
  meter_ = std::move(meter);
  return OkStatus();
}

template <typename T>
Status ModelPass<T>::Forward(int micro, const StageInput<T>& input, T* output) {
  if (!open_) {
    return FailedPreconditionError(
        "Forward of micro-batch {} on {} outside a pass: call BeginPass first", micro, Describe());
  }
  Status status = CheckInput(micro, input, output);
  if (status.ok()) status = ValidateBatch(input);
  if (status.ok() && binding_ == nullptr) {
    status = FailedPreconditionError(
        "the model was created without flat parameter buffers (external storage): set a "
        "parameter binding (Model::SetParameterBinding) before running it");
  }
  if (status.ok()) status = RunForward(micro, input, output);
  if (!status.ok()) return Abort(std::move(status));
  return OkStatus();
}

template <typename T>
Status ModelPass<T>::Backward(int micro, const StageOutputGrad<T>& grad, T* input_grad) {
  return RunBackwardOf("Backward", micro, grad, input_grad, /*split=*/false);
}

template <typename T>
Status ModelPass<T>::BackwardInput(int micro, const StageOutputGrad<T>& grad, T* input_grad) {
  return RunBackwardOf("BackwardInput", micro, grad, input_grad, /*split=*/true);
}

template <typename T>
Status ModelPass<T>::RunBackwardOf(std::string_view call, int micro, const StageOutputGrad<T>& grad,
                                   T* input_grad, bool split) {
  if (!open_) {
    return FailedPreconditionError(
        "{} of micro-batch {} on {} outside a pass: call BeginPass first", call, micro, Describe());
  }
  if (!gradients_) {
    return Abort(FailedPreconditionError(
        "{} of micro-batch {} on {} in a pass without gradients: begin the pass with "
        "gradients to run backward",
        call, micro, Describe()));
  }
  const auto it = in_flight_.find(micro);
  if (it == in_flight_.end()) {
    return Abort(FailedPreconditionError(
        "{} of micro-batch {} on {}: it {}; every micro-batch goes forward once, then "
        "backward once, in each pass (the pass is dropped)",
        call, micro, Describe(),
        forwarded_.contains(micro) ? "already went backward in this pass"
                                   : "was never forwarded in this pass"));
  }
  if (last() && grad.hidden != nullptr) {
    return Abort(InvalidArgumentError(
        "{} of micro-batch {} on {}: the last stage starts from the loss (loss_grad); "
        "an output gradient (hidden) is for the other stages",
        call, micro, Describe()));
  }
  if (!last() && grad.hidden == nullptr) {
    return Abort(InvalidArgumentError(
        "{} of micro-batch {} on {}: give the gradient of the stage's output "
        "(StageOutputGrad::hidden, [batch * seq, d_model] device memory) from the next stage",
        call, micro, Describe()));
  }
  if (first() != (input_grad == nullptr)) {
    return Abort(InvalidArgumentError(
        "{} of micro-batch {} on {}: {}", call, micro, Describe(),
        first() ? "the first stage's input is token ids, which have no gradient: pass no "
                  "input_grad"
                : "give device memory [batch * seq, d_model] for the gradient of the stage's "
                  "input (input_grad), which the previous stage's Backward takes"));
  }
  if (split && hooks_ != nullptr && !hooks_->SupportsSplitBackward()) {
    return Abort(FailedPreconditionError(
        "BackwardInput of micro-batch {} on {}: the model's unit hooks take a unit's gradients "
        "as final after its backward, which a split backward leaves to BackwardWeight (ZeRO's "
        "reductions do, UnitHooks::SupportsSplitBackward is false); run a fused backward "
        "(Backward) with them (the pass is dropped)",
        micro, Describe()));
  }
  std::unique_ptr<MicroBatch> done = std::move(it->second);
  in_flight_.erase(it);
  if (split) {
    done->deferred = std::make_shared<DeferredWeightGrads<T>>(meter_);
    done->ctx->DeferWeightGradsTo(done->deferred);
  }
  running_split_ = done->deferred.get();
  Status status = RunBackward(*done, grad, input_grad);
  running_split_ = nullptr;
  if (!status.ok()) return Abort(std::move(status));
  if (split) {
    // Only what the weight gradients read stays (deferred_weight_grads.h); the ids and targets
    // were read by the ops enqueued, the loss is read back from the host copy.
    done->ctx->ReleaseAll();
    done->tokens.Reset();
    done->targets.Reset();
    done->loss.Release();
    awaiting_weight_.emplace(micro, std::move(done));
  }
  return OkStatus();
}

template <typename T>
Status ModelPass<T>::BackwardWeight(int micro) {
  if (!open_) {
    return FailedPreconditionError(
        "BackwardWeight of micro-batch {} on {} outside a pass: call BeginPass first", micro,
        Describe());
  }
  const auto it = awaiting_weight_.find(micro);
  if (it == awaiting_weight_.end()) {
    return Abort(FailedPreconditionError(
        "BackwardWeight of micro-batch {} on {}: it {}; the weight gradients of a micro-batch "
        "follow its BackwardInput, once (the pass is dropped)",
        micro, Describe(),
        in_flight_.contains(micro)   ? "has not run BackwardInput"
        : forwarded_.contains(micro) ? "has no weight gradients pending (a fused Backward, or "
                                       "BackwardWeight ran already)"
                                     : "was never forwarded in this pass"));
  }
  const std::unique_ptr<MicroBatch> done = std::move(it->second);
  awaiting_weight_.erase(it);
  Status status = RunBackwardWeight(*done);
  if (!status.ok()) return Abort(std::move(status));
  return OkStatus();  // `done` frees what the tasks kept, on the stream after them
}

template <typename T>
Status ModelPass<T>::RunBackwardWeight(MicroBatch& micro) {
  ForwardContext<T>& ctx = *micro.ctx;
  // Unit by unit, in the order the backward-input ran them; no unit scope: dW reads no
  // parameter values.
  for (int u : micro.deferred->Units()) {
    SLUICE_RETURN_IF_ERROR(CallHook(&UnitHooks::BeforeBackwardWeight, u));
    SLUICE_RETURN_IF_ERROR(micro.deferred->RunUnit(u, ctx));
    SLUICE_RETURN_IF_ERROR(CallHook(&UnitHooks::AfterBackwardWeight, u));
  }
  return OkStatus();
}

template <typename T>
Status ModelPass<T>::CheckEnd() const {
  if (!open_) return FailedPreconditionError("EndPass on {} without a pass open", Describe());
  const auto ids = [](const auto& micro_batches) {
    std::string text;
    for (const auto& [id, micro] : micro_batches) {
      text += (text.empty() ? "" : ", ") + std::to_string(id);
    }
    return text;
  };
  if (!in_flight_.empty()) {
    return FailedPreconditionError(
        "EndPass on {} with micro-batches {} still in flight: run their Backward first (the pass "
        "is dropped; the gradients of the micro-batches that finished stay accumulated)",
        Describe(), ids(in_flight_));
  }
  if (!awaiting_weight_.empty()) {
    return FailedPreconditionError(
        "EndPass on {} with the weight gradients of micro-batches {} pending: run their "
        "BackwardWeight first (the pass is dropped; the gradients accumulated so far stay)",
        Describe(), ids(awaiting_weight_));
  }
  return OkStatus();
}

template <typename T>
std::map<int, double> ModelPass<T>::Finish() {
  std::map<int, double> losses;
  for (const auto& [id, value] : losses_) losses[id] = static_cast<double>(value);
  Clear();
  return losses;
}

template <typename T>
Status ModelPass<T>::CheckInput(int micro, const StageInput<T>& input, const T* output) const {
  if (forwarded_.contains(micro)) {
    return FailedPreconditionError(
        "Forward of micro-batch {} on {}: it was already forwarded in this pass; give each "
        "micro-batch of a pass its own id",
        micro, Describe());
  }
  const auto refuse = [&](std::string_view what) {
    return InvalidArgumentError("Forward of micro-batch {} on {}: {}", micro, Describe(), what);
  };
  if (first() && (input.tokens == nullptr || input.hidden != nullptr)) {
    return refuse("the first stage takes token ids (StageInput::tokens), not hidden states");
  }
  if (!first() && (input.tokens != nullptr || input.hidden == nullptr)) {
    return refuse(
        "a stage after the first takes the previous stage's output (StageInput::hidden, "
        "[batch * seq, d_model] device memory), not token ids");
  }
  if (!last() && (input.targets != nullptr || input.logits != nullptr || output == nullptr)) {
    return refuse(
        "a stage before the last gives hidden states: pass device memory [batch * seq, "
        "d_model] for them (output) and no targets or logits");
  }
  if (last() && output != nullptr) {
    return refuse("the last stage ends in the loss (or the logits): pass no output");
  }
  if (last() && input.logits != nullptr && gradients_) {
    return refuse("logits are read in passes without gradients only");
  }
  if (last() && input.logits == nullptr && input.targets == nullptr) {
    return refuse("the last stage needs the targets (StageInput::targets) for the loss");
  }
  return OkStatus();
}

template <typename T>
Status ModelPass<T>::ValidateBatch(const StageInput<T>& input) const {
  const ModelOptions& o = *m_.options;
  const int64_t batch = input.batch;
  const int64_t seq = input.seq;
  if (batch < 1 || seq < 1 || seq > o.seq_len) {
    return InvalidArgumentError(
        "batch of {} sequences of {} tokens: need at least one sequence of 1 to model.seq_len "
        "= {} tokens",
        batch, seq, o.seq_len);
  }
  const int64_t rows = batch * seq;
  if (input.tokens != nullptr) {
    if (const int64_t bad = kernels::FirstInvalidToken(input.tokens, rows, o.vocab_size);
        bad >= 0) {
      return InvalidArgumentError(
          "input token {} at row {}, position {} is outside the vocabulary [0, {}); check that "
          "the data was tokenized for model.vocab_size",
          input.tokens[bad], bad / seq, bad % seq, o.vocab_size);
    }
  }
  if (input.targets != nullptr) {
    if (const int64_t bad = kernels::FirstInvalidTarget(input.targets, rows, o.vocab_size);
        bad >= 0) {
      return InvalidArgumentError(
          "target {} at row {}, position {} is outside the vocabulary [0, {}) and is not the "
          "ignore index {}",
          input.targets[bad], bad / seq, bad % seq, o.vocab_size, kernels::kIgnoreIndex);
    }
  }
  return OkStatus();
}

template <typename T>
Status ModelPass<T>::RunForward(int micro_id, const StageInput<T>& input, T* output) {
  forwarded_.insert(micro_id);
  auto micro = std::make_unique<MicroBatch>();
  const int64_t rows = input.batch * input.seq;
  const int64_t width = m_.options->d_model;
  if (first()) {
    SLUICE_ASSIGN_OR_RETURN(micro->tokens, Upload(input.tokens, rows));
  }
  if (input.targets != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(micro->targets, Upload(input.targets, rows));
  }
  ForwardContext<T>& ctx =
      micro->ctx.emplace(*m_.ops, *m_.stream, *binding_, input.batch, input.seq,
                         micro->tokens.template data_as<int32_t>(), micro_id, meter_);
  Act<T> h;
  if (!first()) {
    // A copy of its own: the sender's buffer is free for the next micro-batch once this runs.
    SLUICE_ASSIGN_OR_RETURN(T * x, ctx.AllocateSaved(m_.input_id, rows * width));
    SLUICE_RETURN_IF_ERROR(ctx.Copy(Act<T>{const_cast<T*>(input.hidden), rows, width}, x));
    h = Act<T>{x, rows, width};
  }
  const int num_units = static_cast<int>(m_.units.size());
  for (int u = 0; u < num_units; ++u) {
    const int unit = m_.first_unit + u;
    SLUICE_RETURN_IF_ERROR(CallHook(&UnitHooks::BeforeForward, unit));
    SLUICE_RETURN_IF_ERROR(m_.scope->Enter(unit));
    SLUICE_ASSIGN_OR_RETURN(h, m_.units[u]->Forward(ctx, h));
    m_.scope->Leave(unit);
    if (!gradients_) {
      // Nothing will go backward, so the producer's activations can go now.
      if (u > 0) {
        for (int id : m_.units[u - 1]->AllModuleIds()) ctx.ReleaseSaved(id);
      } else if (!first()) {
        ctx.ReleaseSaved(m_.input_id);
      }
    }
    SLUICE_RETURN_IF_ERROR(CallHook(&UnitHooks::AfterForward, unit));
  }
  Device& device = m_.ops->device();
  if (!last()) {
    SLUICE_RETURN_IF_ERROR(ctx.Copy(h, output));
  } else if (input.logits != nullptr) {
    SLUICE_RETURN_IF_ERROR(device.CopyAsync(input.logits, h.data,
                                            static_cast<size_t>(h.numel()) * sizeof(T),
                                            CopyKind::kD2H, *m_.stream));
  } else {
    SLUICE_ASSIGN_OR_RETURN(micro->loss, ctx.AllocateScratch(1));
    SLUICE_RETURN_IF_ERROR(
        m_.loss->Forward(ctx, h, micro->targets.template data_as<int32_t>(), micro->loss.get()));
    // Read back at the end of the pass, with nothing in between waiting for it.
    T& value = losses_[micro_id];
    SLUICE_RETURN_IF_ERROR(
        device.CopyAsync(&value, micro->loss.get(), sizeof(T), CopyKind::kD2H, *m_.stream));
  }
  if (gradients_) in_flight_.emplace(micro_id, std::move(micro));
  return OkStatus();
}

template <typename T>
Status ModelPass<T>::RunBackward(MicroBatch& micro, const StageOutputGrad<T>& grad, T* input_grad) {
  ForwardContext<T>& ctx = *micro.ctx;
  const int64_t width = m_.options->d_model;
  Act<T> g;
  if (last()) {
    SLUICE_ASSIGN_OR_RETURN(
        g, m_.loss->Backward(ctx, micro.targets.template data_as<int32_t>(), grad.loss_grad));
  } else {
    // A copy of its own: a module's Backward may write over its dy.
    SLUICE_ASSIGN_OR_RETURN(T * dy, ctx.AllocateGrad(m_.output_grad_id, ctx.rows() * width));
    SLUICE_RETURN_IF_ERROR(ctx.Copy(Act<T>{const_cast<T*>(grad.hidden), ctx.rows(), width}, dy));
    g = Act<T>{dy, ctx.rows(), width};
  }
  const int num_units = static_cast<int>(m_.units.size());
  for (int u = num_units - 1; u >= 0; --u) {
    const int unit = m_.first_unit + u;
    if (micro.deferred != nullptr) micro.deferred->BeginUnit(unit);
    SLUICE_RETURN_IF_ERROR(CallHook(&UnitHooks::BeforeBackward, unit));
    SLUICE_RETURN_IF_ERROR(m_.scope->Enter(unit));
    SLUICE_ASSIGN_OR_RETURN(Act<T> next, m_.units[u]->Backward(ctx, g));
    m_.scope->Leave(unit);
    if (u + 1 < num_units) {
      ReleaseGradsOf(ctx, *m_.units[u + 1]);
    } else if (!last()) {
      ctx.ReleaseGrads(m_.output_grad_id);
    }
    g = next;
    SLUICE_RETURN_IF_ERROR(CallHook(&UnitHooks::AfterBackward, unit));
  }
  if (!first()) {
    SLUICE_RETURN_IF_ERROR(ctx.Copy(g, input_grad));
    ReleaseGradsOf(ctx, *m_.units[0]);
  }
  return OkStatus();
}

// At enqueue time: the hooks order their own work against the stream with events.
template <typename T>
Status ModelPass<T>::CallHook(Status (UnitHooks::*hook)(int), int unit) {
  return hooks_ == nullptr ? OkStatus() : (hooks_->*hook)(unit);
}

template <typename T>
Result<DeviceBuffer> ModelPass<T>::Upload(const int32_t* values, int64_t count) {
  Device& device = m_.ops->device();
  // Moving the outer vector keeps each copy's storage where the queued upload reads it.
  const std::vector<int32_t>& source = host_arrays_.emplace_back(values, values + count);
  const size_t bytes = static_cast<size_t>(count) * sizeof(int32_t);
  SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                          device.AllocateAsync(bytes, MemoryCategory::kActivations, *m_.stream));
  SLUICE_RETURN_IF_ERROR(
      device.CopyAsync(buffer.data(), source.data(), bytes, CopyKind::kH2D, *m_.stream));
  return buffer;
}

template <typename T>
Status ModelPass<T>::Abort(Status error) {
  in_flight_.clear();
  awaiting_weight_.clear();
  // Whatever happened, nothing may still read the pass's host copies or write its losses once
  // the pass is over.
  (void)m_.stream->Synchronize();
  Clear();
  return error;
}

template <typename T>
void ModelPass<T>::Clear() {
  m_.scope->LeaveAll();
  // What the checkpointed blocks still keep for a micro-batch (one of an evaluation pass, which
  // has no backward to let it go, or of a failed pass) is not needed any more.
  if (m_.checkpointed != nullptr) m_.checkpointed->DropMicroBatches();
  forwarded_.clear();
  host_arrays_.clear();
  losses_.clear();
  meter_.reset();
  binding_ = nullptr;
  hooks_ = nullptr;
  open_ = false;
}

template class ModelPass<float>;
template class ModelPass<double>;

}  // namespace sluice::model
