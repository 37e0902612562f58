// The pipeline bubble benchmark (benchmarks/bench_pipeline, under mpirun -np P; issue 21's bubble
// check): real steps of the pipeline executor (engine/parallel/pipeline_executor.h) against the
// timeline simulator (schedule_timeline.h) fed with costs measured on the same machine, and both
// against the closed forms.
//
//   mpirun -np 2 bench_pipeline --json pipeline.json
//
// On P ranks (one stage each) with a GPT-2 decoder of --layers layers, untied head, one thread
// per rank (model.num_threads 1, the cpu device):
//
//   costs     each rank times its own chunks alone (both ranks at once, as in a step's steady
//             state): forward, backward, backward-input and backward-weight of one micro-batch,
//             medians over --cost-reps, for the chunks of v = 1 and of v = --chunks; and the p2p
//             latency, half the median round trip of one hidden state between ranks 0 and 1.
//   steps     for each schedule and each M, --warmup untimed steps, then --steps timed ones, the
//             cases taking turns step by step (other work on the machine falls on all alike). A
//             compute's start and end are stamped on its chunk's stream (host functions
//             enqueued by unit hooks before the compute's first unit and after its last), so a
//             stage's busy time is its compute as the stream ran it, and what the stream spent
//             waiting for a receive or for the other chunk is not busy. The step's makespan runs
//             from the first compute's start on any stage to the last one's end (the simulator's
//             makespan: no loads, reductions or optimizer step); bubble = idle / (P * makespan)
//             (measured_timeline.h).
//   simulated SimulateSchedule with the costs above (the mean over stages: the simulator takes
//             one cost per op), and again with the costs and transfer delay seen inside the
//             timed steps themselves (the op durations of the measured timelines, the median
//             exposed transfer delay): the second isolates the simulator's dependency model from
//             the costs changing under load.
//   theory    (P-1)/(M+P-1) for GPipe and 1F1B, (P-1)/(vM+P-1) interleaved, and for ZB-H1 a
//             bubble time of (P-1)(F+B-W) over M(F+B+W) of work, with the measured F, B
//             (backward-input) and W.
//
// Every figure is a median over the timed steps. The run fails when a step fails or a measured
// timeline does not match its schedule.
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

struct PipelineBenchOptions {
  int64_t layers = 8;
  int64_t d_model = 256;
  int64_t heads = 4;
  int64_t d_ff = 1024;
  int64_t vocab = 512;
  int64_t seq = 128;
  int64_t batch = 1;  // sequences per micro-batch
  std::vector<int> micro_batches = {4, 8};
  std::vector<std::string> schedules = {"gpipe", "1f1b", "interleaved", "zb-h1"};
  int chunks = 2;  // v of the interleaved schedule
  int steps = 9;
  int warmup = 2;
  int cost_reps = 9;
  int latency_reps = 100;
  std::string json_path;  // "-" for stdout
};

void AddPipelineBenchOptions(CLI::App& app, PipelineBenchOptions& options);

// Runs the benchmark (collective over the world); rank 0 prints the table and writes the record.
Status RunPipelineBenchCommand(const PipelineBenchOptions& options);

}  // namespace sluice::bench
