// Config snippets written by tools for the user to layer over a base config, such as the `aio`
// section `sluice bench aio --tune` picks. A snippet holds only the keys the tool chose, so the
// base keeps everything else (single_submit, overlap_events, ...) when it is layered last.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "engine/config/config.h"

namespace sluice {

// YAML: a header comment (`provenance` lines, then how to use the file, naming it
// `snippet_name`), then `aio:` with block_size, queue_depth and intra_op_parallelism.
std::string AioTunedSnippetYaml(const AioConfig& aio, const std::vector<std::string>& provenance,
                                std::string_view snippet_name);

}  // namespace sluice
