// A GPT-2 or Llama decoder, built from ModelOptions, with its parameters and gradients in two
// flat buffers (layout: parameter_registry.h) and a ForwardBackward step on a batch of token ids.
//
//   SLUICE_ASSIGN_OR_RETURN(auto ops, ops::CreateOpsBackend(device));
//   model::DeviceAllocator allocator(device);
//   SLUICE_ASSIGN_OR_RETURN(auto net, model::Model<float>::Create(options, allocator, *ops));
//   net->InitializeParameters(seed);
//   net->ZeroGrads();
//   SLUICE_ASSIGN_OR_RETURN(double loss, net->ForwardBackward(inputs, targets, batch, seq));
//   // net->grads_data() now holds d(mean loss)/d(params), accumulated (+=) per call.
//
// Execution. Every op of a pass is enqueued on the model's compute stream through the ops
// backend (runtime/ops/ops_backend.h); activations are stream-ordered device memory. The host
// uploads the token ids and targets, and reads back only the loss (or the logits) with a copy,
// synchronizing once, at the end of the pass. The UnitHooks run on the host as the pass is
// enqueued, not as it executes: they enqueue work of their own (ZeRO's gathers and reductions,
// ordered against the compute stream by events) and never touch device memory.
//
// Precision. Model<float> computes in fp32 (activations, gradients, the optimizer-facing gradient
// buffer) and stores parameters in options.param_dtype: kF32 (the flat parameter buffer is what
// every op reads) or kBF16 (before a unit runs, its parameters are widened into an fp32 scratch
// buffer, released when the unit's forward or backward is done). fp32 master weights belong to
// the optimizer, which writes the updated, rounded parameters back into params_data().
// Model<double> stores and computes in fp64 on the reference ops backend (tests only; param_dtype
// must be kF32 and the registry reports kF32 for it, the logical engine dtype).
//
// Units. The top-level modules in trace order: embeddings, blocks 0..n-1, final norm, LM head.
// UnitHooks (optional) run before and after each unit's forward and backward: the ZeRO-3
// parameter coordinator fetches and releases there, the gradient reducer takes a unit's finished
// gradients after its backward (a tied embedding's gradient is final only after the embeddings'
// backward, the last one).
//
// Stages. CreateStage builds a pipeline stage instead: decoder layers [begin, end), with the
// embeddings on the first stage and the final norm, LM head and loss on the last (model_stage.h).
// Its registry, flat buffers, units and hooks cover its own parameters only, under their Hugging
// Face names; Create is the stage [0, n_layer) with both roles.
//
// Passes. BeginPass opens a pass; Forward(micro, input) and Backward(micro, grad) run one
// micro-batch through the stage's units; EndPass runs the hooks' BeforePassEnd, synchronizes
// once and returns the losses. Any number of micro-batches may be in flight between their
// Forward and Backward (each keeps its own saved activations), in any order a pipeline schedule
// uses (GPipe, 1F1B, ...); parameter gradients accumulate (+=) in the order the Backwards run.
// The hooks run per micro-batch as its units run. ForwardBackward is BeginPass, Forward(0),
// Backward(0), EndPass on the whole model. A stage hands hidden states to the next one as device
// memory the caller owns: Forward writes the stage output into `output`, Backward the gradient
// of the stage input into `input_grad`, both enqueued on stream(); the caller orders another
// stream's reads after them with events, and keeps what it passes in alive until the stream has
// run the work that reads it (the model copies inputs at once on the stream). A failed Forward,
// Backward or EndPass ends the pass: the micro-batches in flight are dropped, the stream drained,
// and the gradients accumulated so far stay.
//
// Chunks. CreateChunks builds several stages of one model in one Model (an interleaved pipeline
// schedule's model chunks on one rank, model_stage.h): one registry, flat buffers, unit list and
// set of hooks over all of them, units numbered chunk by chunk. Each chunk runs its micro-batches
// through chunk(c) (ModelChunk: Forward, Backward, ... of its own layers, as a stage's); a pass
// covers every chunk: BeginPass opens it on all, EndPass runs the hooks' BeforePassEnd once. The
// chunks share the model's stream, so their computes run in the order they were enqueued. A
// failed call of one chunk ends the whole pass. The Model's own Forward, Backward, ... are those
// of a model of one chunk.
//
// Storage. By default the model allocates the flat buffers and binds every parameter to them.
// ZeRO (engine/zero) creates it with ModelStorage::kExternal instead: no flat buffers are
// allocated, and a ParameterBinding set with SetParameterBinding() tells each pass where the
// (gathered, fp32) parameter values are and where the gradients go.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "engine/model/buffer.h"
#include "engine/model/model_options.h"
#include "engine/model/model_stage.h"
#include "engine/model/module.h"
#include "engine/model/parameter_registry.h"
#include "runtime/comm.h"
#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"
#include "runtime/tensor.h"

