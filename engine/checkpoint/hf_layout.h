// How Sluice's parameters map onto Hugging Face checkpoints. Names are already Hugging Face's
// (engine/model/parameter_registry.h). Layouts differ in one place: Sluice stores every linear
// weight as [out, in] (nn.Linear), while Hugging Face's GPT-2 uses Conv1D, whose weight is
// [in, out]; attn.c_attn, attn.c_proj, mlp.c_fc and mlp.c_proj weights are transposed on the way
// out and back. Llama needs no permutation: Sluice's RoPE uses Hugging Face's rotate_half
// convention.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tensor.h"

namespace sluice::checkpoint {

// True for GPT-2's Conv1D weights, with or without the "transformer." prefix.
bool IsHfConv1DWeight(std::string_view name);
// The shape Hugging Face stores parameter `name` of Sluice shape `shape` with.
std::vector<int64_t> HfShape(std::string_view name, const Shape& shape);
// The names a Hugging Face file may hold parameter `name` under: itself, then without the base
// model's prefix ("transformer.", "model.") as files saved from the base model have it.
std::vector<std::string> HfNameCandidates(std::string_view name);
// Tensors Hugging Face files carry that are not parameters: GPT-2's attention-mask buffers
// (attn.bias, attn.masked_bias) and rotary inv_freq. Loading skips them.
bool IsHfNonParameterBuffer(std::string_view name);

// Row-major [rows, cols] -> [cols, rows].
template <typename T>
void Transpose2D(const T* src, int64_t rows, int64_t cols, T* dst) {
  constexpr int64_t kTile = 32;  // cache-friendly for both the reads and the writes
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      for (int64_t r = r0; r < r0 + kTile && r < rows; ++r) {
        for (int64_t c = c0; c < c0 + kTile && c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
      }
    }
  }
}

}  // namespace sluice::checkpoint
