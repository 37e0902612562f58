#include "engine/parallel/tensor_plan.h"

#include <string>
#include <utility>

#include "engine/model/linear.h"
#include "engine/parallel/sequence_region.h"
#include "engine/parallel/tensor_region.h"
#include "engine/parallel/tensor_vocab.h"
#include "runtime/check.h"

namespace sluice::parallel {
namespace {

template <typename T>
void OmitRowBiases(model::Module<T>& module) {
  if (auto* linear = dynamic_cast<model::Linear<T>*>(&module); linear != nullptr) {
    if (IsRowParallel(linear->name())) linear->OmitBiasInForward();
  }
  for (model::Module<T>* child : module.children()) OmitRowBiases(*child);
}

}  // namespace

Result<std::unique_ptr<TensorParallelPlan>> TensorParallelPlan::Create(
    const model::ModelOptions& options, Comm& tensor, Device& device, bool vocab_parallel) {
  SLUICE_RETURN_IF_ERROR(model::ValidateModelOptions(options));
  if (tensor.size() != options.tensor_parallel_size ||
      tensor.rank() != options.tensor_parallel_rank) {
    return InvalidArgumentError(
        "the tensor-parallel communicator {} is rank {} of {}, but the model is built as tensor "
        "rank {} of {}; pass the tensor group of this rank's process grid",
        tensor.name(), tensor.rank(), tensor.size(), options.tensor_parallel_rank,
        options.tensor_parallel_size);
  }
  if (vocab_parallel && options.vocab_size < options.tensor_parallel_size) {
    return InvalidArgumentError(
        "model.vocab_size = {} cannot split over {} tensor-parallel ranks: each needs at least "
        "one id of the vocabulary",
        options.vocab_size, options.tensor_parallel_size);
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<TensorComm> comm, TensorComm::Create(tensor, device));
  return std::unique_ptr<TensorParallelPlan>(
      new TensorParallelPlan(options, std::move(comm), vocab_parallel));
}

TensorParallelPlan::TensorParallelPlan(const model::ModelOptions& options,
                                       std::unique_ptr<TensorComm> comm, bool vocab_parallel)
    : size_(options.tensor_parallel_size),
      rank_(options.tensor_parallel_rank),
      vocab_parallel_(vocab_parallel),
      sequence_parallel_(options.sequence_parallel),
      learned_positions_(options.family == model::Family::kGpt2),
      layout_(TensorLayoutOf(options, vocab_parallel)),
      comm_(std::move(comm)) {
  if (vocab_parallel_) {
    Result<TensorSharding> rows = SplitTensorBalanced(Shape{options.vocab_size}, 0, size_, rank_);
    SLUICE_CHECK(rows.ok()) << rows.status().ToString();  // Create checked the size
    vocab_shard_ = {.start = rows->PieceStart(), .vocab = options.vocab_size};
  }
}

TensorSharding TensorParallelPlan::ShardingOf(std::string_view name, const Shape& global) const {
  Result<TensorSharding> sharding = TensorShardingOf(layout_, name, global);
  // ValidateModelOptions made the heads and d_ff divide by the size, Create the vocabulary.
  SLUICE_CHECK(sharding.ok()) << name << ": " << sharding.status().ToString();
  if (vocab_parallel_ && IsVocabTable(name)) {
    SLUICE_CHECK_EQ(sharding->PieceStart(), vocab_shard_.start) << name;
  }
  return std::move(sharding).value();
}

template <typename T>
void TensorParallelPlan::Parallelize(model::DecoderBlock<T>& block,
                                     model::ModuleBuilder& builder) const {
  block.WrapSublayers([&](std::unique_ptr<model::Module<T>> sublayer) {
    if (rank_ != 0) OmitRowBiases(*sublayer);
    return std::unique_ptr<model::Module<T>>(std::make_unique<TensorParallelRegion<T>>(
        builder, std::move(sublayer), *comm_, sequence_parallel_));
  });
}

template <typename T>
void TensorParallelPlan::Parallelize(model::Embeddings<T>& embeddings,
                                     model::ModuleBuilder& builder) const {
  SLUICE_CHECK(vocab_parallel_);
  embeddings.WrapTokens([&](std::unique_ptr<model::TokenEmbedding<T>> table) {
    SLUICE_CHECK_EQ(table->rows(),
                    builder.registry().parameter(table->weight_param()).sharding.PieceSize());
    // With learned positions the whole rows get them before the split (ParallelizeSequence).
    const bool reduce_scatter = sequence_parallel_ && !learned_positions_;
    return std::unique_ptr<model::Module<T>>(std::make_unique<VocabParallelEmbedding<T>>(
        builder, std::move(table), vocab_shard_, *comm_, reduce_scatter));
  });
}

template <typename T>
std::unique_ptr<model::Module<T>> TensorParallelPlan::ParallelizeHead(
    std::unique_ptr<model::Linear<T>> head, model::ModuleBuilder& builder) const {
  SLUICE_CHECK(vocab_parallel_);
  return std::make_unique<VocabParallelHead<T>>(builder, std::move(head), *comm_,
                                                sequence_parallel_);
}

template <typename T>
std::unique_ptr<model::CrossEntropyLoss<T>> TensorParallelPlan::MakeLoss(
    model::ModuleBuilder& builder, int64_t columns) const {
  SLUICE_CHECK(vocab_parallel_);
  return std::make_unique<VocabParallelCrossEntropy<T>>(builder, columns, vocab_shard_, *comm_);
}

template <typename T>
std::vector<std::unique_ptr<model::Module<T>>> TensorParallelPlan::ParallelizeSequence(
    std::vector<model::Module<T>*>& units, const model::Module<T>* embeddings,
    const model::Module<T>* head, bool first_stage, bool last_stage,
    model::ModuleBuilder& builder) const {
  SLUICE_CHECK(sequence_parallel_);
  std::vector<std::unique_ptr<model::Module<T>>> wrappers;
  for (size_t u = 0; u < units.size(); ++u) {
    model::Module<T>* unit = units[u];
    SequenceEdge in = SequenceEdge::kNone;
    SequenceEdge out = SequenceEdge::kNone;
    if (u == 0 && !first_stage) in = SequenceEdge::kScatter;
    // The vocabulary-parallel head gathers its input itself (VocabParallelHead).
    if (unit == head && !vocab_parallel_) in = SequenceEdge::kGather;
    // Llama's vocabulary-parallel embedding reduce-scattered already.
    if (unit == embeddings && (!vocab_parallel_ || learned_positions_)) {
      out = SequenceEdge::kScatter;
    }
    if (u + 1 == units.size() && !last_stage) out = SequenceEdge::kGather;
    if (in == SequenceEdge::kNone && out == SequenceEdge::kNone) continue;
    wrappers.push_back(std::make_unique<SequenceParallelUnit<T>>(builder, *unit, *comm_, in, out));
    units[u] = wrappers.back().get();
  }
  return wrappers;
}

#define SLUICE_INSTANTIATE(T)                                                                    \
  template void TensorParallelPlan::Parallelize<T>(model::Embeddings<T>&, model::ModuleBuilder&) \
      const;                                                                                     \
  template std::unique_ptr<model::Module<T>> TensorParallelPlan::ParallelizeHead<T>(             \
      std::unique_ptr<model::Linear<T>>, model::ModuleBuilder&) const;                           \
  template std::unique_ptr<model::CrossEntropyLoss<T>> TensorParallelPlan::MakeLoss<T>(          \
      model::ModuleBuilder&, int64_t) const;                                                     \
  template std::vector<std::unique_ptr<model::Module<T>>>                                        \
  TensorParallelPlan::ParallelizeSequence<T>(std::vector<model::Module<T>*>&,                    \
                                             const model::Module<T>*, const model::Module<T>*,   \
                                             bool, bool, model::ModuleBuilder&) const;
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

template void TensorParallelPlan::Parallelize<float>(model::DecoderBlock<float>&,
                                                     model::ModuleBuilder&) const;
template void TensorParallelPlan::Parallelize<double>(model::DecoderBlock<double>&,
                                                      model::ModuleBuilder&) const;

}  // namespace sluice::parallel