namespace sluice::parallel {
class TensorParallelPlan;
}  // namespace sluice::parallel

namespace sluice::model {

class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  // `unit` indexes ParameterRegistry::units(). A non-OK status aborts the pass and is returned by
  // ForwardBackward / ForwardLoss.
  virtual Status BeforeForward(int unit) { return OkStatus(); }
  virtual Status AfterForward(int unit) { return OkStatus(); }
  virtual Status BeforeBackward(int unit) { return OkStatus(); }
  virtual Status AfterBackward(int unit) { return OkStatus(); }
  // Everything of the pass is enqueued; the model synchronizes the stream next (the read-back of
  // the loss), so work the hooks enqueue here is finished when the pass returns.
  virtual Status BeforePassEnd() { return OkStatus(); }

  // Split backward (Model::BackwardInput / BackwardWeight). A unit's gradients are final only
  // after the Before/AfterBackwardWeight that enclose its deferred weight gradients (units whose
  // backward deferred none get neither); Before/AfterBackward still enclose its backward-input.
  // Hooks that take a unit's gradients as final after AfterBackward (ZeRO's reductions) must
  // not accept it: BackwardInput refuses a pass whose hooks return false here.
  virtual bool SupportsSplitBackward() const { return false; }
  virtual Status BeforeBackwardWeight(int unit) { return OkStatus(); }
  virtual Status AfterBackwardWeight(int unit) { return OkStatus(); }
};

template <typename T>
class Model;

// One chunk of a Model's layers (see Chunks above): the passes' per-micro-batch calls of a
// pipeline stage, as Model's (same contracts), on the chunk's units only. Owned by its model.
template <typename T>
class ModelChunk {
 public:
  ModelChunk(const ModelChunk&) = delete;
  ModelChunk& operator=(const ModelChunk&) = delete;

  Model<T>& model() const { return *model_; }
  int index() const { return index_; }
  const ModelStage& stage() const;
  bool first_stage() const { return IsFirstStage(stage()); }
  bool last_stage() const;

  Status Forward(int micro, const StageInput<T>& input, T* output = nullptr);
  Status Backward(int micro, const StageOutputGrad<T>& grad, T* input_grad = nullptr);
  Status BackwardInput(int micro, const StageOutputGrad<T>& grad, T* input_grad = nullptr);
  Status BackwardWeight(int micro);
  int micro_batches_in_flight() const;
  int micro_batches_awaiting_weight() const;

 private:
  friend class Model<T>;
  ModelChunk(Model<T>& model, int index) : model_(&model), index_(index) {}
  // After a failed call: the model's pass ends on every chunk.
  Status Ended(Status status);

  Model<T>* model_;
  int index_;
};

enum class ModelStorage : uint8_t {
  kFlat = 0,  // the model owns the flat parameter and gradient buffers
  kExternal,  // no flat buffers: every pass reads and writes through SetParameterBinding()
};

template <typename T>
class Model {
 public:
  // Validates the options, registers the parameters and allocates the flat parameter (category
  // params) and gradient (category grads) buffers from `allocator`, which must outlive the model,
  // as must `ops`, whose device runs the passes on a stream the model creates. Where the host
  // cannot reach the allocator's memory (a GPU), InitializeParameters uploads through a host
  // buffer and the single-element accessors must not be used. `ops` must
  // compute in T (cpu: float; the reference backend: double). Parameters and gradients start at
  // zero; call InitializeParameters (or load values into params_data()). With
  // ModelStorage::kExternal nothing is allocated: params_data() and grads_data() are null, the
  // accessors of parameter values must not be used, and a binding must be set before any pass.
  //
  // With options.tensor_parallel_size > 1 the model is this tensor rank's piece of the whole
  // one (engine/parallel/tensor_plan.h): `tensor_comm` is the tensor group of its process grid
  // (rank tensor_parallel_rank of tensor_parallel_size, else InvalidArgument; not kept: the
  // model splits a copy of its own from it, so building is collective over it), the registry's
  // shapes are the rank's pieces and each pass all-reduces over it. Ignored at size 1.
  static Result<std::unique_ptr<Model>> Create(const ModelOptions& options,
                                               BufferAllocator& allocator, ops::OpsBackend& ops,
                                               ModelStorage storage = ModelStorage::kFlat,
                                               Comm* tensor_comm = nullptr);
  // The pipeline stage `stage` of that model; InvalidArgument for a range that
  // ValidateModelStage refuses.
  static Result<std::unique_ptr<Model>> CreateStage(const ModelOptions& options,
                                                    const ModelStage& stage,
                                                    BufferAllocator& allocator,
                                                    ops::OpsBackend& ops,
                                                    ModelStorage storage = ModelStorage::kFlat,
                                                    Comm* tensor_comm = nullptr);
  // The chunks `chunks` of that model in one Model (see Chunks above); InvalidArgument for
  // ranges that ValidateModelChunks refuses.
  static Result<std::unique_ptr<Model>> CreateChunks(const ModelOptions& options,
                                                     std::span<const ModelStage> chunks,
                                                     BufferAllocator& allocator,
                                                     ops::OpsBackend& ops,
                                                     ModelStorage storage = ModelStorage::kFlat,
                                                     Comm* tensor_comm = nullptr);
  ~Model();

