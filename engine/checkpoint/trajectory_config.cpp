#include "engine/checkpoint/trajectory_config.h"

#include <fmt/format.h>

#include <array>

#include "runtime/json_text.h"

namespace sluice::checkpoint {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::array<std::string_view, 7> kDecidingKeys = {
    "train_batch_size",  "gradient_clipping", "data.train_path", "data.format",
    "data.val_fraction", "data.seed",         "device.cpu_gemm"};
constexpr std::array<std::string_view, 5> kDecidingSections = {"optimizer.", "scheduler.", "fp16.",
                                                               "bf16.", "model."};
constexpr std::array<std::string_view, 2> kNotDeciding = {"model.init_from", "model.init_std"};

const Json* SettingIn(const Json& record, const std::string& key) {
  auto settings = record.find("settings");
  if (settings == record.end() || !settings->is_object()) return nullptr;
  auto setting = settings->find(key);
  if (setting == settings->end() || !setting->is_object()) return nullptr;
  auto value = setting->find("value");
  return value == setting->end() ? nullptr : &*value;
}

std::string Show(const Json& value) { return JsonText(value); }

}  // namespace

bool DecidesTrajectory(std::string_view setting) {
  for (std::string_view key : kNotDeciding) {
    if (setting == key) return false;
  }
  for (std::string_view key : kDecidingKeys) {
    if (setting == key) return true;
  }
  for (std::string_view section : kDecidingSections) {
    if (setting.starts_with(section)) return true;
  }
  return false;
}

std::vector<SettingChange> TrajectoryChanges(const Json& saved_record, const Json& now_record) {
  std::vector<SettingChange> changes;
  auto settings = now_record.find("settings");
  if (settings == now_record.end() || !settings->is_object()) return changes;
  // The fp16 loss-scaling settings matter only to a run in fp16.
  auto fp16_enabled = [](const Json& record) {
    const Json* enabled = SettingIn(record, "fp16.enabled");
    return enabled != nullptr && *enabled == true;
  };
  const bool fp16 = fp16_enabled(saved_record) || fp16_enabled(now_record);
  for (auto it = settings->begin(); it != settings->end(); ++it) {
    if (!DecidesTrajectory(it.key())) continue;
    if (!fp16 && it.key().starts_with("fp16.") && it.key() != "fp16.enabled") continue;
    const Json* saved = SettingIn(saved_record, it.key());
    const Json* now = SettingIn(now_record, it.key());
    if (saved == nullptr || now == nullptr || *saved == *now) continue;
    changes.push_back({.key = it.key(), .saved = *saved, .now = *now});
  }
  return changes;
}

std::string DescribeChanges(const std::vector<SettingChange>& changes) {
  std::string text;
  for (const SettingChange& c : changes) {
    if (!text.empty()) text += ", ";
    text += fmt::format("{} {} -> {}", c.key, Show(c.saved), Show(c.now));
  }
  return text;
}

}  // namespace sluice::checkpoint
