#include "engine/model/model.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "engine/model/cross_entropy.h"
#include "engine/model/decoder_block.h"
#include "engine/model/embedding.h"
#include "engine/model/init.h"
#include "engine/model/linear.h"
#include "engine/model/model_pass.h"
#include "engine/model/norm.h"
#include "engine/parallel/tensor_plan.h"
#include "kernels/cpu/ops_convert.h"
#include "kernels/ref/half.h"

namespace sluice::model {

// The module tree, and the binding of parameters to the flat buffers. With bf16 storage a unit's
// parameters are widened into one fp32 scratch buffer while the unit runs (Enter/Leave).
template <typename T>
class Model<T>::Impl final : public ParameterBinding<T>, public UnitScope {
 public:
  explicit Impl(Model<T>& model) : model_(model), builder_(model.registry_) {}

  // Each chunk's units in trace order, chunk by chunk: [embeddings], its blocks, [final norm,
  // LM head]; a pass per chunk.
  void Build() {
    const ModelOptions& o = model_.options_;
    std::vector<StageModules<T>> chunks;
    for (const ModelStage& stage : model_.chunk_stages_) {
      StageModules<T>& modules = chunks.emplace_back();
      modules.first_unit = static_cast<int>(units_.size());
      std::vector<Module<T>*> units = BuildChunk(stage, modules);
      modules.options = &model_.options_;
      modules.stage = stage;
      modules.ops = model_.ops_;
      modules.stream = model_.stream_.get();
      modules.units = units;
      modules.scope = this;
      units_.insert(units_.end(), units.begin(), units.end());
    }
    // Keys of their own, after every module's: the whole model's ids stay what they were.
    for (StageModules<T>& modules : chunks) {
      if (!IsFirstStage(modules.stage)) modules.input_id = builder_.NextModuleId();
      if (!IsLastStage(o, modules.stage)) modules.output_grad_id = builder_.NextModuleId();
      passes_.push_back(std::make_unique<ModelPass<T>>(std::move(modules)));
    }
  }

  // The modules of the chunk of layers `stage`, registered in trace order; its loss and
  // checkpointed inputs go into `modules`.
  std::vector<Module<T>*> BuildChunk(const ModelStage& stage, StageModules<T>& modules) {
    const ModelOptions& o = model_.options_;
    const bool gpt2 = o.family == Family::kGpt2;
    const std::string root = gpt2 ? "transformer" : "model";
    ParameterRegistry& registry = model_.registry_;
    std::vector<Module<T>*> units;

    if (IsFirstStage(stage)) {
      registry.BeginUnit("embeddings");
      embeddings_ = std::make_unique<Embeddings<T>>(
          builder_, root, root + (gpt2 ? ".wte" : ".embed_tokens"), root + ".wpe", o.vocab_size,
          gpt2 ? o.seq_len : 0, o.d_model);
      if (vocab_parallel()) model_.tensor_plan_->Parallelize(*embeddings_, builder_);
      units.push_back(embeddings_.get());
    }
    CheckpointedInputs<T>* checkpointed = nullptr;
    if (CheckpointedBlocks(o) > stage.begin_layer) {
      checkpointed = checkpointed_inputs_
                         .emplace_back(std::make_unique<CheckpointedInputs<T>>(builder_, o, stage))
                         .get();
    }
    for (int64_t i = stage.begin_layer; i < stage.end_layer; ++i) {
      const std::string name = root + (gpt2 ? ".h." : ".layers.") + std::to_string(i);
      registry.BeginUnit(name);
      blocks_.push_back(std::make_unique<DecoderBlock<T>>(builder_, name, o, i, checkpointed));
      if (model_.tensor_plan_ != nullptr) {
        model_.tensor_plan_->Parallelize(*blocks_.back(), builder_);
      }
      units.push_back(blocks_.back().get());
    }
    if (IsLastStage(o, stage)) {
      const std::string final_name = root + (gpt2 ? ".ln_f" : ".norm");
      registry.BeginUnit(final_name);
      if (gpt2) {
        final_norm_ = std::make_unique<LayerNorm<T>>(builder_, final_name, o.d_model, o.norm_eps);
      } else {
        final_norm_ = std::make_unique<RmsNorm<T>>(builder_, final_name, o.d_model, o.norm_eps);
      }
      units.push_back(final_norm_.get());
      registry.BeginUnit("lm_head");
      std::unique_ptr<Linear<T>> head;
      if (o.tie_embeddings) {
        // Away from the embeddings the head reads a copy of the token table of its own, which the
        // pipeline keeps equal to the first stage's (ParameterInfo::mirror).
        const int table =
            embeddings_ != nullptr
                ? embeddings_->token_weight_param()
                : registry.AddMirror(root + (gpt2 ? ".wte" : ".embed_tokens") + ".weight",
                                     Shape{o.vocab_size, o.d_model}, InitKind::kNormal);
        head = Linear<T>::Tied(builder_, "lm_head", table);
      } else {
        head = std::make_unique<Linear<T>>(builder_, "lm_head", o.d_model, o.vocab_size, false);
      }
      const int64_t columns = head->out();  // this rank's piece of the vocabulary, or all of it
      if (vocab_parallel()) {
        lm_head_ = model_.tensor_plan_->ParallelizeHead(std::move(head), builder_);
        units.push_back(lm_head_.get());
        loss_ = model_.tensor_plan_->template MakeLoss<T>(builder_, columns);
      } else {
        lm_head_ = std::move(head);
        units.push_back(lm_head_.get());
        loss_ = std::make_unique<CrossEntropyLoss<T>>(builder_, o.vocab_size);
      }
    }
    if (model_.tensor_plan_ != nullptr && model_.tensor_plan_->sequence_parallel()) {
      for (auto& wrapper : model_.tensor_plan_->ParallelizeSequence(
               units, static_cast<const Module<T>*>(embeddings_.get()), lm_head_.get(),
               IsFirstStage(stage), IsLastStage(o, stage), builder_)) {
        sequence_units_.push_back(std::move(wrapper));
      }
    }
    modules.loss = IsLastStage(o, stage) ? loss_.get() : nullptr;
    modules.checkpointed = checkpointed;
    return units;
  }

