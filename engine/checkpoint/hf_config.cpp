#include "engine/checkpoint/hf_config.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sluice::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// The fields of one config.json, read with transformers' class defaults for the absent ones.
class Fields {
 public:
  Fields(const Json& json, const fs::path& path) : json_(json), path_(path) {}

  // The field's value, or nullptr when it is absent or null (transformers then uses its default).
  const Json* Find(std::string_view field) const {
    auto it = json_.find(field);
    return it == json_.end() || it->is_null() ? nullptr : &*it;
  }

  Result<int64_t> Int(std::string_view field, int64_t fallback, bool* defaulted) const {
    const Json* v = Find(field);
    *defaulted = v == nullptr;
    if (v == nullptr) return fallback;
    if (!v->is_number_integer() || v->get<int64_t>() < 1) {
      return Bad(field, *v, "a positive integer");
    }
    return v->get<int64_t>();
  }

  Result<double> Float(std::string_view field, double fallback, bool* defaulted) const {
    const Json* v = Find(field);
    *defaulted = v == nullptr;
    if (v == nullptr) return fallback;
    if (!v->is_number() || !(v->get<double>() > 0.0) || !std::isfinite(v->get<double>())) {
      return Bad(field, *v, "a positive number");
    }
    return v->get<double>();
  }

  Result<bool> Bool(std::string_view field, bool fallback, bool* defaulted) const {
    const Json* v = Find(field);
    *defaulted = v == nullptr;
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Bad(field, *v, "true or false");
    return v->get<bool>();
  }

  Result<std::string> String(std::string_view field, std::string fallback) const {
    const Json* v = Find(field);
    if (v == nullptr) return fallback;
    if (!v->is_string()) return Bad(field, *v, "a string");
    return v->get<std::string>();
  }

  // A feature Sluice's model lacks.
  Status Unsupported(std::string_view field, const Json& value, std::string_view why) const {
    return InvalidArgumentError(
        "{}: {} {} is not supported: {}; Sluice would train another model than this file's, so "
        "it does not load it",
        path_.string(), field, value.dump(), why);
  }

  const fs::path& path() const { return path_; }

 private:
  Status Bad(std::string_view field, const Json& value, std::string_view want) const {
    return InvalidArgumentError("{}: field {} is {}, but it must be {}", path_.string(), field,
                                value.dump(), want);
  }

  const Json& json_;
  const fs::path& path_;
};

// Appends the setting `key` read from `field`.
class SettingList {
 public:
  explicit SettingList(std::vector<HfModelSetting>* out) : out_(out) {}
  void Add(std::string key, SettingValue value, std::string field, bool defaulted) {
    out_->push_back({std::move(key), std::move(value), std::move(field), defaulted});
  }

 private:
  std::vector<HfModelSetting>* out_;
};