  const ModelOptions& options() const { return options_; }
  // The layers of a model of one chunk (CHECK-fails with several: see chunk(c).stage()).
  const ModelStage& stage() const;
  int chunk_count() const { return static_cast<int>(chunks_.size()); }
  ModelChunk<T>& chunk(int c) const;
  // Holds the embeddings and takes token ids (in its first chunk).
  bool first_stage() const { return IsFirstStage(chunk_stages_.front()); }
  // Holds the final norm, the LM head and the loss, and takes the targets (in its last chunk).
  bool last_stage() const { return IsLastStage(options_, chunk_stages_.back()); }
  const ParameterRegistry& registry() const { return registry_; }
  // Elements of the flat buffers; equals CountParameters(options()) for the whole model (a stage:
  // its own parameters; a tensor rank: its pieces and the replicated parameters).
  int64_t ParameterCount() const { return registry_.total_elements(); }

  // Flat parameter buffer: ParameterCount() elements of registry().dtype() (T for Model<double>).
  void* params_data() const { return params_.data(); }
  // Flat gradient buffer: ParameterCount() elements of T, same offsets as the parameters.
  T* grads_data() const { return grads_.data_as<T>(); }
  // Views of the flat buffers (Model<float> only: Tensor has no fp64 dtype).
  Tensor params() const;
  Tensor grads() const;
  // The compute-dtype value of one parameter element (widened from bf16 when stored so); tests
  // and checkpoint tools. Aliases resolve to their target.
  T ParameterValue(int param, int64_t element) const;
  void SetParameterValue(int param, int64_t element, T value);

  // Deterministic init from `seed` (init.h): element e of parameter p depends only on (seed,
  // p's name, e), never on threads, the layout or sharding.
  void InitializeParameters(uint64_t seed);
  void ZeroGrads();

