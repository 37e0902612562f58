#include "engine/parallel/tensor_plan.h"

#include <array>
#include <string>
#include <utility>

#include "engine/model/linear.h"
#include "engine/parallel/tensor_region.h"
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
    const model::ModelOptions& options, Comm& tensor, Device& device) {
  SLUICE_RETURN_IF_ERROR(model::ValidateModelOptions(options));
  if (tensor.size() != options.tensor_parallel_size ||
      tensor.rank() != options.tensor_parallel_rank) {
    return InvalidArgumentError(
        "the tensor-parallel communicator {} is rank {} of {}, but the model is built as tensor "
        "rank {} of {}; pass the tensor group of this rank's process grid",
        tensor.name(), tensor.rank(), tensor.size(), options.tensor_parallel_rank,
        options.tensor_parallel_size);
  }
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<TensorComm> comm, TensorComm::Create(tensor, device));
  return std::unique_ptr<TensorParallelPlan>(new TensorParallelPlan(options, std::move(comm)));
}

TensorParallelPlan::TensorParallelPlan(const model::ModelOptions& options,
                                       std::unique_ptr<TensorComm> comm)
    : size_(options.tensor_parallel_size),
      rank_(options.tensor_parallel_rank),
      q_rows_(options.d_model),
      kv_rows_(options.n_kv_head * (options.d_model / options.n_head)),
      comm_(std::move(comm)) {}

TensorSharding TensorParallelPlan::ShardingOf(std::string_view name, const Shape& global) const {
  const size_t dot = name.rfind('.');
  const std::string_view module = dot == std::string_view::npos ? name : name.substr(0, dot);
  const bool weight = name.substr(dot + 1) == "weight";
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

template void TensorParallelPlan::Parallelize<float>(model::DecoderBlock<float>&,
                                                     model::ModuleBuilder&) const;
template void TensorParallelPlan::Parallelize<double>(model::DecoderBlock<double>&,
                                                      model::ModuleBuilder&) const;

}  // namespace sluice::parallel