  // Points every parameter at the flat buffers (the values only when storage is T itself).
  void Bind() {
    const auto& params = model_.registry_.parameters();
    values_.assign(params.size(), nullptr);
    grads_.assign(params.size(), nullptr);
    for (size_t p = 0; p < params.size(); ++p) {
      grads_[p] = model_.grads_data() + params[p].offset;
      if (!widen()) values_[p] = model_.params_.template data_as<T>() + params[p].offset;
    }
  }

  const T* Value(int param) const override {
    SLUICE_DCHECK(values_[param] != nullptr) << "parameter " << param << " is not materialized";
    return values_[param];
  }
  T* Grad(int param) const override { return want_grads_ ? grads_[param] : nullptr; }

  const std::vector<Module<T>*>& units() const { return units_; }
  bool vocab_parallel() const {
    return model_.tensor_plan_ != nullptr && model_.tensor_plan_->vocab_parallel();
  }
  ModelPass<T>& pass(int chunk) const { return *passes_[chunk]; }
  int64_t last_peak_bytes() const { return last_peak_bytes_; }

  // The pass runs on the model's binding when one is set, else on the flat buffers (none with
  // external storage: the pass's Forward reports it).
  Status BeginPass(bool gradients) {
    const bool external = model_.binding_ != nullptr;
    const ParameterBinding<T>* binding = external ? model_.binding_
                                         : model_.storage_ == ModelStorage::kExternal ? nullptr
                                                                                      : this;
    auto meter = std::make_shared<ActivationMeter>();
    for (const auto& pass : passes_) {  // the chunks' passes open and end together
      SLUICE_RETURN_IF_ERROR(pass->Begin(binding, model_.hooks_, gradients, meter));
    }
    meter_ = std::move(meter);
    want_grads_ = gradients;
    external_ = external;
    hooks_ = model_.hooks_;
    return OkStatus();
  }

