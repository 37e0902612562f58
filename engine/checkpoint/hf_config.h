// A Hugging Face model's config.json as Sluice's model settings, both ways: model.init_from reads
// the config.json beside its weights to fill the model section the user left unset (and refuses
// a setting given with another value), and `sluice convert` writes one that transformers'
// from_pretrained loads. Two model types map onto Sluice's families: gpt2 and llama. Anything in
// a config.json that would make transformers compute another model than Sluice's (q/k/v biases,
// rope scaling, another activation, a head size other than d_model / n_head, another model type)
// is refused naming the field, so such a file is never trained as a different model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/settings.h"
#include "runtime/status.h"

namespace sluice::checkpoint {

// One model setting a config.json decides.
struct HfModelSetting {
  std::string key;         // "model.n_head"
  SettingValue value;      // int64_t, double, bool or std::string
  std::string field;       // where config.json says it: "num_attention_heads"
  bool defaulted = false;  // the field is absent: transformers' default for the model type
};

struct HfModelConfig {
  std::filesystem::path path;  // the config.json read
  std::string model_type;      // "gpt2" or "llama"
  std::vector<HfModelSetting> settings;
};

// The config.json that describes the weights at `init_from`: inside it when it is a folder,
// beside it when it is a file (a .safetensors or a model.safetensors.index.json). nullopt when
// there is none, or `init_from` does not exist.
std::optional<std::filesystem::path> FindHfConfigJson(const std::filesystem::path& init_from);

// The model settings `config_json` decides. InvalidArgument naming the file and the field for
// text that is not a JSON object, a model_type other than gpt2 or llama, a field of the wrong
// type, or a feature Sluice's model does not have.
Result<HfModelConfig> ReadHfModelConfig(const std::filesystem::path& config_json);

// The resolver's step for model.init_from (engine/config/config_resolve.cpp): with a config.json
// beside the weights, fills every model setting it decides that was not given (or is "auto"),
// notes what it filled from where, and refuses a given setting whose value differs, naming the
// setting, where it was set, its value, the config.json field and its value. `source_name`
// prefixes messages as the resolver's own do.
Status ApplyHfModelConfig(std::string_view source_name, SettingValues* values,
                          std::vector<std::string>* notes);

// The model `sluice convert` describes, from a checkpoint's resolved config.
struct HfExportModel {
  std::string family = "gpt2";  // "gpt2" or "llama"
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_kv_head = 0;
  int64_t d_model = 0;
  int64_t d_ff = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  std::string torch_dtype = "float32";  // of the weights written: float32, bfloat16, float16
};

// The model section of a resolved config record (ConfigRecordJson: {"settings": {"model.n_layer":
// {"value": 2, ...}, ...}}), as a checkpoint's manifest holds it. Settings a checkpoint of an
// older Sluice lacks take the values that Sluice then used (max_position_embeddings = seq_len,
// rope_theta 10000, norm_eps 1e-5). InvalidArgument naming `what` and the missing setting.
Result<HfExportModel> HfExportModelFromRecord(const nlohmann::ordered_json& record,
                                              std::string_view what);

// config.json for transformers' from_pretrained (GPT2LMHeadModel or LlamaForCausalLM). Dropout is
// zero and bos/eos unset: Sluice has neither.
nlohmann::ordered_json HfConfigJson(const HfExportModel& model);

}  // namespace sluice::checkpoint
