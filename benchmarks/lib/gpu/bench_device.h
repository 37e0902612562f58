// Device-side helpers of the kernel benchmark (benchmarks/lib/gpu/bench_device.cu): inputs filled
// with pseudo-random values (zeros would time a faster data path than training sees), outputs
// poisoned and then checked for NaN and infinity, and the kernel that holds a stream while the
// host enqueues the launches to be timed. Plain C++ may include this header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace sluice::bench::gpu {

enum class DType { kF32, kBf16, kI32, kF64 };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // "fp32", "bf16", "int32", "fp64"

// data[i] = lo + (hi - lo) * u_i with u_i in [0, 1) a hash of (seed, i); bf16 rounds to nearest.
cudaError_t FillUniform(void* data, DType dtype, size_t count, float lo, float hi, uint64_t seed,
                        cudaStream_t stream);

// data[i] = value (NaN poisons an output that the op must overwrite). Not for kI32.
cudaError_t FillConstant(void* data, DType dtype, size_t count, float value, cudaStream_t stream);

// Adds the number of NaN or infinite elements of data to *device_count (an integer counter in
// device memory, so the sum is exact and the same in any order).
cudaError_t CountNonFinite(const void* data, DType dtype, size_t count,
                           unsigned long long* device_count, cudaStream_t stream);

// One thread that spins until *release (host memory mapped into the device) is non-zero, or
// until timeout_ns of device time have passed, when it sets *timed_out (device memory) to 1.
// Enqueued ahead of the timed launches it keeps the GPU from starting them, so that the time
// between the events is the kernels' and not the host's enqueueing.
cudaError_t LaunchBlockingKernel(const volatile int* release, int* timed_out, uint64_t timeout_ns,
                                 cudaStream_t stream);

}  // namespace sluice::bench::gpu
