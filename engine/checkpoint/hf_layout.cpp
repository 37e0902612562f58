#include "engine/checkpoint/hf_layout.h"

namespace sluice::checkpoint {
namespace {

constexpr std::string_view kConv1DSuffixes[] = {".attn.c_attn.weight", ".attn.c_proj.weight",
                                                ".mlp.c_fc.weight", ".mlp.c_proj.weight"};
constexpr std::string_view kBasePrefixes[] = {"transformer.", "model."};

}  // namespace

bool IsHfConv1DWeight(std::string_view name) {
  if (name.starts_with("transformer.")) name.remove_prefix(12);
  if (!name.starts_with("h.")) return false;
  for (std::string_view suffix : kConv1DSuffixes) {
    if (name.ends_with(suffix)) return true;
  }
  return false;
}

std::vector<int64_t> HfShape(std::string_view name, const Shape& shape) {
  std::vector<int64_t> dims(shape.dims().begin(), shape.dims().end());
  if (IsHfConv1DWeight(name) && dims.size() == 2) std::swap(dims[0], dims[1]);
  return dims;
}

std::vector<std::string> HfNameCandidates(std::string_view name) {
  std::vector<std::string> names = {std::string(name)};
  for (std::string_view prefix : kBasePrefixes) {
    if (name.starts_with(prefix)) names.emplace_back(name.substr(prefix.size()));
  }
  return names;
}

bool IsHfNonParameterBuffer(std::string_view name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
         name.ends_with(".rotary_emb.inv_freq");
}

}  // namespace sluice::checkpoint
