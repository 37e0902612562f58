// Helpers for the config tests: loads from text with the process environment and the machine's
// RAM kept out, so results do not depend on where the tests run.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/config/config.h"

namespace sluice::testing {

inline constexpr int64_t kTestHostMemory = int64_t{16} << 30;

inline ConfigSources IsolatedSources() {
  ConfigSources sources;
  sources.env = std::vector<std::pair<std::string, std::string>>{};
  sources.available_host_memory = kTestHostMemory;
  return sources;
}

inline Result<Config> LoadYaml(std::string_view text, ConfigSources sources = IsolatedSources()) {
  return LoadConfigFromText(text, ConfigFormat::kYaml, sources);
}

inline Result<Config> LoadJson(std::string_view text, ConfigSources sources = IsolatedSources()) {
  return LoadConfigFromText(text, ConfigFormat::kJson, sources);
}

// Fails the test with the status message if loading failed.
inline Config MustLoadYaml(std::string_view text, ConfigSources sources = IsolatedSources()) {
  Result<Config> config = LoadYaml(text, std::move(sources));
  EXPECT_TRUE(config.ok()) << config.status().ToString();
  return config.ok() ? std::move(config).value() : Config{};
}

}  // namespace sluice::testing