// GPT2Config's fields and defaults (transformers/models/gpt2/configuration_gpt2.py).
Status ReadGpt2(const Fields& f, std::vector<HfModelSetting>* settings) {
  SettingList out(settings);
  bool d = false;
  out.Add("model.family", std::string("gpt2"), "model_type", false);
  SLUICE_ASSIGN_OR_RETURN(int64_t n_layer, f.Int("n_layer", 12, &d));
  out.Add("model.n_layer", n_layer, "n_layer", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t n_head, f.Int("n_head", 12, &d));
  out.Add("model.n_head", n_head, "n_head", d);
  out.Add("model.n_kv_head", n_head, "n_head", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t n_embd, f.Int("n_embd", 768, &d));
  out.Add("model.d_model", n_embd, "n_embd", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t n_inner, f.Int("n_inner", 4 * n_embd, &d));
  out.Add("model.d_ff", n_inner, d ? "n_inner (null: 4 * n_embd)" : "n_inner", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t vocab, f.Int("vocab_size", 50257, &d));
  out.Add("model.vocab_size", vocab, "vocab_size", d);
  // Old files spell the position count n_ctx.
  const char* positions_field =
      f.Find("n_positions") == nullptr && f.Find("n_ctx") != nullptr ? "n_ctx" : "n_positions";
  SLUICE_ASSIGN_OR_RETURN(int64_t positions, f.Int(positions_field, 1024, &d));
  out.Add("model.max_position_embeddings", positions, positions_field, d);
  SLUICE_ASSIGN_OR_RETURN(double eps, f.Float("layer_norm_epsilon", 1e-5, &d));
  out.Add("model.norm_eps", eps, "layer_norm_epsilon", d);
  SLUICE_ASSIGN_OR_RETURN(bool tied, f.Bool("tie_word_embeddings", true, &d));
  out.Add("model.tie_embeddings", tied, "tie_word_embeddings", d);

  // Sluice's GPT-2 MLP is the tanh approximation of GELU, which is what gelu_new computes.
  SLUICE_ASSIGN_OR_RETURN(std::string act, f.String("activation_function", "gelu_new"));
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return f.Unsupported("activation_function", act,
                         "Sluice's GPT-2 MLP uses GELU's tanh approximation (gelu_new)");
  }
  SLUICE_ASSIGN_OR_RETURN(bool scaled, f.Bool("scale_attn_weights", true, &d));
  if (!scaled) {
    return f.Unsupported("scale_attn_weights", false,
                         "Sluice's attention scales the scores by 1 / sqrt(head size)");
  }
  SLUICE_ASSIGN_OR_RETURN(bool by_layer, f.Bool("scale_attn_by_inverse_layer_idx", false, &d));
  if (by_layer) {
    return f.Unsupported("scale_attn_by_inverse_layer_idx", true,
                         "Sluice does not scale attention by the layer index");
  }
  SLUICE_ASSIGN_OR_RETURN(bool cross, f.Bool("add_cross_attention", false, &d));
  if (cross) return f.Unsupported("add_cross_attention", true, "Sluice has no cross-attention");
  return OkStatus();
}

// The rotary base: rope_theta, or transformers 5's rope_parameters.rope_theta; any rope scaling
// is refused.
Result<double> ReadRopeTheta(const Fields& f, bool* defaulted, std::string* field) {
  *field = "rope_theta";
  double theta = 10000.0;
  *defaulted = true;
  if (const Json* params = f.Find("rope_parameters"); params != nullptr && params->is_object()) {
    if (auto it = params->find("rope_type"); it != params->end() && *it != "default") {
      return f.Unsupported("rope_parameters.rope_type", *it,
                           "Sluice's rotary embedding has no scaling (rope_type default)");
    }
    if (auto it = params->find("rope_theta"); it != params->end()) {
      if (!it->is_number() || !(it->get<double>() > 0.0)) {
        return InvalidArgumentError(
            "{}: field rope_parameters.rope_theta is {}, but it must be a positive number",
            f.path().string(), it->dump());
      }
      *field = "rope_parameters.rope_theta";
      *defaulted = false;
      theta = it->get<double>();
    }
  }
  if (f.Find("rope_theta") != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(theta, f.Float("rope_theta", theta, defaulted));
    *field = "rope_theta";
  }
  if (const Json* scaling = f.Find("rope_scaling"); scaling != nullptr) {
    const Json* type = nullptr;
    if (scaling->is_object()) {
      for (const char* name : {"rope_type", "type"}) {
        if (auto it = scaling->find(name); it != scaling->end()) type = &*it;
      }
    }
    if (type == nullptr || *type != "default") {
      return f.Unsupported("rope_scaling", *scaling,
                           "Sluice's rotary embedding has no scaling (rope_scaling null)");
    }
  }
  return theta;
}