  // Every chunk's pass ends: the hooks enqueue their last work before the one wait that reads
  // the losses back.
  Result<std::map<int, double>> EndPass() {
    for (const auto& pass : passes_) {
      if (Status status = pass->CheckEnd(); !status.ok()) return DropPass(std::move(status));
    }
    if (want_grads_) last_peak_bytes_ = meter_->peak;
    if (hooks_ != nullptr) {
      if (Status status = hooks_->BeforePassEnd(); !status.ok()) {
        return DropPass(std::move(status));
      }
    }
    if (Status status = model_.stream_->Synchronize(); !status.ok()) {
      return DropPass(std::move(status));
    }
    std::map<int, double> losses;
    for (const auto& pass : passes_) losses.merge(pass->Finish());
    meter_.reset();
    return losses;
  }

  // Ends the pass on every chunk after `error`.
  Status DropPass(Status error) {
    for (const auto& pass : passes_) error = pass->Drop(std::move(error));
    meter_.reset();
    return error;
  }

  // With bf16 storage: widens the parameters unit `u` reads into one fp32 buffer, on the stream.
  Status Enter(int u) override {
    if (!widen()) return OkStatus();
    const UnitInfo& unit = model_.registry_.units()[u];
    int64_t total = 0;
    for (int p : unit.params) total += model_.registry_.parameter(p).numel;
    ops::OpsBackend& ops = *model_.ops_;
    Stream& stream = *model_.stream_;
    SLUICE_ASSIGN_OR_RETURN(widened_,
                            ops.device().AllocateAsync(static_cast<size_t>(total) * sizeof(T),
                                                       MemoryCategory::kBuffers, stream));
    T* dst = widened_.data_as<T>();
    auto* storage = model_.params_.template data_as<uint16_t>();
    const int index = ops.device().index();
    for (int p : unit.params) {
      const ParameterInfo& info = model_.registry_.parameter(p);
      SLUICE_RETURN_IF_ERROR(ops.Convert(
          stream,
          Tensor(storage + info.offset, DType::kBF16, {info.numel}, MemoryTier::kDevice, index),
          Tensor(dst, DType::kF32, {info.numel}, MemoryTier::kDevice, index)));
      values_[p] = dst;
      dst += info.numel;
    }
    return OkStatus();
  }

  void Leave(int u) override {
    if (!widen()) return;
    for (int p : model_.registry_.units()[u].params) values_[p] = nullptr;
    widened_.Reset();  // freed on the stream, after the unit's ops
  }

  void LeaveAll() override { widened_.Reset(); }

 private:
  bool widen() const {
    if (external_) return false;  // the binding provides T values itself
    if constexpr (std::is_same_v<T, float>) {
      return model_.registry_.dtype() == DType::kBF16;
    } else {
      return false;
    }
  }