  // Whole model only (both roles): one pass of one batch.
  //
  // Runs forward, mean cross-entropy against `targets` (kIgnoreIndex = -1 rows skipped) and
  // backward, accumulating d(loss_grad * mean loss)/d(params) into grads_data(). inputs and
  // targets are [batch, seq] int32, row-major, seq <= options().seq_len. Returns the mean loss
  // (unscaled). InvalidArgument when a token id or target is out of range; ResourceExhausted
  // when activations do not fit the allocator.
  Result<double> ForwardBackward(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                 int64_t seq, double loss_grad = 1.0);
  // Forward and loss only (evaluation): no gradients, each unit's activations are freed as soon
  // as the next unit has run.
  Result<double> ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                             int64_t seq);
  // Forward only, writing the logits [batch * seq, vocab_size] into `logits`, host memory (tests,
  // generation).
  Status ForwardLogits(const int32_t* inputs, int64_t batch, int64_t seq, T* logits);

  // A pass of micro-batches (see Passes above). `gradients` false: an evaluation pass, where each
  // unit's activations go as soon as the next unit has run and a micro-batch is done after its
  // Forward. FailedPrecondition while a pass is open.
  Status BeginPass(bool gradients = true);
  // Runs micro-batch `micro` (any id not yet forwarded in this pass) through the stage's units:
  // input.tokens on the first stage, input.hidden on the others; input.targets on the last
  // stage (input.logits instead, in a pass without gradients). A stage before the last writes its
  // output [rows, d_model] into `output` (device memory); the last stage takes no output and
  // computes the loss. InvalidArgument for inputs that do not match the stage's roles, out-of-
  // range ids or lengths; FailedPrecondition outside a pass or for a micro-batch forwarded before.
  Status Forward(int micro, const StageInput<T>& input, T* output = nullptr);
  // Back-propagates micro-batch `micro`, in flight since its Forward, accumulating the
  // parameter gradients: from grad.loss_grad on the last stage, from grad.hidden on the others.
  // A stage after the first writes the gradient of its input [rows, d_model] into `input_grad`
  // (device memory); the first stage takes none. FailedPrecondition for a micro-batch not in
  // flight (never forwarded, or already back-propagated).
  Status Backward(int micro, const StageOutputGrad<T>& grad, T* input_grad = nullptr);
  // Backward split in two, for zero-bubble schedules (deferred_weight_grads.h). BackwardInput is
  // Backward but for the Linears' weight gradients (dW += dyᵀ·x, all but a tied head's): it
  // writes `input_grad` and accumulates every other parameter gradient, and keeps each such
  // Linear's input and output gradient for BackwardWeight(micro), which accumulates their dW,
  // unit by unit in the order BackwardInput ran, and frees them. BackwardInput then
  // BackwardWeight of one micro-batch give the same gradients as Backward, bit for bit: the same
  // ops on the same values, each parameter's += in the same order over micro-batches run in the
  // same order. Between the two the micro-batch is neither in flight nor done: EndPass refuses
  // (FailedPrecondition, the pass dropped) while any awaits its BackwardWeight. FailedPrecondition
  // also for a BackwardWeight without its BackwardInput, and for BackwardInput while the hooks
  // do not take a split backward (UnitHooks::SupportsSplitBackward).
  Status BackwardInput(int micro, const StageOutputGrad<T>& grad, T* input_grad = nullptr);
  Status BackwardWeight(int micro);
  // Ends the pass: the mean loss of each micro-batch the last stage forwarded (none elsewhere),
  // by micro-batch. FailedPrecondition (the pass is dropped) while micro-batches are in flight.
  Result<std::map<int, double>> EndPass();
  // Micro-batches forwarded and not yet back-propagated in the open pass (all chunks).
  int micro_batches_in_flight() const;
  // Micro-batches between their BackwardInput and BackwardWeight in the open pass (all chunks).
  int micro_batches_awaiting_weight() const;
  // For the hooks' AfterBackward(unit) in a BackwardInput: the registry parameters whose
  // gradients the unit left to the micro-batch's BackwardWeight (which then brackets them with
  // Before/AfterBackwardWeight(unit)); the unit's other gradients are final. Empty when it left
  // none, and outside a BackwardInput.
  std::vector<int> DeferredWeightParams(int unit) const;

  // The stream every pass runs on: what other streams order against (events) once the hooks
  // stop synchronizing.
  Stream& stream() const { return *stream_; }
  ops::OpsBackend& ops() const { return *ops_; }

  // Optional; not owned; null clears. Read when a pass begins.
  void SetHooks(UnitHooks* hooks) { hooks_ = hooks; }
  // Where the passes find parameter values (fp32, T) and accumulate gradients instead of the
  // flat buffers; not owned, must outlive the passes; null restores the flat buffers. Values are
  // read as they are (no bf16 widening). A pass of a kExternal model without a binding fails
  // with FailedPrecondition. Read when a pass begins.
  void SetParameterBinding(const ParameterBinding<T>* binding) { binding_ = binding; }
  ModelStorage storage() const { return storage_; }
  // The top-level modules, one per unit, in trace order.
  std::span<Module<T>* const> units() const { return units_; }

  // Bytes of activations the last pass with gradients held at its peak (saved + grads, all its
  // micro-batches together), measured by the contexts: what activation checkpointing saves.
  int64_t last_peak_activation_bytes() const;

 private:
  Model(const ModelOptions& options, std::span<const ModelStage> chunks, BufferAllocator& allocator,
        ops::OpsBackend& ops);
  friend class ModelChunk<T>;
  class Impl;
  Status Zero(Buffer& buffer);
  Result<double> RunWhole(const int32_t* inputs, const int32_t* targets, int64_t batch, int64_t seq,
                          double loss_grad, bool backward, T* logits);

  ModelOptions options_;
  std::vector<ModelStage> chunk_stages_;
  std::vector<std::unique_ptr<ModelChunk<T>>> chunks_;
  BufferAllocator* allocator_;
  ops::OpsBackend* ops_;
  std::unique_ptr<Stream> stream_;  // destroyed after impl_, whose buffers are freed on it
  // Tensor parallelism's plan and all-reduces (null at size 1); the modules use it.
  std::unique_ptr<parallel::TensorParallelPlan> tensor_plan_;
  ParameterRegistry registry_;
  Buffer params_;
  Buffer grads_;
  std::unique_ptr<Impl> impl_;  // the module tree and the per-pass machinery
  std::vector<Module<T>*> units_;
  UnitHooks* hooks_ = nullptr;
  ModelStorage storage_ = ModelStorage::kFlat;
  const ParameterBinding<T>* binding_ = nullptr;
};

extern template class ModelChunk<float>;
extern template class ModelChunk<double>;
extern template class Model<float>;
extern template class Model<double>;

}  // namespace sluice::model
