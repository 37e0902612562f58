// Fuzzes the config parser end to end: a YAML (SLUICE_FUZZ_JSON unset) or JSON document is parsed
// (engine/config/yaml_reader.cpp, json_reader.cpp), layered over the defaults, resolved for a
// world size and validated (LoadConfigFromText), and an accepted config is printed both ways
// (`sluice config check`, the record stored in checkpoints). The YAML target also reads the
// input as a --set value. No environment variable or /proc/meminfo is read: the result depends
// on the input only.
#include <cstddef>
#include <cstdint>

#include "engine/config/config.h"
#include "fuzz_util.h"

namespace {

#ifdef SLUICE_FUZZ_JSON
constexpr sluice::ConfigFormat kFormat = sluice::ConfigFormat::kJson;
constexpr std::string_view kName = "fuzz.json";
#else
constexpr sluice::ConfigFormat kFormat = sluice::ConfigFormat::kYaml;
constexpr std::string_view kName = "fuzz.yaml";
#endif

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sluice::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = sluice::fuzz::AsText(data, size);
  sluice::ConfigSources sources;
  sources.env.emplace();  // no SLUICE_CFG_* from the fuzzing process
  sources.available_host_memory = int64_t{64} << 30;
  sources.world_size = 1 + static_cast<int>(size % 4);  // resolve "auto" for 1 to 4 ranks

  sluice::Result<sluice::Config> config = sluice::LoadConfigFromText(text, kFormat, sources, kName);
  if (config.ok()) {
    const std::string listing = sluice::ConfigToText(*config);
    const std::string record = sluice::ConfigRecordJson(*config).dump();
    SLUICE_FUZZ_EXPECT(!listing.empty() && !record.empty(), "empty output for an accepted config");
  } else {
    SLUICE_FUZZ_EXPECT(!config.status().message().empty(), "an error without a message");
  }
#ifndef SLUICE_FUZZ_JSON
  (void)sluice::ParseConfigValueText(text, "--set fuzz");
#endif
  return 0;
}
