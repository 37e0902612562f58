#include "engine/estimate/model_layout.h"

#include <algorithm>
#include <initializer_list>
#include <numeric>
#include <string>

#include "engine/parallel/tensor_layout.h"
#include "runtime/check.h"

namespace sluice::estimate {

int64_t UnitLayout::owned_elements() const {
  return std::accumulate(param_numels.begin(), param_numels.end(), int64_t{0});
}

std::vector<UnitLayout> DescribeUnits(const model::ModelOptions& o, bool vocab_parallel) {
  const bool gpt2 = o.family == model::Family::kGpt2;
  const int64_t d = o.d_model;
  const int64_t f = o.d_ff;
  const int64_t v = o.vocab_size;
  const int64_t kv_width = o.n_kv_head * (d / o.n_head);
  const parallel::TensorLayout tensor = parallel::TensorLayoutOf(o, vocab_parallel);
  // This tensor rank's elements of the parameter `name` of global shape `global` (block names
  // are layer 0's: the rules go by suffix).
  auto local = [&](std::string_view name, std::initializer_list<int64_t> global) {
    Result<parallel::TensorSharding> sharding =
        parallel::TensorShardingOf(tensor, name, Shape(global));
    SLUICE_CHECK(sharding.ok()) << sharding.status().ToString();  // ValidateModelOptions'd
    return sharding->LocalShape().numel();
  };
  std::vector<UnitLayout> units;

  const std::string root = gpt2 ? "transformer" : "model";
  const std::string table = root + (gpt2 ? ".wte.weight" : ".embed_tokens.weight");
  UnitLayout embeddings;
  embeddings.name = "embeddings";
  embeddings.param_numels = {local(table, {v, d})};
  if (gpt2) embeddings.param_numels.push_back(local("transformer.wpe.weight", {o.seq_len, d}));
  units.push_back(std::move(embeddings));

  UnitLayout block;
  block.name = "block";
  block.count = o.n_layer;
  if (gpt2) {
    const int64_t qkv = d + 2 * kv_width;
    const std::string b = "transformer.h.0.";
    block.param_numels = {local(b + "ln_1.weight", {d}),
                          local(b + "ln_1.bias", {d}),
                          local(b + "attn.c_attn.weight", {qkv, d}),
                          local(b + "attn.c_attn.bias", {qkv}),
                          local(b + "attn.c_proj.weight", {d, d}),
                          local(b + "attn.c_proj.bias", {d}),
                          local(b + "ln_2.weight", {d}),
                          local(b + "ln_2.bias", {d}),
                          local(b + "mlp.c_fc.weight", {f, d}),
                          local(b + "mlp.c_fc.bias", {f}),
                          local(b + "mlp.c_proj.weight", {d, f}),
                          local(b + "mlp.c_proj.bias", {d})};
  } else {
    const std::string b = "model.layers.0.";
    block.param_numels = {local(b + "input_layernorm.weight", {d}),
                          local(b + "self_attn.q_proj.weight", {d, d}),
                          local(b + "self_attn.k_proj.weight", {kv_width, d}),
                          local(b + "self_attn.v_proj.weight", {kv_width, d}),
                          local(b + "self_attn.o_proj.weight", {d, d}),
                          local(b + "post_attention_layernorm.weight", {d}),
                          local(b + "mlp.gate_proj.weight", {f, d}),
                          local(b + "mlp.up_proj.weight", {f, d}),
                          local(b + "mlp.down_proj.weight", {d, f})};
  }
  units.push_back(std::move(block));

  UnitLayout final_norm;
  final_norm.name = "final_norm";
  if (gpt2) {
    final_norm.param_numels = {local("transformer.ln_f.weight", {d}),
                               local("transformer.ln_f.bias", {d})};
  } else {
    final_norm.param_numels = {local("model.norm.weight", {d})};
  }
  units.push_back(std::move(final_norm));

  UnitLayout head;
  head.name = "lm_head";
  // A tied head reads this rank's piece of the token table (split like the head would be).
  const int64_t head_elements = local("lm_head.weight", {v, d});
  if (!o.tie_embeddings) head.param_numels = {head_elements};
  head.read_elements = head_elements;
  units.push_back(std::move(head));

  for (UnitLayout& unit : units) {
    if (unit.name != "lm_head") unit.read_elements = unit.owned_elements();
  }
  return units;
}

LayoutSummary SummarizeLayout(const std::vector<UnitLayout>& units, int64_t persistence_threshold) {
  LayoutSummary s;
  for (const UnitLayout& unit : units) {
    const int64_t owned = unit.owned_elements();
    int64_t persistent = 0;
    for (int64_t numel : unit.param_numels) {
      if (numel <= persistence_threshold) persistent += numel;
    }
    s.parameters += unit.count * owned;
    s.persistent_elements += unit.count * persistent;
    s.largest_unit_owned = std::max(s.largest_unit_owned, owned);
    s.largest_unit_read = std::max(s.largest_unit_read, unit.read_elements);
    s.largest_unit_gathered = std::max(s.largest_unit_gathered, owned - persistent);
  }
  return s;
}

}  // namespace sluice::estimate
