#include "engine/parallel/tensor_plan.h"

#include <array>
#include <string>
#include <utility>

#include "engine/model/linear.h"
#include "engine/parallel/tensor_region.h"
#include "engine/parallel/tensor_vocab.h"
#include "runtime/check.h"

namespace sluice::parallel {
namespace {

enum class Style : uint8_t { kColumn, kFusedQkv, kRow };

struct Rule {
  std::string_view module_suffix;  // of the Linear's name
  Style style;
};

// Megatron's pairs: the projections into a sublayer column-parallel, the one out of it row-wise.
constexpr std::array<Rule, 11> kRules = {{
    {".attn.c_attn", Style::kFusedQkv},
    {".attn.c_proj", Style::kRow},
    {".mlp.c_fc", Style::kColumn},
    {".mlp.c_proj", Style::kRow},
    {".self_attn.q_proj", Style::kColumn},
    {".self_attn.k_proj", Style::kColumn},
    {".self_attn.v_proj", Style::kColumn},
    {".self_attn.o_proj", Style::kRow},
    {".mlp.gate_proj", Style::kColumn},
    {".mlp.up_proj", Style::kColumn},
    {".mlp.down_proj", Style::kRow},
}};

// The tables split along the vocabulary (tensor_vocab.h), by parameter name.
constexpr std::array<std::string_view, 3> kVocabTables = {".wte.weight", ".embed_tokens.weight",
                                                          "lm_head.weight"};

bool IsVocabTable(std::string_view name) {
  for (const std::string_view suffix : kVocabTables) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

// The rule of the Linear named `module`, if any.
const Rule* RuleOf(std::string_view module) {
  for (const Rule& rule : kRules) {
    if (module.ends_with(rule.module_suffix)) return &rule;
  }
  return nullptr;
}

template <typename T>
void OmitRowBiases(model::Module<T>& module) {
  if (auto* linear = dynamic_cast<model::Linear<T>*>(&module); linear != nullptr) {
    const Rule* rule = RuleOf(linear->name());
    if (rule != nullptr && rule->style == Style::kRow) linear->OmitBiasInForward();
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
      q_rows_(options.d_model),
      kv_rows_(options.n_kv_head * (options.d_model / options.n_head)),
      comm_(std::move(comm)) {
  if (vocab_parallel_) {
    Result<TensorSharding> rows = SplitTensorBalanced(Shape{options.vocab_size}, 0, size_, rank_);
    SLUICE_CHECK(rows.ok()) << rows.status().ToString();  // Create checked the size
    vocab_shard_ = {.start = rows->PieceStart(), .vocab = options.vocab_size};
  }
}

TensorSharding TensorParallelPlan::ShardingOf(std::string_view name, const Shape& global) const {
  const size_t dot = name.rfind('.');
  const std::string_view module = dot == std::string_view::npos ? name : name.substr(0, dot);
  const bool weight = name.substr(dot + 1) == "weight";
  if (vocab_parallel_ && IsVocabTable(name)) {
    Result<TensorSharding> rows = SplitTensorBalanced(global, 0, size_, rank_);
    SLUICE_CHECK(rows.ok()) << name << ": " << rows.status().ToString();
    SLUICE_CHECK_EQ(rows->PieceStart(), vocab_shard_.start) << name;
    return std::move(rows).value();
  }
  const Rule* rule = RuleOf(module);
  if (rule == nullptr) return ReplicatedTensor(global, size_);
  Result<TensorSharding> sharding = [&]() -> Result<TensorSharding> {
    switch (rule->style) {
      case Style::kColumn:
        return SplitTensor(global, 0, size_, rank_);
      case Style::kFusedQkv:
        return SplitTensor(global, 0, size_, rank_, {q_rows_, kv_rows_, kv_rows_});
      case Style::kRow:
        if (!weight) return ReplicatedTensor(global, size_);
        return SplitTensor(global, 1, size_, rank_);
    }
    return ReplicatedTensor(global, size_);
  }();
  // ValidateModelOptions made the heads and d_ff divide by the size.
  SLUICE_CHECK(sharding.ok()) << name << ": " << sharding.status().ToString();
  return std::move(sharding).value();
}

template <typename T>
void TensorParallelPlan::Parallelize(model::DecoderBlock<T>& block,
                                     model::ModuleBuilder& builder) const {
  block.WrapSublayers([&](std::unique_ptr<model::Module<T>> sublayer) {
    if (rank_ != 0) OmitRowBiases(*sublayer);
    return std::unique_ptr<model::Module<T>>(
        std::make_unique<TensorParallelRegion<T>>(builder, std::move(sublayer), *comm_));
  });
}

template <typename T>
void TensorParallelPlan::Parallelize(model::Embeddings<T>& embeddings,
                                     model::ModuleBuilder& builder) const {
  SLUICE_CHECK(vocab_parallel_);
  embeddings.WrapTokens([&](std::unique_ptr<model::TokenEmbedding<T>> table) {
    SLUICE_CHECK_EQ(table->rows(),
                    builder.registry().parameter(table->weight_param()).sharding.PieceSize());
    return std::unique_ptr<model::Module<T>>(std::make_unique<VocabParallelEmbedding<T>>(
        builder, std::move(table), vocab_shard_, *comm_));
  });
}

template <typename T>
std::unique_ptr<model::Module<T>> TensorParallelPlan::ParallelizeHead(
    std::unique_ptr<model::Linear<T>> head, model::ModuleBuilder& builder) const {
  SLUICE_CHECK(vocab_parallel_);
  return std::make_unique<VocabParallelHead<T>>(builder, std::move(head), *comm_);
}

template <typename T>
std::unique_ptr<model::CrossEntropyLoss<T>> TensorParallelPlan::MakeLoss(
    model::ModuleBuilder& builder, int64_t columns) const {
  SLUICE_CHECK(vocab_parallel_);
  return std::make_unique<VocabParallelCrossEntropy<T>>(builder, columns, vocab_shard_, *comm_);
}

#define SLUICE_INSTANTIATE(T)                                                                    \
  template void TensorParallelPlan::Parallelize<T>(model::Embeddings<T>&, model::ModuleBuilder&) \
      const;                                                                                     \
  template std::unique_ptr<model::Module<T>> TensorParallelPlan::ParallelizeHead<T>(             \
      std::unique_ptr<model::Linear<T>>, model::ModuleBuilder&) const;                           \
  template std::unique_ptr<model::CrossEntropyLoss<T>> TensorParallelPlan::MakeLoss<T>(          \
      model::ModuleBuilder&, int64_t) const;
SLUICE_INSTANTIATE(float)
SLUICE_INSTANTIATE(double)
#undef SLUICE_INSTANTIATE

template void TensorParallelPlan::Parallelize<float>(model::DecoderBlock<float>&,
                                                     model::ModuleBuilder&) const;
template void TensorParallelPlan::Parallelize<double>(model::DecoderBlock<double>&,
                                                      model::ModuleBuilder&) const;

}  // namespace sluice::parallel
