// The passes of one chunk of a Model (model.h, "Passes" and "Chunks"): one pass at a time,
// holding any number of micro-batches in flight, each with its own ForwardContext (its saved
// activations), its token ids and targets on the device, and its loss. Internal to engine/model:
// Model owns one per chunk and forwards its BeginPass / Forward / Backward / EndPass here; the
// end of a pass is the model's (the hooks' BeforePassEnd once, one synchronize), so End is split
// into CheckEnd and Finish around it.
//
// A split backward (zero-bubble B/W): BackwardInput runs the backward with the Linears' weight
// gradients deferred (deferred_weight_grads.h) and keeps the micro-batch, holding only what they
// read, until BackwardWeight runs them and lets it go. Backward (fused) is the pass it always was.
//
// Host memory a micro-batch brings (token ids, targets) is copied at once, and those copies, like
// the host values the losses are read back into, live until the pass ends: the stream may run the
// uploads and read-backs after the calls that enqueued them have returned.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "engine/model/checkpointed_inputs.h"
#include "engine/model/cross_entropy.h"
#include "engine/model/deferred_weight_grads.h"
#include "engine/model/forward_context.h"
#include "engine/model/model.h"
#include "engine/model/model_stage.h"
#include "engine/model/module.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace sluice::model {

// Makes a unit's parameters readable through the pass's binding while the unit runs (the model
// widens bf16 storage there).
class UnitScope {
 public:
  virtual ~UnitScope() = default;
  virtual Status Enter(int unit) = 0;
  virtual void Leave(int unit) = 0;
  // After a pass ended or failed, its stream drained: lets go what a failed unit left entered.
  virtual void LeaveAll() = 0;
};

// What a stage's passes run, owned by the model and outliving them.
template <typename T>
struct StageModules {
  const ModelOptions* options = nullptr;
  ModelStage stage;
  ops::OpsBackend* ops = nullptr;
  Stream* stream = nullptr;
  std::vector<Module<T>*> units;  // in trace order
  int first_unit = 0;  // the model's unit index of units[0]: what the hooks and scope are given
  CrossEntropyLoss<T>* loss = nullptr;            // the last stage's
  CheckpointedInputs<T>* checkpointed = nullptr;  // or null
  int input_id = -1;        // not the first stage: the key of its copy of the received input
  int output_grad_id = -1;  // not the last stage: the key of its copy of the output gradient
  UnitScope* scope = nullptr;
};

template <typename T>
class ModelPass {
 public:
  explicit ModelPass(StageModules<T> modules);
  ~ModelPass();

  // `binding` (null: the model has no parameters to run on, which Forward reports) and `hooks`
  // (may be null) must outlive the pass; `meter` counts the activations of the model's chunks.
  Status Begin(const ParameterBinding<T>* binding, UnitHooks* hooks, bool gradients,
               std::shared_ptr<ActivationMeter> meter);
  Status Forward(int micro, const StageInput<T>& input, T* output);
  Status Backward(int micro, const StageOutputGrad<T>& grad, T* input_grad);
  Status BackwardInput(int micro, const StageOutputGrad<T>& grad, T* input_grad);
  Status BackwardWeight(int micro);
  // The pass may end: FailedPrecondition naming the micro-batches still in flight or awaiting
  // their BackwardWeight (the pass is not dropped here: Abort it).
  Status CheckEnd() const;
  // After CheckEnd and the stream's synchronize: ends the pass with the losses of the
  // micro-batches forwarded (last stage; empty elsewhere, and for micro-batches whose logits were
  // read instead), by micro-batch.
  std::map<int, double> Finish();
  // Ends an open pass after `error` (see Abort below); returns `error`.
  Status Drop(Status error) { return open_ ? Abort(std::move(error)) : error; }

  bool open() const { return open_; }
  int in_flight() const { return static_cast<int>(in_flight_.size()); }
  // Within a BackwardInput (its hooks): the parameters whose gradients `unit` deferred.
  std::vector<int> DeferredWeightParams(int unit) const {
    return running_split_ != nullptr ? running_split_->ParamsOf(unit) : std::vector<int>();
  }
  // Micro-batches between their BackwardInput and BackwardWeight.
  int awaiting_weight() const { return static_cast<int>(awaiting_weight_.size()); }

 private:
  struct MicroBatch;

  bool first() const { return IsFirstStage(m_.stage); }
  bool last() const { return IsLastStage(*m_.options, m_.stage); }
  std::string Describe() const { return DescribeModelStage(*m_.options, m_.stage); }
  Status CheckInput(int micro, const StageInput<T>& input, const T* output) const;
  Status ValidateBatch(const StageInput<T>& input) const;
  Status RunForward(int micro, const StageInput<T>& input, T* output);
  // Backward (split false) or BackwardInput (true), `call` naming it in errors.
  Status RunBackwardOf(std::string_view call, int micro, const StageOutputGrad<T>& grad,
                       T* input_grad, bool split);
  Status RunBackward(MicroBatch& micro, const StageOutputGrad<T>& grad, T* input_grad);
  Status RunBackwardWeight(MicroBatch& micro);
  Status CallHook(Status (UnitHooks::*hook)(int), int unit);
  // `count` int32 values of host memory into stream-ordered device memory, through a host copy
  // that lives until the pass ends.
  Result<DeviceBuffer> Upload(const int32_t* values, int64_t count);
  // Ends the pass after `error`: drops the micro-batches in flight, drains the stream.
  Status Abort(Status error);
  void Clear();

  StageModules<T> m_;
  bool open_ = false;
  bool gradients_ = true;
  const ParameterBinding<T>* binding_ = nullptr;
  UnitHooks* hooks_ = nullptr;
  std::shared_ptr<ActivationMeter> meter_;  // shared by the pass's micro-batches
  std::map<int, std::unique_ptr<MicroBatch>> in_flight_;
  std::map<int, std::unique_ptr<MicroBatch>> awaiting_weight_;  // split: B done, W pending
  const DeferredWeightGrads<T>* running_split_ = nullptr;       // the BackwardInput running
  std::set<int> forwarded_;                        // every micro-batch forwarded in this pass
  std::vector<std::vector<int32_t>> host_arrays_;  // sources of the pass's uploads
  std::map<int, T> losses_;                        // where the losses are read back to
};

extern template class ModelPass<float>;
extern template class ModelPass<double>;

}  // namespace sluice::model