// LlamaConfig's fields and defaults (transformers/models/llama/configuration_llama.py).
Status ReadLlama(const Fields& f, std::vector<HfModelSetting>* settings) {
  SettingList out(settings);
  bool d = false;
  out.Add("model.family", std::string("llama"), "model_type", false);
  SLUICE_ASSIGN_OR_RETURN(int64_t n_layer, f.Int("num_hidden_layers", 32, &d));
  out.Add("model.n_layer", n_layer, "num_hidden_layers", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t n_head, f.Int("num_attention_heads", 32, &d));
  out.Add("model.n_head", n_head, "num_attention_heads", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t n_kv_head, f.Int("num_key_value_heads", n_head, &d));
  out.Add("model.n_kv_head", n_kv_head,
          d ? "num_key_value_heads (null: num_attention_heads)" : "num_key_value_heads", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t hidden, f.Int("hidden_size", 4096, &d));
  out.Add("model.d_model", hidden, "hidden_size", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t inter, f.Int("intermediate_size", 11008, &d));
  out.Add("model.d_ff", inter, "intermediate_size", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t vocab, f.Int("vocab_size", 32000, &d));
  out.Add("model.vocab_size", vocab, "vocab_size", d);
  SLUICE_ASSIGN_OR_RETURN(int64_t positions, f.Int("max_position_embeddings", 2048, &d));
  out.Add("model.max_position_embeddings", positions, "max_position_embeddings", d);
  std::string theta_field;
  SLUICE_ASSIGN_OR_RETURN(double theta, ReadRopeTheta(f, &d, &theta_field));
  out.Add("model.rope_theta", theta, theta_field, d);
  SLUICE_ASSIGN_OR_RETURN(double eps, f.Float("rms_norm_eps", 1e-6, &d));
  out.Add("model.norm_eps", eps, "rms_norm_eps", d);
  SLUICE_ASSIGN_OR_RETURN(bool tied, f.Bool("tie_word_embeddings", false, &d));
  out.Add("model.tie_embeddings", tied, "tie_word_embeddings", d);

  SLUICE_ASSIGN_OR_RETURN(std::string act, f.String("hidden_act", "silu"));
  if (act != "silu") {
    return f.Unsupported("hidden_act", act, "Sluice's Llama MLP is SwiGLU (hidden_act silu)");
  }
  SLUICE_ASSIGN_OR_RETURN(bool attention_bias, f.Bool("attention_bias", false, &d));
  if (attention_bias) {
    return f.Unsupported("attention_bias", true,
                         "Sluice's Llama has no biases on q_proj, k_proj, v_proj and o_proj");
  }
  SLUICE_ASSIGN_OR_RETURN(bool mlp_bias, f.Bool("mlp_bias", false, &d));
  if (mlp_bias) return f.Unsupported("mlp_bias", true, "Sluice's Llama MLP has no biases");
  if (const Json* head_dim = f.Find("head_dim");
      head_dim != nullptr && n_head > 0 && *head_dim != hidden / n_head) {
    return f.Unsupported("head_dim", *head_dim,
                         fmt::format("Sluice's head size is hidden_size / num_attention_heads = {}",
                                     hidden / n_head));
  }
  return OkStatus();
}

// Model types that are near relatives of the two Sluice has: what sets them apart.
std::string_view WhyNotSupported(std::string_view model_type) {
  if (model_type.starts_with("qwen")) {
    return "Qwen's attention has biases on q_proj, k_proj and v_proj, which Sluice's Llama lacks";
  }
  if (model_type == "mistral" || model_type == "mixtral") {
    return "sliding-window attention (and Mixtral's experts) are not in Sluice's Llama";
  }
  if (model_type == "gemma" || model_type == "gemma2") {
    return "Gemma scales its embeddings and norms differently from Llama";
  }
  return "Sluice builds gpt2 and llama models only";
}

}  // namespace

std::optional<fs::path> FindHfConfigJson(const fs::path& init_from) {
  std::error_code ec;
  fs::path dir = init_from;
  if (!fs::is_directory(init_from, ec)) {
    if (!fs::exists(init_from, ec)) return std::nullopt;
    dir = init_from.parent_path();
    if (dir.empty()) dir = ".";
  }
  fs::path json = dir / "config.json";
  if (!fs::is_regular_file(json, ec)) return std::nullopt;
  return json;
}

Result<HfModelConfig> ReadHfModelConfig(const fs::path& config_json) {
  std::ifstream in(config_json, std::ios::binary);
  if (!in) {
    return NotFoundError("cannot read {}: {}", config_json.string(), std::strerror(errno));
  }
  std::stringstream text;
  text << in.rdbuf();
  const Json json = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) {
    return InvalidArgumentError("{} is not a JSON object: expected a Hugging Face config.json",
                                config_json.string());
  }
  HfModelConfig config;
  config.path = config_json;
  const Fields fields(json, config_json);
  SLUICE_ASSIGN_OR_RETURN(config.model_type, fields.String("model_type", ""));
  if (config.model_type == "gpt2") {
    SLUICE_RETURN_IF_ERROR(ReadGpt2(fields, &config.settings));
  } else if (config.model_type == "llama") {
    SLUICE_RETURN_IF_ERROR(ReadLlama(fields, &config.settings));
  } else if (config.model_type.empty()) {
    return InvalidArgumentError(
        "{} has no model_type: a Hugging Face config.json names it (gpt2 or llama for Sluice)",
        config_json.string());
  } else {
    return InvalidArgumentError("{}: model_type {} is not supported: {}", config_json.string(),
                                config.model_type, WhyNotSupported(config.model_type));
  }
  return config;
}

