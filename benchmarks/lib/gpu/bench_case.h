// The pieces of `sluice bench kernels` (benchmarks/lib/gpu/kernels_bench.h): one benchmark case
// (an op at one shape), the device buffers and launches it owns while it is measured, its
// correctness check, and the timer.
//
// Timing. A case's buffers are allocated `instances` times over, so that the launches of one
// timed sample rotate through more memory than the L2 cache holds (a memory-bound op at a 1B
// model's shapes moves less than the H100's 50 MB of L2, and timing it on the same buffers would
// time the cache). One sample is: a blocking kernel that holds the stream, a start event, one
// launch per instance, a stop event, then the host releases the blocking kernel; so the events
// bracket the GPU's work only, not the host's enqueueing. A sample's time is the elapsed time
// over the number of launches; the reported time is the median over the samples, after untimed
// warm-up samples (library initialisation, plan building, clocks ramping up).
//
// Check. Before timing, every output is filled with a poison (NaN where the op overwrites it, 0
// where it accumulates into it), every instance runs once, and the outputs must hold no NaN or
// infinity: an op that leaves part of its output unwritten, or produces non-finite values from
// finite inputs, fails its check.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/lib/gpu/bench_device.h"
#include "kernels/cuda/launch_status.h"
#include "runtime/status.h"

namespace sluice::bench::gpu {

// LaunchStatus (kernels/cuda/launch_status.h) as a Status naming the op.
Status FromLaunch(const kernels::cuda::LaunchStatus& status, const std::string& op);

// One cudaMalloc'd array, freed by the destructor.
class DeviceBuffer {
 public:
  static Result<DeviceBuffer> Allocate(size_t bytes, const std::string& what);
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* get() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

using Launch = std::function<kernels::cuda::LaunchStatus(cudaStream_t)>;

// The buffers and launches of one case, alive while it is checked and timed. Every allocation
// is filled on `stream`, so that launches enqueued later on the same stream see the values.
class CaseRun {
 public:
  CaseRun(cudaStream_t stream, uint64_t seed) : stream_(stream), seed_(seed) {}

  cudaStream_t stream() const { return stream_; }

  // count values uniform in [lo, hi).
  Result<void*> Input(DType dtype, size_t count, float lo, float hi);
  template <typename T>
  Result<T*> Input(DType dtype, size_t count, float lo, float hi) {
    SLUICE_ASSIGN_OR_RETURN(void* p, Input(dtype, count, lo, hi));
    return static_cast<T*>(p);
  }

  // A device copy of host data (token ids, targets, segment tables).
  Result<void*> Upload(const void* data, size_t bytes);
  Result<int32_t*> Indices(const std::vector<int32_t>& values) {
    SLUICE_ASSIGN_OR_RETURN(void* p, Upload(values.data(), values.size() * sizeof(int32_t)));
    return static_cast<int32_t*>(p);
  }

  // An array the op writes: `poison` before the checked run (NaN for what the op overwrites, 0
  // for what it accumulates into), then checked to be finite.
  Result<void*> Output(DType dtype, size_t count, float poison);
  template <typename T>
  Result<T*> Output(DType dtype, size_t count, float poison) {
    SLUICE_ASSIGN_OR_RETURN(void* p, Output(dtype, count, poison));
    return static_cast<T*>(p);
  }

  // An array the op reads and updates in place (Adam's parameters and moments): values in
  // [lo, hi), checked to be finite after the checked run.
  Result<void*> InOut(DType dtype, size_t count, float lo, float hi);
  template <typename T>
  Result<T*> InOut(DType dtype, size_t count, float lo, float hi) {
    SLUICE_ASSIGN_OR_RETURN(void* p, InOut(dtype, count, lo, hi));
    return static_cast<T*>(p);
  }

  // An int32 flag the op raises on bad input (embedding's invalid_token): zeroed, and the check
  // fails if it is non-zero after the checked run.
  Result<int32_t*> ErrorFlag();

