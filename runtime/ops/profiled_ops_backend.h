// Device time per op of the ops table, measured inside a run (run.profile_ops): a column of the
// table wrapped so that every op it enqueues is bracketed by two events on the op's stream.
// Collect() waits for the events recorded so far and adds each op's elapsed device time to its
// row. It answers, on any device, what a GPU profiler's kernel summary would: where a step's
// device time goes, op by op (on the cpu device, the host functions' time on the stream worker).
//
// The events cost two records per op (a few microseconds of launch time on a GPU), so profiled
// runs are slower; the numerics are the wrapped column's, bit for bit. Times of ops on
// different streams may overlap: their sum can exceed the wall time.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/ops/ops_backend.h"
#include "runtime/status.h"

namespace sluice::ops {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double total_ms = 0.0;
};

class ProfiledOpsBackend final : public OpsBackend {
 public:
  explicit ProfiledOpsBackend(std::unique_ptr<OpsBackend> inner);
  ~ProfiledOpsBackend() override;

  // Waits for every op recorded since the last Collect and adds their times to the rows (with
  // `count` false, leaves them out). The first failed stream's error ends it.
  Status Collect(bool count = true);
  // The rows so far, the largest total first.
  std::vector<OpTime> Times() const;

  std::string_view name() const override { return inner_->name(); }
  bool Supports(DType compute) const override { return inner_->Supports(compute); }
  bool SupportsVocabShards() const override { return inner_->SupportsVocabShards(); }
  Status SetMatmulPrecision(MatmulPrecision precision) override {
    return inner_->SetMatmulPrecision(precision);
  }
  void ReleaseScratch(Stream& stream) override { inner_->ReleaseScratch(stream); }

 protected:
  Status DoLinearForward(Stream& s, const LinearForwardArgs& a) override;
  Status DoLinearBackward(Stream& s, const LinearBackwardArgs& a) override;
  Status DoEmbeddingForward(Stream& s, const EmbeddingForwardArgs& a) override;
  Status DoEmbeddingBackward(Stream& s, const EmbeddingBackwardArgs& a) override;
  Status DoPositionEmbeddingForward(Stream& s, const PositionEmbeddingForwardArgs& a) override;
  Status DoPositionEmbeddingBackward(Stream& s, const PositionEmbeddingBackwardArgs& a) override;
  Status DoAttentionForward(Stream& s, const AttentionForwardArgs& a) override;
  Status DoAttentionBackward(Stream& s, const AttentionBackwardArgs& a) override;
  Status DoCrossEntropyForward(Stream& s, const CrossEntropyForwardArgs& a) override;
  Status DoCrossEntropyBackward(Stream& s, const CrossEntropyBackwardArgs& a) override;
  Status DoCrossEntropyShardForward(Stream& s, const CrossEntropyShardForwardArgs& a) override;
  Status DoCrossEntropyShardLoss(Stream& s, const CrossEntropyShardLossArgs& a) override;
  Status DoLayerNormForward(Stream& s, const LayerNormForwardArgs& a) override;
  Status DoLayerNormBackward(Stream& s, const LayerNormBackwardArgs& a) override;
  Status DoRmsNormForward(Stream& s, const RmsNormForwardArgs& a) override;
  Status DoRmsNormBackward(Stream& s, const RmsNormBackwardArgs& a) override;
  Status DoGeluForward(Stream& s, const GeluForwardArgs& a) override;
  Status DoGeluBackward(Stream& s, const GeluBackwardArgs& a) override;
  Status DoSwiGluForward(Stream& s, const SwiGluForwardArgs& a) override;
  Status DoSwiGluBackward(Stream& s, const SwiGluBackwardArgs& a) override;
  Status DoRopeForward(Stream& s, const RopeForwardArgs& a) override;
  Status DoRopeBackward(Stream& s, const RopeBackwardArgs& a) override;
  Status DoAdd(Stream& s, const Tensor& a, const Tensor& b, const Tensor& y) override;
  Status DoAccumulate(Stream& s, const Tensor& x, const Tensor& y) override;
  Status DoAdamStep(Stream& s, const AdamStepArgs& a) override;
  Status DoConvert(Stream& s, const Tensor& src, const Tensor& dst) override;
  Status DoSquaredSum(Stream& s, const Tensor& x, const Tensor& out) override;
  Status DoBlockSquaredSums(Stream& s, const Tensor& x, const BlockSumList& list,
                            const Tensor& out) override;
  Status DoFlagInfOrNan(Stream& s, const Tensor& x, int32_t* flag) override;
  Status DoFill(Stream& s, const Tensor& y, double value) override;
  Status DoScale(Stream& s, const Tensor& y, double factor) override;
  Status DoCopySegments(Stream& s, const Tensor& src, const Tensor& dst,
                        const CopySegmentList& segments) override;
  Status DoAccumulateSegments(Stream& s, const Tensor& src, const Tensor& dst,
                              const CopySegmentList& segments) override;

 private:
  // One op's two events, recorded around its launch, and its row.
  struct Bracket {
    size_t row = 0;
    std::unique_ptr<Event> start;
    std::unique_ptr<Event> end;
  };

  // Records `launch` between two events on `stream` as an op of row `op`.
  template <typename Launch>
  Status Timed(Stream& stream, std::string_view op, Launch&& launch);
  Result<Bracket> TakeBracket();

  std::unique_ptr<OpsBackend> inner_;
  mutable std::mutex mu_;  // ops come from several threads (the compute and comm streams')
  std::vector<OpTime> rows_;
  std::vector<Bracket> pending_;  // recorded, not collected yet
  std::vector<Bracket> spare_;    // collected: their events are reused
};

}  // namespace sluice::ops
