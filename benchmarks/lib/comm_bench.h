// The collectives benchmark, shared by benchmarks/bench_comm and `sluice bench comm`, in the
// manner of nccl-tests: all_reduce, all_gather, reduce_scatter and broadcast over the job's ranks
// (run it under mpirun or `sluice launch`), through the MPI backend and, where every rank has a
// CUDA GPU, NCCL (otherwise NCCL is skipped with the reason).
//
// Sizes go from -b to -e bytes, multiplied by -f each time (nccl-tests' flags). For every size
// and collective: one checked run (#wrong: the elements that differ from the exact expected
// result, summed over the ranks; the inputs are small integers so that sums are exact in every
// dtype up to 85 ranks), then -w untimed and -n timed iterations. The columns are nccl-tests':
//   size   bytes of the whole buffer (all_gather: the gathered result, reduce_scatter: the input)
//   count  its elements; type, redop (all_reduce, reduce_scatter), root (broadcast)
//   time   microseconds per operation, the mean over the timed iterations and over the ranks
//   algbw  size / time, GB/s (1e9 bytes)
//   busbw  algbw times nccl-tests' factor, comparable across rank counts with link speed:
//          all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast 1
// all_reduce and broadcast run in place (the Comm API has one buffer); all_gather and
// reduce_scatter out of place. Rank 0 prints the table and writes the --json record.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace CLI {
class App;
}

namespace sluice::bench {

struct CommBenchOptions {
  std::string min_bytes = "8";    // -b
  std::string max_bytes = "32M";  // -e
  int step_factor = 2;            // -f
  int iterations = 20;            // -n
  int warmup = 5;                 // -w
  bool check = true;              // -c 0 skips the data check (#wrong is then -1)
  std::string dtype = "float";    // -d: float, bfloat16, half (and Sluice's f32, bf16, f16)
  std::string op = "sum";         // -o: sum, avg
  int root = 0;                   // -r
  std::vector<std::string> collectives = {"all_reduce", "all_gather", "reduce_scatter",
                                          "broadcast"};
  std::vector<std::string> backends = {"mpi", "nccl"};
  std::string json_path;  // "-" for stdout
};

// Adds -b, -e, -f, -n, -w, -c, -d, -o, -r, --collectives, --backends and --json.
void AddCommBenchOptions(CLI::App& app, CommBenchOptions& options);

// nccl-tests' bus bandwidth factor of `collective` on `ranks` ranks.
double BusBandwidthFactor(const std::string& collective, int ranks);

struct CommBenchRow {
  std::string backend;
  std::string collective;
  uint64_t bytes = 0;
  uint64_t count = 0;
  std::string type;
  std::string redop;  // "" where the collective has none
  int root = -1;      // broadcast only
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  int64_t wrong = 0;  // -1: not checked
};

struct CommBenchReport {
  nlohmann::json machine;
  nlohmann::json settings;
  int ranks = 1;
  int rank = 0;  // this process's; the figures are the same on every rank
  std::vector<CommBenchRow> rows;
  nlohmann::json skipped = nlohmann::json::array();  // [{"backend", "reason"}]
};

// Collective over the MPI world (one rank without mpirun).
Result<CommBenchReport> RunCommBench(const CommBenchOptions& options);

std::string FormatCommBenchTable(const CommBenchReport& report);
nlohmann::json CommBenchJson(const CommBenchReport& report);

// Runs, and on rank 0 prints and writes --json. DataLoss (on every rank) when a check found
// wrong elements.
Status RunCommBenchCommand(const CommBenchOptions& options);

}  // namespace sluice::bench
