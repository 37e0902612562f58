#include "engine/config/config_snippet.h"

#include <fmt/format.h>

#include "runtime/size_format.h"

namespace sluice {

std::string AioTunedSnippetYaml(const AioConfig& aio, const std::vector<std::string>& provenance,
                                std::string_view snippet_name) {
  std::string out;
  for (const std::string& line : provenance) out += fmt::format("# {}\n", line);
  out += fmt::format(
      "#\n"
      "# A config layer: pass it after the base config so that these keys win and everything else\n"
      "# comes from the base (YAML or JSON, e.g. a DeepSpeed ds_config.json):\n"
      "#   sluice train --config base.yaml --config {0}\n"
      "#   sluice config check --config base.yaml --config {0}   # shows where each value came "
      "from\n",
      snippet_name);
  out += "aio:\n";
  out +=
      fmt::format("  block_size: {}\n", FormatByteSizeExact(static_cast<uint64_t>(aio.block_size)));
  out += fmt::format("  queue_depth: {}\n", aio.queue_depth);
  out += fmt::format("  intra_op_parallelism: {}\n", aio.intra_op_parallelism);
  return out;
}

}  // namespace sluice
