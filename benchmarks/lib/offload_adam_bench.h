// The offloaded-optimizer benchmark (benchmarks/bench_offload_adam): OffloadedAdam with its state
// on NVMe over a shard of --elements, per step: wall time, NVMe read time, NVMe write time and
// Adam time, and issue 7's ratio wall / max(NVMe read + write, Adam) (target <= 1.2).
//
// In one process, on the same disk, interleaved round by round (alternating which goes first) so
// that other load hits both alike:
//  - pipelined: pipeline_read and pipeline_write on (read g+1 || Adam g || write g-1);
//  - serial, the same-run baseline: both off, so each tile is read, updated and written alone,
//    which also measures each phase in isolation.
// The ratio's denominator is the serial run's phase times (the NVMe and Adam work of one step
// measured without overlap); its numerator is the pipelined wall time. Figures are medians of
// --steps timed steps after --warmup untimed ones. Correctness: after the run both optimizers'
// master weights, moments and parameter shards are bit-identical, and the first --check-elements
// equal ShardedAdam over the same steps.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/status.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct OffloadAdamBenchOptions {
  std::string elements = "2^26";                 // shard size, "2^k" or a count
  std::string tile = "2^20";                     // tile (sub_group_size) in elements
  std::string dir = "/work/offload_adam_bench";  // swap directory (created; files removed after)
  int buffer_count = 4;
  int threads = 0;  // Adam threads; 0 = all cores
  std::string param_dtype = "bf16";
  std::string grad_dtype = "bf16";
  int steps = 7;
  int warmup = 2;
  std::string check_elements = "2^21";  // prefix checked against ShardedAdam
  uint64_t aio_block_size = 1ull << 20;
  int aio_queue_depth = 8;
  int aio_intra_op_parallelism = 1;
  bool register_ring = true;  // the staging ring as io_uring fixed buffers
  std::string json_path;      // "-" for stdout
};

void AddOffloadAdamBenchOptions(CLI::App& app, OffloadAdamBenchOptions& options);

struct OffloadAdamBenchReport {
  nlohmann::json machine;
  nlohmann::json settings;
  nlohmann::json results;  // per mode medians and samples, the ratio and the target
  nlohmann::json correctness;
};

Result<OffloadAdamBenchReport> RunOffloadAdamBench(const OffloadAdamBenchOptions& options);
std::string FormatOffloadAdamBenchTable(const OffloadAdamBenchReport& report);
nlohmann::json OffloadAdamBenchJson(const OffloadAdamBenchReport& report);

// Runs, prints the table, writes --json if asked. Fails when the correctness check failed.
Status RunOffloadAdamBenchCommand(const OffloadAdamBenchOptions& options);

}  // namespace sluice::bench
