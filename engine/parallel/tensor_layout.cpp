#include "engine/parallel/tensor_layout.h"

#include <fmt/format.h>

#include <array>

namespace sluice::parallel {
namespace {

enum class Style : uint8_t { kColumn, kFusedQkv, kKeyValue, kRow };

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
    {".self_attn.k_proj", Style::kKeyValue},
    {".self_attn.v_proj", Style::kKeyValue},
    {".self_attn.o_proj", Style::kRow},
    {".mlp.gate_proj", Style::kColumn},
    {".mlp.up_proj", Style::kColumn},
    {".mlp.down_proj", Style::kRow},
}};

// The tables split along the vocabulary, by parameter name.
constexpr std::array<std::string_view, 3> kVocabTables = {".wte.weight", ".embed_tokens.weight",
                                                          "lm_head.weight"};

// The norms, by module name (their gradients are partial sums under sequence parallelism).
constexpr std::array<std::string_view, 5> kNormSuffixes = {
    ".ln_1", ".ln_2", ".ln_f", ".input_layernorm", ".post_attention_layernorm"};

bool IsNorm(std::string_view module) {
  if (module == "model.norm") return true;  // Llama's final norm
  for (const std::string_view suffix : kNormSuffixes) {
    if (module.ends_with(suffix)) return true;
  }
  return false;
}

const Rule* RuleOf(std::string_view module) {
  for (const Rule& rule : kRules) {
    if (module.ends_with(rule.module_suffix)) return &rule;
  }
  return nullptr;
}

}  // namespace

bool IsVocabTable(std::string_view name) {
  for (const std::string_view suffix : kVocabTables) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

bool IsRowParallel(std::string_view module) {
  const Rule* rule = RuleOf(module);
  return rule != nullptr && rule->style == Style::kRow;
}

TensorLayout TensorLayoutOf(const model::ModelOptions& options, bool vocab_parallel) {
  TensorLayout layout;
  layout.size = options.tensor_parallel_size;
  layout.rank = options.tensor_parallel_rank;
  layout.vocab_parallel = vocab_parallel;
  layout.sequence_parallel = options.sequence_parallel;
  layout.q_rows = options.d_model;
  layout.kv_rows = options.n_head > 0 ? options.n_kv_head * (options.d_model / options.n_head) : 0;
  // Fewer key/value heads than ranks (TensorSplitError made the size a multiple of them): one
  // head per rank, each replicated on size / n_kv_head ranks, which own query heads that use it
  // (query head q uses key/value head q / (n_head / n_kv_head); rank r holds query heads
  // [r n_head / size, (r + 1) n_head / size), all of which use head r / (size / n_kv_head)).
  if (options.n_kv_head > 0 && options.n_kv_head < options.tensor_parallel_size) {
    layout.kv_pieces = options.n_kv_head;
  }
  return layout;
}

Result<TensorSharding> TensorShardingOf(const TensorLayout& layout, std::string_view name,
                                        const Shape& global) {
  if (layout.size <= 1) return WholeTensor(global);
  const size_t dot = name.rfind('.');
  const std::string_view module = dot == std::string_view::npos ? name : name.substr(0, dot);
  const bool weight = dot != std::string_view::npos && name.substr(dot + 1) == "weight";
  Result<TensorSharding> sharding = [&]() -> Result<TensorSharding> {
    if (layout.vocab_parallel && IsVocabTable(name)) {
      return SplitTensorBalanced(global, 0, layout.size, layout.rank);
    }
    const Rule* rule = RuleOf(module);
    if (rule == nullptr) {
      TensorSharding replicated = ReplicatedTensor(global, layout.size);
      replicated.partial_grad = layout.sequence_parallel && IsNorm(module);
      return replicated;
    }
    switch (rule->style) {
      case Style::kColumn:
        return SplitTensor(global, 0, layout.size, layout.rank);
      case Style::kKeyValue:
        if (layout.kv_pieces > 0) {
          return SplitTensorShared(global, 0, layout.kv_pieces, layout.size, layout.rank);
        }
        return SplitTensor(global, 0, layout.size, layout.rank);
      case Style::kFusedQkv:
        return SplitTensor(global, 0, layout.size, layout.rank,
                           {layout.q_rows, layout.kv_rows, layout.kv_rows});
      case Style::kRow:
        if (!weight) return ReplicatedTensor(global, layout.size);
        return SplitTensor(global, 1, layout.size, layout.rank);
    }
    return ReplicatedTensor(global, layout.size);
  }();
  if (!sharding.ok()) {
    return Status(sharding.status())
        .WithContext(
            fmt::format("the tensor-parallel layout of {} over {} ranks", name, layout.size));
  }
  return sharding;
}

}  // namespace sluice::parallel
