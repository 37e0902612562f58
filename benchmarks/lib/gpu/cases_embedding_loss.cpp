// The token embedding (kernels/cuda/embedding.h) and the softmax cross-entropy over the
// vocabulary (kernels/cuda/cross_entropy.h), forward and backward, in GB/s of the bytes they
// must move against the same-run copy bandwidth.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <unordered_set>
#include <vector>

#include "benchmarks/lib/gpu/cases.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/embedding.h"

namespace sluice::bench::gpu {
namespace {

namespace kc = kernels::cuda;
using bf16 = __nv_bfloat16;

// Token ids uniform over the vocabulary from a fixed-seed generator (splitmix64), the same on
// every run, so that the distinct-row count of the embedding's byte formula is too.
std::vector<int32_t> Tokens(int64_t count, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> tokens(count);
  uint64_t state = seed;
  for (int32_t& t : tokens) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    t = static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
  }
  return tokens;
}

int64_t Distinct(const std::vector<int32_t>& tokens) {
  return static_cast<int64_t>(std::unordered_set<int32_t>(tokens.begin(), tokens.end()).size());
}

BenchCase EmbeddingForward(const LlamaShape& model) {
  const int64_t m = model.tokens(), vocab = model.vocab, dim = model.hidden;
  BenchCase c;
  c.op = "embedding.fwd";
  c.model = model.name;
  c.shape = fmt::format("M={} V={} C={}", m, vocab, dim);
  c.dtype = "bf16";
  c.work = Work::kBytes;
  c.amount = 4.0 * m + 4.0 * m * dim;
  c.formula = "4M ids + 2MC rows read + 2MC out";
  c.target = kMemoryTarget;
  c.footprint_bytes = 2.0 * vocab * dim + c.amount;
  c.build = [m, vocab, dim](CaseRun& run, int instances) -> Status {
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(int32_t * tokens, run.Indices(Tokens(m, vocab, 1000 + i)));
      SLUICE_ASSIGN_OR_RETURN(bf16 * table,
                              run.Input<bf16>(DType::kBf16, vocab * dim, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(bf16 * out, run.Output<bf16>(DType::kBf16, m * dim, NAN));
      SLUICE_ASSIGN_OR_RETURN(int32_t * invalid, run.ErrorFlag());
      run.AddLaunch([=](cudaStream_t s) {
        return kc::EmbeddingForward<bf16>(tokens, table, out, m, vocab, dim, invalid, s);
      });
    }
    return OkStatus();
  };
  return c;
}

BenchCase EmbeddingBackward(const LlamaShape& model) {
  const int64_t m = model.tokens(), vocab = model.vocab, dim = model.hidden;
  // Every instance's ids come from seed 2000 + i; the count of distinct ids is nearly the same
  // for each, and instance 0's stands for all.
  const int64_t distinct = Distinct(Tokens(m, vocab, 2000));
  BenchCase c;
  c.op = "embedding.bwd";
  c.model = model.name;
  c.shape = fmt::format("M={} V={} C={} U={}", m, vocab, dim, distinct);
  c.dtype = "bf16, dtable fp32";
  c.work = Work::kBytes;
  c.amount = 4.0 * m + 2.0 * m * dim + 8.0 * distinct * dim;
  c.formula = "4M ids + 2MC dout + 8UC dtable rows read+written (U distinct ids)";
  c.target = kMemoryTarget;
  c.footprint_bytes = 4.0 * vocab * dim + 4.0 * m + 2.0 * m * dim;
  c.build = [m, vocab, dim](CaseRun& run, int instances) -> Status {
    const size_t ws_bytes = kc::EmbeddingBackwardWorkspaceBytes(m, vocab);
    SLUICE_ASSIGN_OR_RETURN(void* ws, run.Scratch(ws_bytes));
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(int32_t * tokens, run.Indices(Tokens(m, vocab, 2000 + i)));
      SLUICE_ASSIGN_OR_RETURN(bf16 * dout, run.Input<bf16>(DType::kBf16, m * dim, -1.0f, 1.0f));
      SLUICE_ASSIGN_OR_RETURN(float* dtable, run.Output<float>(DType::kF32, vocab * dim, 0.0f));
      SLUICE_ASSIGN_OR_RETURN(int32_t * invalid, run.ErrorFlag());
      run.AddLaunch([=](cudaStream_t s) {
        return kc::EmbeddingBackward<bf16>(tokens, dout, dtable, m, vocab, dim, invalid, ws,
                                           ws_bytes, s);
      });
    }
    return OkStatus();
  };
  return c;
}

BenchCase CrossEntropy(const LlamaShape& model, bool backward) {
  const int64_t m = model.tokens(), vocab = model.vocab;
  const double logits_bytes = 2.0 * m * vocab;
  BenchCase c;
  c.op = backward ? "cross_entropy.bwd" : "cross_entropy.fwd";
  c.model = model.name;
  c.shape = fmt::format("M={} V={}", m, vocab);
  c.dtype = "bf16, lse fp32";
  c.work = Work::kBytes;
  if (backward) {
    c.amount = 2 * logits_bytes + 8.0 * m;
    c.formula = "2MV logits + 2MV dlogits + 4M targets + 4M lse";
  } else {
    c.amount = logits_bytes + 8.0 * m;
    c.formula = "2MV logits + 4M targets + 4M lse";
  }
  c.target = kMemoryTarget;
  c.footprint_bytes = c.amount;
  c.build = [m, vocab, backward](CaseRun& run, int instances) -> Status {
    const size_t ws_bytes = kc::CrossEntropyBackwardWorkspaceBytes(m);
    void* ws = nullptr;
    if (backward) {
      SLUICE_ASSIGN_OR_RETURN(ws, run.Scratch(ws_bytes));
    }
    for (int i = 0; i < instances; ++i) {
      SLUICE_ASSIGN_OR_RETURN(int32_t * targets, run.Indices(Tokens(m, vocab, 3000 + i)));
      SLUICE_ASSIGN_OR_RETURN(bf16 * logits, run.Input<bf16>(DType::kBf16, m * vocab, -4.0f, 4.0f));
      SLUICE_ASSIGN_OR_RETURN(int32_t * invalid, run.ErrorFlag());
      if (!backward) {
        SLUICE_ASSIGN_OR_RETURN(float* lse, run.Output<float>(DType::kF32, m, NAN));
        SLUICE_ASSIGN_OR_RETURN(float* loss, run.Output<float>(DType::kF32, 1, NAN));
        run.AddLaunch([=](cudaStream_t s) {
          return kc::CrossEntropyForward<bf16>(logits, targets, lse, m, vocab, loss, invalid, s);
        });
        continue;
      }
      // The backward's lse from a real forward, enqueued now.
      SLUICE_ASSIGN_OR_RETURN(void* lse_bytes, run.Scratch(m * sizeof(float)));
      SLUICE_ASSIGN_OR_RETURN(void* loss_bytes, run.Scratch(sizeof(float)));
      float* lse = static_cast<float*>(lse_bytes);
      SLUICE_RETURN_IF_ERROR(FromLaunch(
          kc::CrossEntropyForward<bf16>(logits, targets, lse, m, vocab,
                                        static_cast<float*>(loss_bytes), invalid, run.stream()),
          "CrossEntropyForward"));
      // Into its own buffer rather than over the logits, so that every sample reads the same
      // logits; the bytes moved are the same either way.
      SLUICE_ASSIGN_OR_RETURN(bf16 * dlogits, run.Output<bf16>(DType::kBf16, m * vocab, NAN));
      run.AddLaunch([=](cudaStream_t s) {
        return kc::CrossEntropyBackward<bf16>(logits, targets, lse, 1.0f, dlogits, m, vocab,
                                              invalid, ws, ws_bytes, s);
      });
    }
    return OkStatus();
  };
  return c;
}

}  // namespace

std::vector<BenchCase> EmbeddingLossCases(const LlamaShape& model) {
  return {EmbeddingForward(model), EmbeddingBackward(model), CrossEntropy(model, false),
          CrossEntropy(model, true)};
}

}  // namespace sluice::bench::gpu