Result<HfExportModel> HfExportModelFromRecord(const Json& record, std::string_view what) {
  auto settings = record.find("settings");
  if (settings == record.end() || !settings->is_object()) {
    return InvalidArgumentError("{} holds no resolved config (settings): cannot describe the model",
                                what);
  }
  auto value = [&](const std::string& key) -> const Json* {
    auto it = settings->find(key);
    if (it == settings->end() || !it->is_object()) return nullptr;
    auto v = it->find("value");
    return v == it->end() || v->is_null() ? nullptr : &*v;
  };
  auto require = [&](const std::string& key, bool (Json::*is)() const noexcept) -> Result<Json> {
    const Json* v = value(key);
    if (v == nullptr || !(v->*is)()) {
      return InvalidArgumentError("{}: the recorded config has no {} (or not of its type)", what,
                                  key);
    }
    return *v;
  };
  HfExportModel m;
  SLUICE_ASSIGN_OR_RETURN(Json family, require("model.family", &Json::is_string));
  m.family = family.get<std::string>();
  if (m.family != "gpt2" && m.family != "llama") {
    return InvalidArgumentError("{}: model.family {} has no Hugging Face layout", what, m.family);
  }
  struct IntKey {
    const char* key;
    int64_t* out;
  };
  for (IntKey k : {IntKey{"model.n_layer", &m.n_layer}, IntKey{"model.n_head", &m.n_head},
                   IntKey{"model.n_kv_head", &m.n_kv_head}, IntKey{"model.d_model", &m.d_model},
                   IntKey{"model.d_ff", &m.d_ff}, IntKey{"model.vocab_size", &m.vocab_size},
                   IntKey{"model.seq_len", &m.max_position_embeddings}}) {
    SLUICE_ASSIGN_OR_RETURN(Json v, require(k.key, &Json::is_number_integer));
    *k.out = v.get<int64_t>();
  }
  SLUICE_ASSIGN_OR_RETURN(Json tied, require("model.tie_embeddings", &Json::is_boolean));
  m.tie_embeddings = tied.get<bool>();
  // Settings that an older Sluice did not record had these values.
  if (const Json* v = value("model.max_position_embeddings"); v && v->is_number_integer()) {
    m.max_position_embeddings = v->get<int64_t>();
  }
  if (const Json* v = value("model.rope_theta"); v && v->is_number()) {
    m.rope_theta = v->get<double>();
  }
  if (const Json* v = value("model.norm_eps"); v && v->is_number()) m.norm_eps = v->get<double>();
  return m;
}

Json HfConfigJson(const HfExportModel& m) {
  Json j;
  if (m.family == "gpt2") {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["n_layer"] = m.n_layer;
    j["n_head"] = m.n_head;
    j["n_embd"] = m.d_model;
    j["n_inner"] = m.d_ff;
    j["n_positions"] = m.max_position_embeddings;
    j["vocab_size"] = m.vocab_size;
    j["layer_norm_epsilon"] = m.norm_eps;
    j["activation_function"] = "gelu_new";
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
  } else {
    j["architectures"] = {"LlamaForCausalLM"};
    j["model_type"] = "llama";
    j["num_hidden_layers"] = m.n_layer;
    j["num_attention_heads"] = m.n_head;
    j["num_key_value_heads"] = m.n_kv_head;
    j["hidden_size"] = m.d_model;
    j["head_dim"] = m.d_model / m.n_head;
    j["intermediate_size"] = m.d_ff;
    j["max_position_embeddings"] = m.max_position_embeddings;
    j["vocab_size"] = m.vocab_size;
    j["rms_norm_eps"] = m.norm_eps;
    j["rope_theta"] = m.rope_theta;
    j["rope_scaling"] = nullptr;
    j["hidden_act"] = "silu";
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
    j["attention_dropout"] = 0.0;
  }
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["torch_dtype"] = m.torch_dtype;
  return j;
}

}  // namespace sluice::checkpoint
