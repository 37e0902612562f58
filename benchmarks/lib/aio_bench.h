// The NVMe I/O benchmark, shared by benchmarks/bench_aio and `sluice bench aio`.
//
// In one process run, on the same files and pinned buffers:
//  - the engine sweep: read and write throughput for every block size x queue depth x transfer
//    size (each transfer is one request, submitted and waited for, covering the whole file per
//    pass; the median of --iterations passes after --warmup untimed ones);
//  - the baseline: synchronous pread/pwrite of the same transfers, same buffer, O_DIRECT;
//  - fio (`--direct=1 --ioengine=io_uring --bs=1M --iodepth=32`, read and write) on the same
//    filesystem, when fio is installed;
//  - the swap store with checksums on and off (their cost);
//  - a correctness check: the file is read back and compared with what was written.
// `--tune` runs a short sweep instead and writes the best `aio` settings as a config layer.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "offload/aio_options.h"
#include "runtime/status.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct AioBenchOptions {
  std::vector<std::string> dirs;  // one, or several to stripe over
  std::string size = "256M";      // file size; every pass moves all of it
  std::vector<std::string> block_sizes = {"128K", "1M", "8M"};
  std::vector<int> queue_depths = {1, 8, 32};
  std::vector<std::string> transfer_sizes = {"1M", "all"};  // "all": the file size
  int intra_op_parallelism = 1;
  int iterations = 3;
  int warmup = 1;
  std::string backend = "auto";
  std::string fio_size;  // default: --size
  bool fio = true;
  bool sync_baseline = true;
  bool checksums = true;
  std::string checksum_size = "256M";  // extent size for the checksum on/off figures
  bool keep_files = false;
  std::string json_path;  // "-" for stdout
  // Tuning mode.
  std::string tune_dir;
  std::string tune_output;  // where to write the config layer; empty: stdout only
};

// Adds the options above as flags (--dir, --size, --block-sizes, ..., --tune, --output, --json).
void AddAioBenchOptions(CLI::App& app, AioBenchOptions& options);

Result<uint64_t> ParseByteSize(std::string_view text);  // "4096", "64K", "1M", "2G"
std::string FormatBytes(uint64_t bytes);                // "64M", "1G", "12K", "1000"

struct AioFigure {
  double median = 0;  // GB/s, GB = 1e9 bytes
  double min = 0;
  double max = 0;
  std::vector<double> samples;
};

struct AioSweepRow {
  std::string op;  // "read" or "write"
  uint64_t block_size = 0;
  int queue_depth = 0;
  int intra_op_parallelism = 1;
  uint64_t transfer = 0;
  AioFigure gbps;
};

struct AioBenchReport {
  nlohmann::json machine;
  nlohmann::json settings;
  std::vector<AioSweepRow> sweep;
  std::vector<AioSweepRow> sync_baseline;  // block_size/queue_depth 0
  nlohmann::json fio;                      // {available, reason | read_gbps, write_gbps, ...}
  nlohmann::json checksum;  // on/off figures and ratios per configuration (an array), or null
  nlohmann::json correctness;
  nlohmann::json headline;  // best large-transfer figures vs fio and targets
};

Result<AioBenchReport> RunAioBench(const AioBenchOptions& options);
std::string FormatAioBenchTable(const AioBenchReport& report);
nlohmann::json AioBenchJson(const AioBenchReport& report);

struct AioTuneResult {
  offload::AioOptions best;
  double read_gbps = 0;
  double write_gbps = 0;
  std::vector<AioSweepRow> tried;
};

// A short sweep (block size x queue depth x intra-op parallelism) on `dir`; the best is the one
// with the highest read + write throughput.
Result<AioTuneResult> TuneAio(const std::string& dir, uint64_t file_bytes);

// Runs the benchmark, prints, writes --json. With tune_dir set it tunes instead: the best `aio`
// settings as a YAML config layer (engine/config/config_snippet.h), checked to load back, on
// stdout and in tune_output.
// Fails when the correctness check failed.
Status RunAioBenchCommand(const AioBenchOptions& options);

}  // namespace sluice::bench
