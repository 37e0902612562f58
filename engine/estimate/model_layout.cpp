#include "engine/estimate/model_layout.h"

#include <algorithm>
#include <numeric>

namespace sluice::estimate {

int64_t UnitLayout::owned_elements() const {
  return std::accumulate(param_numels.begin(), param_numels.end(), int64_t{0});
}

std::vector<UnitLayout> DescribeUnits(const model::ModelOptions& o) {
  const bool gpt2 = o.family == model::Family::kGpt2;
  const int64_t d = o.d_model;
  const int64_t f = o.d_ff;
  const int64_t kv_width = o.n_kv_head * (d / o.n_head);
  std::vector<UnitLayout> units;

  UnitLayout embeddings;
  embeddings.name = "embeddings";
  embeddings.param_numels = {o.vocab_size * d};
  if (gpt2) embeddings.param_numels.push_back(o.seq_len * d);  // learned positions (wpe)
  units.push_back(std::move(embeddings));

  UnitLayout block;
  block.name = "block";
  block.count = o.n_layer;
  if (gpt2) {
    const int64_t qkv = d + 2 * kv_width;
    block.param_numels = {d,       d,    // ln_1 weight, bias
                          qkv * d, qkv,  // attn.c_attn
                          d * d,   d,    // attn.c_proj
                          d,       d,    // ln_2
                          f * d,   f,    // mlp.c_fc
                          d * f,   d};   // mlp.c_proj
  } else {
    block.param_numels = {d,                                         // input_layernorm
                          d * d, kv_width * d, kv_width * d, d * d,  // q, k, v, o projections
                          d,                                         // post_attention_layernorm
                          f * d, f * d,        d * f};               // gate, up, down projections
  }
  units.push_back(std::move(block));

  UnitLayout final_norm;
  final_norm.name = "final_norm";
  final_norm.param_numels = gpt2 ? std::vector<int64_t>{d, d} : std::vector<int64_t>{d};
  units.push_back(std::move(final_norm));

  UnitLayout head;
  head.name = "lm_head";
  if (!o.tie_embeddings) head.param_numels = {o.vocab_size * d};
  head.read_elements = o.vocab_size * d;
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