  Model<T>& model_;
  ModuleBuilder builder_;
  std::unique_ptr<Embeddings<T>> embeddings_;  // the first stage's
  // Per chunk with checkpointed blocks, shared by its blocks.
  std::vector<std::unique_ptr<CheckpointedInputs<T>>> checkpointed_inputs_;
  std::vector<std::unique_ptr<DecoderBlock<T>>> blocks_;
  std::unique_ptr<Module<T>> final_norm_;      // the last stage's
  std::unique_ptr<Module<T>> lm_head_;         // the last stage's
  std::unique_ptr<CrossEntropyLoss<T>> loss_;  // the last stage's
  // Sequence parallelism's wrappers of the units whose input or output is whole rows.
  std::vector<std::unique_ptr<Module<T>>> sequence_units_;
  std::vector<Module<T>*> units_;
  std::vector<const T*> values_;
  std::vector<T*> grads_;
  DeviceBuffer widened_;
  bool want_grads_ = true;
  bool external_ = false;                   // this pass runs on the model's external binding
  UnitHooks* hooks_ = nullptr;              // the open pass's
  std::shared_ptr<ActivationMeter> meter_;  // the open pass's, all chunks together
  int64_t last_peak_bytes_ = 0;
  // Last: destroyed first, while what they run on exists.
  std::vector<std::unique_ptr<ModelPass<T>>> passes_;  // one per chunk
};

template <typename T>
Model<T>::Model(const ModelOptions& options, std::span<const ModelStage> chunks,
                BufferAllocator& allocator, ops::OpsBackend& ops)
    : options_(options),
      chunk_stages_(chunks.begin(), chunks.end()),
      allocator_(&allocator),
      ops_(&ops),
      registry_(options.param_dtype) {
  for (int c = 0; c < static_cast<int>(chunks.size()); ++c) {
    chunks_.push_back(std::unique_ptr<ModelChunk<T>>(new ModelChunk<T>(*this, c)));
  }
}

template <typename T>
Model<T>::~Model() {
  // An all-reduce of a failed pass may still be writing into activations the modules free.
  if (tensor_plan_ != nullptr) (void)tensor_plan_->comm().Synchronize();
  impl_.reset();
  if (stream_ != nullptr) ops_->ReleaseScratch(*stream_);
}

template <typename T>
Result<std::unique_ptr<Model<T>>> Model<T>::Create(const ModelOptions& options,
                                                   BufferAllocator& allocator, ops::OpsBackend& ops,
                                                   ModelStorage storage, Comm* tensor_comm) {
  return CreateStage(options, WholeModelStage(options), allocator, ops, storage, tensor_comm);
}

template <typename T>
Result<std::unique_ptr<Model<T>>> Model<T>::CreateStage(const ModelOptions& options,
                                                        const ModelStage& stage,
                                                        BufferAllocator& allocator,
                                                        ops::OpsBackend& ops, ModelStorage storage,
                                                        Comm* tensor_comm) {
  SLUICE_RETURN_IF_ERROR(ValidateModelStage(options, stage));
  return CreateChunks(options, std::span<const ModelStage>(&stage, 1), allocator, ops, storage,
                      tensor_comm);
}

template <typename T>
Result<std::unique_ptr<Model<T>>> Model<T>::CreateChunks(const ModelOptions& options,
                                                         std::span<const ModelStage> chunks,
                                                         BufferAllocator& allocator,
                                                         ops::OpsBackend& ops, ModelStorage storage,
                                                         Comm* tensor_comm) {
  SLUICE_RETURN_IF_ERROR(ValidateModelOptions(options));
  SLUICE_RETURN_IF_ERROR(ValidateModelChunks(options, chunks));
  if (!std::is_same_v<T, float> && options.param_dtype != DType::kF32) {
    return InvalidArgumentError(
        "the fp64 reference model stores fp64 parameters; model.dtype {} "
        "applies to the fp32 model only",
        DTypeName(options.param_dtype));
  }
  constexpr DType kCompute = ComputeDType<T>();
  if (!ops.Supports(kCompute)) {
    return InvalidArgumentError("the {} ops backend does not compute in {}, which this model needs",
                                ops.name(), DTypeName(kCompute));
  }
  std::unique_ptr<Model<T>> model(new Model<T>(options, chunks, allocator, ops));
  SLUICE_ASSIGN_OR_RETURN(model->stream_, ops.device().CreateStream());
  if (options.tensor_parallel_size > 1) {
    if (tensor_comm == nullptr) {
      return InvalidArgumentError(
          "the model is tensor rank {} of {}, but no tensor-parallel communicator was passed to "
          "build it with",
          options.tensor_parallel_rank, options.tensor_parallel_size);
    }
    SLUICE_ASSIGN_OR_RETURN(model->tensor_plan_, parallel::TensorParallelPlan::Create(
                                                     options, *tensor_comm, ops.device(),
                                                     /*vocab_parallel=*/ops.SupportsVocabShards()));
    const parallel::TensorParallelPlan* plan = model->tensor_plan_.get();
    model->registry_.SetShardingRule([plan](std::string_view name, const Shape& global) {
      return plan->ShardingOf(name, global);
    });
  }
  model->impl_ = std::make_unique<Impl>(*model);
  model->impl_->Build();
  model->units_ = model->impl_->units();
  SLUICE_CHECK_EQ(model->units_.size(), model->registry_.units().size());
  model->storage_ = storage;
  if (storage == ModelStorage::kExternal) return model;

  const int64_t count = model->registry_.total_elements();
  const size_t param_bytes =
      static_cast<size_t>(count) *
      (std::is_same_v<T, float> ? DTypeSize(options.param_dtype) : sizeof(T));
  SLUICE_ASSIGN_OR_RETURN(model->params_, allocator.Allocate(param_bytes, MemoryCategory::kParams));
  SLUICE_ASSIGN_OR_RETURN(model->grads_, allocator.Allocate(static_cast<size_t>(count) * sizeof(T),
                                                            MemoryCategory::kGrads));
  SLUICE_RETURN_IF_ERROR(model->Zero(model->params_));
  SLUICE_RETURN_IF_ERROR(model->Zero(model->grads_));
  model->impl_->Bind();
  return model;
}

template <typename T>
Tensor Model<T>::params() const {
  SLUICE_CHECK((std::is_same_v<T, float>)) << "Tensor views of the fp64 model's parameters";
  SLUICE_CHECK(storage_ == ModelStorage::kFlat) << "params() of a model without flat buffers";
  return Tensor(params_.data(), registry_.dtype(), {ParameterCount()}, allocator_->tier());
}

template <typename T>
Tensor Model<T>::grads() const {
  SLUICE_CHECK((std::is_same_v<T, float>)) << "Tensor views of the fp64 model's gradients";
  SLUICE_CHECK(storage_ == ModelStorage::kFlat) << "grads() of a model without flat buffers";
  return Tensor(grads_.data(), DType::kF32, {ParameterCount()}, allocator_->tier());
}

template <typename T>
T Model<T>::ParameterValue(int param, int64_t element) const {
  SLUICE_CHECK(storage_ == ModelStorage::kFlat) << "ParameterValue of a model without flat buffers";
  SLUICE_CHECK(allocator_->host_accessible()) << "ParameterValue of a model in device memory";
  const ParameterInfo& info = registry_.parameter(param);
  SLUICE_CHECK(element >= 0 && element < info.numel) << info.name << " element " << element;
  const int64_t at = info.offset + element;
  if (registry_.dtype() == DType::kBF16) {
    return static_cast<T>(kernels::Bf16ToF32(params_.data_as<uint16_t>()[at]));
  }
  return params_.data_as<T>()[at];
}

template <typename T>
void Model<T>::SetParameterValue(int param, int64_t element, T value) {
  SLUICE_CHECK(storage_ == ModelStorage::kFlat)
      << "SetParameterValue of a model without flat buffers";
  SLUICE_CHECK(allocator_->host_accessible()) << "SetParameterValue of a model in device memory";
  const ParameterInfo& info = registry_.parameter(param);
  SLUICE_CHECK(element >= 0 && element < info.numel) << info.name << " element " << element;
  const int64_t at = info.offset + element;
  if (registry_.dtype() == DType::kBF16) {
    params_.data_as<uint16_t>()[at] = kernels::F32ToBf16(static_cast<float>(value));
    return;
  }
  params_.data_as<T>()[at] = value;
}

template <typename T>
void Model<T>::InitializeParameters(uint64_t seed) {
  SLUICE_CHECK(storage_ == ModelStorage::kFlat)
      << "InitializeParameters of a model without flat buffers: the owner of the parameters "
         "initializes them (init.h)";
  // Memory the host cannot reach (a GPU's) is filled chunk by chunk through a host buffer.
  constexpr int64_t kChunk = int64_t{1} << 20;
  const bool bf16 = registry_.dtype() == DType::kBF16;
  const size_t element_bytes = bf16 ? sizeof(uint16_t) : sizeof(T);
  const bool direct = allocator_->host_accessible();
  std::vector<float> widened;
  std::vector<std::byte> staged;
  for (const ParameterInfo& info : registry_.parameters()) {
    if (info.is_alias()) continue;
    for (int64_t begin = 0; begin < info.numel; begin += kChunk) {
      const int64_t end = std::min(info.numel, begin + kChunk);
      auto* dst = static_cast<std::byte*>(params_.data()) + (info.offset + begin) * element_bytes;
      std::byte* out = dst;
      if (!direct) {
        staged.resize(static_cast<size_t>(end - begin) * element_bytes);
        out = staged.data();
      }
      if (bf16) {
        widened.resize(static_cast<size_t>(end - begin));
        InitializeRange<float>(info, seed, options_.init_std, options_.n_layer, begin, end,
                               widened.data());
        kernels::cpu::ConvertF32ToBf16(widened.data(), reinterpret_cast<uint16_t*>(out),
                                       end - begin, options_.num_threads);
      } else {
        InitializeRange<T>(info, seed, options_.init_std, options_.n_layer, begin, end,
                           reinterpret_cast<T*>(out));
      }
      if (!direct) {
        Status uploaded =
            ops_->device().CopyAsync(dst, out, staged.size(), CopyKind::kH2D, *stream_);
        if (uploaded.ok()) uploaded = stream_->Synchronize();
        SLUICE_CHECK(uploaded.ok())
            << "uploading the initial " << info.name << ": " << uploaded.ToString();
      }
    }
  }
}

template <typename T>
void Model<T>::ZeroGrads() {
  const Status zeroed = Zero(grads_);
  SLUICE_CHECK(zeroed.ok()) << "zeroing the gradients: " << zeroed.ToString();
}

// Host memory directly; device memory on the model's stream, ordered before the next pass.
template <typename T>
Status Model<T>::Zero(Buffer& buffer) {
  if (buffer.empty()) return OkStatus();
  if (allocator_->host_accessible()) {
    std::memset(buffer.data(), 0, buffer.size());
    return OkStatus();
  }
  return ops_->device().MemsetAsync(buffer.data(), 0, buffer.size(), *stream_);
}

template <typename T>
Result<double> Model<T>::RunWhole(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                  int64_t seq, double loss_grad, bool backward, T* logits) {
  if (chunk_count() != 1 || !first_stage() || !last_stage()) {
    return FailedPreconditionError(
        "ForwardBackward, ForwardLoss and ForwardLogits run a whole model, and this one is the "
        "pipeline stage {}: run its micro-batches with BeginPass, Forward, Backward and EndPass",
        DescribeModelStage(options_, chunk_stages_.front()));
  }
  if (logits != nullptr && tensor_plan_ != nullptr && tensor_plan_->vocab_parallel()) {
    return FailedPreconditionError(
        "ForwardLogits on tensor rank {} of {}: the logits are split over the vocabulary (this "
        "rank computes the ids [{}, ...) of {}) and never gathered; evaluate with ForwardLoss",
        options_.tensor_parallel_rank, options_.tensor_parallel_size,
        tensor_plan_->vocab_shard().start, options_.vocab_size);
  }
  SLUICE_RETURN_IF_ERROR(BeginPass(backward));
  const StageInput<T> input{
      .batch = batch, .seq = seq, .tokens = inputs, .targets = targets, .logits = logits};
  SLUICE_RETURN_IF_ERROR(Forward(0, input));
  if (backward) SLUICE_RETURN_IF_ERROR(Backward(0, {.loss_grad = loss_grad}));
  Result<std::map<int, double>> losses = EndPass();
  if (!losses.ok()) return losses.status();
  return logits != nullptr ? 0.0 : losses->at(0);
}

template <typename T>
Result<double> Model<T>::ForwardBackward(const int32_t* inputs, const int32_t* targets,
                                         int64_t batch, int64_t seq, double loss_grad) {
  return RunWhole(inputs, targets, batch, seq, loss_grad, /*backward=*/true, nullptr);
}

template <typename T>
Result<double> Model<T>::ForwardLoss(const int32_t* inputs, const int32_t* targets, int64_t batch,
                                     int64_t seq) {
  return RunWhole(inputs, targets, batch, seq, 0.0, /*backward=*/false, nullptr);
}

template <typename T>
Status Model<T>::ForwardLogits(const int32_t* inputs, int64_t batch, int64_t seq, T* logits) {
  return RunWhole(inputs, nullptr, batch, seq, 0.0, /*backward=*/false, logits).status();
}

template <typename T>
Status Model<T>::BeginPass(bool gradients) {
  return impl_->BeginPass(gradients);
}

// The Model's own per-micro-batch calls are its one chunk's.
template <typename T>
Result<ModelChunk<T>*> OnlyChunk(const Model<T>& model, std::string_view call) {
  if (model.chunk_count() != 1) {
    return FailedPreconditionError(
        "{} on a model of {} chunks: run each chunk's micro-batches through chunk(c)", call,
        model.chunk_count());
  }
  return &model.chunk(0);
}

template <typename T>
Status Model<T>::Forward(int micro, const StageInput<T>& input, T* output) {
  SLUICE_ASSIGN_OR_RETURN(ModelChunk<T> * chunk, OnlyChunk(*this, "Forward"));
  return chunk->Forward(micro, input, output);
}

template <typename T>
Status Model<T>::Backward(int micro, const StageOutputGrad<T>& grad, T* input_grad) {
  SLUICE_ASSIGN_OR_RETURN(ModelChunk<T> * chunk, OnlyChunk(*this, "Backward"));
  return chunk->Backward(micro, grad, input_grad);
}

template <typename T>
Status Model<T>::BackwardInput(int micro, const StageOutputGrad<T>& grad, T* input_grad) {
  SLUICE_ASSIGN_OR_RETURN(ModelChunk<T> * chunk, OnlyChunk(*this, "BackwardInput"));
  return chunk->BackwardInput(micro, grad, input_grad);
}

template <typename T>
Status Model<T>::BackwardWeight(int micro) {
  SLUICE_ASSIGN_OR_RETURN(ModelChunk<T> * chunk, OnlyChunk(*this, "BackwardWeight"));
  return chunk->BackwardWeight(micro);
}

template <typename T>
Result<std::map<int, double>> Model<T>::EndPass() {
  return impl_->EndPass();
}

template <typename T>
int Model<T>::micro_batches_in_flight() const {
  int total = 0;
  for (const auto& chunk : chunks_) total += chunk->micro_batches_in_flight();
  return total;
}

template <typename T>
int Model<T>::micro_batches_awaiting_weight() const {
  int total = 0;
  for (const auto& chunk : chunks_) total += chunk->micro_batches_awaiting_weight();
  return total;
}

template <typename T>
std::vector<int> Model<T>::DeferredWeightParams(int unit) const {
  // At most one chunk runs a BackwardInput at a time.
  for (int c = 0; c < chunk_count(); ++c) {
    std::vector<int> params = impl_->pass(c).DeferredWeightParams(unit);
    if (!params.empty()) return params;
  }
  return {};
}

template <typename T>
int64_t Model<T>::last_peak_activation_bytes() const {
  return impl_->last_peak_bytes();
}

template <typename T>
const ModelStage& Model<T>::stage() const {
  SLUICE_CHECK_EQ(chunk_stages_.size(), 1u) << "stage() of a model of several chunks";
  return chunk_stages_.front();
}

template <typename T>
ModelChunk<T>& Model<T>::chunk(int c) const {
  SLUICE_CHECK(c >= 0 && c < chunk_count()) << "chunk " << c << " of " << chunk_count();
  return *chunks_[c];
}

template <typename T>
const ModelStage& ModelChunk<T>::stage() const {
  return model_->chunk_stages_[index_];
}

template <typename T>
bool ModelChunk<T>::last_stage() const {
  return IsLastStage(model_->options(), stage());
}

template <typename T>
Status ModelChunk<T>::Ended(Status status) {
  return status.ok() ? status : model_->impl_->DropPass(std::move(status));
}

template <typename T>
Status ModelChunk<T>::Forward(int micro, const StageInput<T>& input, T* output) {
  return Ended(model_->impl_->pass(index_).Forward(micro, input, output));
}

template <typename T>
Status ModelChunk<T>::Backward(int micro, const StageOutputGrad<T>& grad, T* input_grad) {
  return Ended(model_->impl_->pass(index_).Backward(micro, grad, input_grad));
}

template <typename T>
Status ModelChunk<T>::BackwardInput(int micro, const StageOutputGrad<T>& grad, T* input_grad) {
  return Ended(model_->impl_->pass(index_).BackwardInput(micro, grad, input_grad));
}

template <typename T>
Status ModelChunk<T>::BackwardWeight(int micro) {
  return Ended(model_->impl_->pass(index_).BackwardWeight(micro));
}

template <typename T>
int ModelChunk<T>::micro_batches_in_flight() const {
  return model_->impl_->pass(index_).in_flight();
}

template <typename T>
int ModelChunk<T>::micro_batches_awaiting_weight() const {
  return model_->impl_->pass(index_).awaiting_weight();
}

template class ModelChunk<float>;
template class ModelChunk<double>;
template class Model<float>;
template class Model<double>;

}  // namespace sluice::model
