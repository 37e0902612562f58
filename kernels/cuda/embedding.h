// CUDA backend of the token and learned position embeddings (GPT-2's wte and wpe; Llama uses only
// the token table). kernels/ref/ops_embedding.h is the spec: same shapes and semantics, with the
// table and activations in T (float or bf16) and the parameter gradients in fp32, accumulated
// (+=). Every launcher enqueues on `stream` and returns at once; see launch_status.h.
//
// Token ids live on the device, so a launcher cannot check them before launching. The reference
// aborts on an id outside [0, vocab); here such an id is never used as an address: the kernel
// sets *invalid_token to 1 (never back to 0, so the caller zeroes it once and reads it after any
// number of launches) and treats the row as empty (forward: a row of zeros; backward: no
// contribution). invalid_token is a device pointer and may be null, which drops the report.
// Callers that hold the ids on the host should still check them with
// kernels::FirstInvalidToken and return a Status, as the CPU backend's callers do.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/launch_status.h"
#include "kernels/ref/ops_embedding.h"

namespace sluice::kernels::cuda {

// tokens [num_tokens] int32, table [vocab, dim], out [num_tokens, dim]:
// out[i, :] = table[tokens[i], :] (a bitwise copy).
template <typename T>
LaunchStatus EmbeddingForward(const int32_t* tokens, const T* table, T* out, int64_t num_tokens,
                              int64_t vocab, int64_t dim, int32_t* invalid_token,
                              cudaStream_t stream);

// Bytes of workspace EmbeddingBackward needs: the first and last token of each id, 8 bytes per
// vocabulary entry plus alignment slack; 0 when num_tokens is 0. Its contents need not be
// initialised.
size_t EmbeddingBackwardWorkspaceBytes(int64_t num_tokens, int64_t vocab);

// dout [num_tokens, dim] in T, dtable [vocab, dim] fp32: dtable[tokens[i], :] += dout[i, :].
// Deterministic without float atomics: one single-block kernel finds each id's first and last
// token (integer atomicMin/atomicMax), then the block of each id's first token adds that id's
// rows in token order in fp32, starting from 0, and adds the sum to dtable. The result is bitwise
// the same run to run, and the host never waits for the device. num_tokens <= INT32_MAX.
template <typename T>
LaunchStatus EmbeddingBackward(const int32_t* tokens, const T* dout, float* dtable,
                               int64_t num_tokens, int64_t vocab, int64_t dim,
                               int32_t* invalid_token, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);

// wpe [positions, dim], x [batch, seq, dim], seq <= positions: x[b, t, :] += wpe[t, :], added in
// fp32 and rounded once to T.
template <typename T>
LaunchStatus PositionEmbeddingForward(const T* wpe, T* x, int64_t batch, int64_t seq,
                                      int64_t positions, int64_t dim, cudaStream_t stream);

// dx [batch, seq, dim] in T, dwpe [positions, dim] fp32: dwpe[t, :] += sum over b of dx[b, t, :],
// summed in fp32 in batch order (b = 0, 1, ...), then added.
template <typename T>
LaunchStatus PositionEmbeddingBackward(const T* dx, float* dwpe, int64_t batch, int64_t seq,
                                       int64_t positions, int64_t dim, cudaStream_t stream);

}  // namespace sluice::kernels::cuda
