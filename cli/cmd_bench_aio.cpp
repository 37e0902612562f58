// `sluice bench aio --dir DIR [--size 512M] [--json FILE]`: the NVMe I/O benchmark, the same
// code as benchmarks/bench_aio. `sluice bench aio --tune DIR [--output FILE]` runs a short sweep
// in DIR and writes the best `aio` settings as a YAML config layer that `sluice train` takes as
// it is: `sluice train --config base.yaml --config aio_tuned.yaml`.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/lib/aio_bench.h"
#include "cli/command_registry.h"
#include "engine/config/config.h"
#include "engine/config/config_snippet.h"
#include "engine/train/run_files.h"

namespace sluice::cli {
namespace {

struct TuneOutput {
  std::string path;  // --output; empty: the snippet goes to stdout only
};

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "?";
  return name;
}

// The snippet must load as a config layer with exactly the values chosen; a snippet that did
// not would only fail later, in `sluice train`.
Status CheckSnippetLoads(const std::string& snippet, const AioConfig& chosen) {
  ConfigSources sources;
  sources.env = std::vector<std::pair<std::string, std::string>>{};
  sources.available_host_memory = int64_t{16} << 30;  // the machine does not matter here
  // A snippet is a layer, not a whole config: the batch size comes from the base.
  sources.set_overrides = {"train_micro_batch_size_per_gpu=1"};
  SLUICE_ASSIGN_OR_RETURN(Config config,
                          LoadConfigFromText(snippet, ConfigFormat::kYaml, sources, "<snippet>"));
  if (config.aio.block_size != chosen.block_size || config.aio.queue_depth != chosen.queue_depth ||
      config.aio.intra_op_parallelism != chosen.intra_op_parallelism) {
    return InternalError("the aio snippet reads back as {}/{}/{}, not {}/{}/{}",
                         config.aio.block_size, config.aio.queue_depth,
                         config.aio.intra_op_parallelism, chosen.block_size, chosen.queue_depth,
                         chosen.intra_op_parallelism);
  }
  return OkStatus();
}

Status RunTune(const bench::AioBenchOptions& options, const std::string& output_path) {
  SLUICE_ASSIGN_OR_RETURN(const uint64_t bytes, bench::ParseByteSize(options.size));
  SLUICE_ASSIGN_OR_RETURN(bench::AioTuneResult tuned, bench::TuneAio(options.tune_dir, bytes));
  AioConfig chosen;
  chosen.block_size = static_cast<int64_t>(tuned.best.block_size);
  chosen.queue_depth = tuned.best.queue_depth;
  chosen.intra_op_parallelism = tuned.best.intra_op_parallelism;
  const std::string name = output_path.empty()
                               ? std::string("aio_tuned.yaml")
                               : std::filesystem::path(output_path).filename().string();
  std::vector<std::string> provenance = {
      fmt::format("`aio` settings chosen by `sluice bench aio --tune {}` on {}", options.tune_dir,
                  HostName()),
      fmt::format("(a {} file; {} configurations tried): read {:.3f} GB/s, write {:.3f} GB/s",
                  bench::FormatBytes(bytes), tuned.tried.size() / 2, tuned.read_gbps,
                  tuned.write_gbps)};
  const std::string snippet = AioTunedSnippetYaml(chosen, provenance, name);
  SLUICE_RETURN_IF_ERROR(CheckSnippetLoads(snippet, chosen));
  std::fputs(snippet.c_str(), stdout);
  if (!output_path.empty()) {
    SLUICE_RETURN_IF_ERROR(train::WriteFileAtomically(output_path, snippet));
    std::fprintf(stderr,
                 "aio tune: wrote %s; use it as a layer: sluice train --config base.yaml "
                 "--config %s\n",
                 output_path.c_str(), output_path.c_str());
  }
  return OkStatus();
}

void AddBenchAioCommand(CLI::App& parent) {
  auto options = std::make_shared<bench::AioBenchOptions>();
  auto output = std::make_shared<TuneOutput>();
  CLI::App* cmd = parent.add_subcommand(
      "aio",
      "NVMe I/O: io_uring engine vs pread/pwrite vs fio; --tune DIR writes the best `aio` "
      "settings as a config layer");
  bench::AddAioBenchOptions(*cmd, *options);
  cmd->add_option("--output", output->path,
                  "With --tune: write the YAML config layer here (e.g. aio_tuned.yaml, then "
                  "sluice train --config base.yaml --config aio_tuned.yaml)");
  cmd->callback([options, output] {
    if (options->tune_dir.empty()) {
      ExitOnError(bench::RunAioBenchCommand(*options));
      return;
    }
    // --out is the benchmark library's older spelling of --output.
    ExitOnError(RunTune(*options, output->path.empty() ? options->tune_out : output->path));
  });
}

SLUICE_REGISTER_COMMAND("bench", AddBenchAioCommand);

}  // namespace
}  // namespace sluice::cli