  // Zeroed scratch for the op's workspace; not checked.
  Result<void*> Scratch(size_t bytes);

  // One launch per instance; each sample runs them all, in order.
  void AddLaunch(Launch launch) { launches_.push_back(std::move(launch)); }

  // Keeps state the launches use (a GemmContext, a library handle) alive until the run ends.
  void Keep(std::shared_ptr<void> state) { kept_.push_back(std::move(state)); }

  const std::vector<Launch>& launches() const { return launches_; }
  size_t allocated_bytes() const { return allocated_bytes_; }

  struct CheckResult {
    size_t checked_elements = 0;
    size_t non_finite = 0;
    int raised_flags = 0;
    bool passed() const { return non_finite == 0 && raised_flags == 0; }
  };
  // Poisons the outputs, runs every launch once, synchronizes and counts non-finite values.
  Result<CheckResult> RunChecked(const std::string& op);

 private:
  struct Checked {
    void* data;
    DType dtype;
    size_t count;
    float poison;
    bool poisoned;  // false for in-place arrays, which keep their values
  };
  Result<void*> Allocate(size_t bytes, const char* what);

  cudaStream_t stream_;
  uint64_t seed_;
  size_t allocated_bytes_ = 0;
  std::vector<DeviceBuffer> buffers_;
  std::vector<Checked> checked_;
  std::vector<int32_t*> flags_;
  std::vector<Launch> launches_;
  std::vector<std::shared_ptr<void>> kept_;
};

// What an op's rate counts: floating-point operations (compute-bound ops) or bytes that must
// cross DRAM (memory-bound ops).
enum class Work { kFlops, kBytes };

struct BenchCase {
  std::string op;     // "linear.qkv.fwd"
  std::string model;  // "1b", "7b", or "flat" for the ops sized independently of a model
  std::string shape;  // "M=4096 K=2048 N=3072"
  std::string dtype;  // "bf16", "bf16->fp32"
  Work work = Work::kBytes;
  double amount = 0;           // FLOPs or bytes of one launch
  std::string formula;         // how amount is counted
  double target = 0;           // fraction of the same-run roofline; 0: none
  double footprint_bytes = 0;  // device bytes of one instance (the rotation count uses it)
  // Allocates `instances` independent copies of the op's buffers into run, with one launch each.
  std::function<Status(CaseRun& run, int instances)> build;
};

// Holds the stream for the timed launches (see the top of this file).
class SampleTimer {
 public:
  static Result<std::unique_ptr<SampleTimer>> Create(cudaStream_t stream);
  SampleTimer(const SampleTimer&) = delete;
  SampleTimer& operator=(const SampleTimer&) = delete;
  ~SampleTimer();

  struct Timing {
    double median_seconds = 0;            // per launch
    std::vector<double> samples_seconds;  // per launch, one per sample
    int launches_per_sample = 0;
    // The blocking kernel timed out (a launcher waited on the device): the samples were taken
    // again without it, and may include the host's enqueueing.
    bool unblocked = false;
  };
  // `warmup` untimed samples, then `repeats` timed ones.
  Result<Timing> Time(const std::vector<Launch>& launches, int warmup, int repeats,
                      const std::string& op);

 private:
  SampleTimer() = default;
  Status RunLaunches(const std::vector<Launch>& launches, const std::string& op);
  // One sample's elapsed seconds; *timed_out reports whether the blocking kernel timed out.
  Result<double> Sample(const std::vector<Launch>& launches, bool block, const std::string& op,
                        bool* timed_out);

  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  // Host memory mapped into the device: [0] the release flag the host raises, [1] the flag the
  // blocking kernel raises when it times out. device_flags_ is the device's address of it.
  volatile int* release_ = nullptr;
  int* device_flags_ = nullptr;
};

}  // namespace sluice::bench::gpu
