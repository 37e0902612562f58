#include "runtime/ops/profiled_ops_backend.h"

#include <algorithm>
#include <utility>

#include "runtime/check.h"

namespace sluice::ops {

ProfiledOpsBackend::ProfiledOpsBackend(std::unique_ptr<OpsBackend> inner)
    : OpsBackend(inner->device()), inner_(std::move(inner)) {}

// Pending events belong to work still queued: wait for it before they go.
ProfiledOpsBackend::~ProfiledOpsBackend() { (void)Collect(); }

Result<ProfiledOpsBackend::Bracket> ProfiledOpsBackend::TakeBracket() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!spare_.empty()) {
      Bracket bracket = std::move(spare_.back());
      spare_.pop_back();
      return bracket;
    }
  }
  Bracket bracket;
  SLUICE_ASSIGN_OR_RETURN(bracket.start, device().CreateEvent());
  SLUICE_ASSIGN_OR_RETURN(bracket.end, device().CreateEvent());
  return bracket;
}

template <typename Launch>
Status ProfiledOpsBackend::Timed(Stream& stream, std::string_view op, Launch&& launch) {
  SLUICE_ASSIGN_OR_RETURN(Bracket bracket, TakeBracket());
  SLUICE_RETURN_IF_ERROR(bracket.start->Record(stream));
  SLUICE_RETURN_IF_ERROR(launch());
  SLUICE_RETURN_IF_ERROR(bracket.end->Record(stream));
  std::lock_guard<std::mutex> lock(mu_);
  auto row = std::find_if(rows_.begin(), rows_.end(), [&](const OpTime& t) { return t.op == op; });
  if (row == rows_.end()) row = rows_.insert(rows_.end(), OpTime{std::string(op), 0, 0.0});
  bracket.row = static_cast<size_t>(row - rows_.begin());
  pending_.push_back(std::move(bracket));
  return OkStatus();
}

Status ProfiledOpsBackend::Collect(bool count) {
  std::vector<Bracket> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
  }
  Status status;
  std::vector<std::pair<size_t, double>> times;
  times.reserve(pending.size());
  for (Bracket& bracket : pending) {
    if (status.ok()) status = bracket.end->Synchronize();
    if (!status.ok()) continue;
    Result<float> ms = ElapsedMs(*bracket.start, *bracket.end);
    if (!ms.ok()) {
      status = ms.status();
      continue;
    }
    times.emplace_back(bracket.row, *ms);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!count) times.clear();
  for (const auto& [row, ms] : times) {
    rows_[row].calls += 1;
    rows_[row].total_ms += ms;
  }
  for (Bracket& bracket : pending) spare_.push_back(std::move(bracket));
  return status;
}

std::vector<OpTime> ProfiledOpsBackend::Times() const {
  std::vector<OpTime> rows;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rows = rows_;
  }
  std::erase_if(rows, [](const OpTime& t) { return t.calls == 0; });
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpTime& a, const OpTime& b) { return a.total_ms > b.total_ms; });
  return rows;
}

Status ProfiledOpsBackend::DoLinearForward(Stream& s, const LinearForwardArgs& a) {
  return Timed(s, "LinearForward", [&] { return inner_->LinearForward(s, a); });
}

Status ProfiledOpsBackend::DoLinearBackward(Stream& s, const LinearBackwardArgs& a) {
  return Timed(s, "LinearBackward", [&] { return inner_->LinearBackward(s, a); });
}

Status ProfiledOpsBackend::DoEmbeddingForward(Stream& s, const EmbeddingForwardArgs& a) {
  return Timed(s, "EmbeddingForward", [&] { return inner_->EmbeddingForward(s, a); });
}

Status ProfiledOpsBackend::DoEmbeddingBackward(Stream& s, const EmbeddingBackwardArgs& a) {
  return Timed(s, "EmbeddingBackward", [&] { return inner_->EmbeddingBackward(s, a); });
}

Status ProfiledOpsBackend::DoPositionEmbeddingForward(Stream& s,
                                                      const PositionEmbeddingForwardArgs& a) {
  return Timed(s, "PositionEmbeddingForward",
               [&] { return inner_->PositionEmbeddingForward(s, a); });
}

Status ProfiledOpsBackend::DoPositionEmbeddingBackward(Stream& s,
                                                       const PositionEmbeddingBackwardArgs& a) {
  return Timed(s, "PositionEmbeddingBackward",
               [&] { return inner_->PositionEmbeddingBackward(s, a); });
}

Status ProfiledOpsBackend::DoAttentionForward(Stream& s, const AttentionForwardArgs& a) {
  return Timed(s, "AttentionForward", [&] { return inner_->AttentionForward(s, a); });
}

Status ProfiledOpsBackend::DoAttentionBackward(Stream& s, const AttentionBackwardArgs& a) {
  return Timed(s, "AttentionBackward", [&] { return inner_->AttentionBackward(s, a); });
}

Status ProfiledOpsBackend::DoCrossEntropyForward(Stream& s, const CrossEntropyForwardArgs& a) {
  return Timed(s, "CrossEntropyForward", [&] { return inner_->CrossEntropyForward(s, a); });
}

Status ProfiledOpsBackend::DoCrossEntropyBackward(Stream& s, const CrossEntropyBackwardArgs& a) {
  return Timed(s, "CrossEntropyBackward", [&] { return inner_->CrossEntropyBackward(s, a); });
}

Status ProfiledOpsBackend::DoCrossEntropyShardForward(Stream& s,
                                                      const CrossEntropyShardForwardArgs& a) {
  return Timed(s, "CrossEntropyShardForward",
               [&] { return inner_->CrossEntropyShardForward(s, a); });
}

Status ProfiledOpsBackend::DoCrossEntropyShardLoss(Stream& s, const CrossEntropyShardLossArgs& a) {
  return Timed(s, "CrossEntropyShardLoss", [&] { return inner_->CrossEntropyShardLoss(s, a); });
}

Status ProfiledOpsBackend::DoLayerNormForward(Stream& s, const LayerNormForwardArgs& a) {
  return Timed(s, "LayerNormForward", [&] { return inner_->LayerNormForward(s, a); });
}

Status ProfiledOpsBackend::DoLayerNormBackward(Stream& s, const LayerNormBackwardArgs& a) {
  return Timed(s, "LayerNormBackward", [&] { return inner_->LayerNormBackward(s, a); });
}

Status ProfiledOpsBackend::DoRmsNormForward(Stream& s, const RmsNormForwardArgs& a) {
  return Timed(s, "RmsNormForward", [&] { return inner_->RmsNormForward(s, a); });
}

Status ProfiledOpsBackend::DoRmsNormBackward(Stream& s, const RmsNormBackwardArgs& a) {
  return Timed(s, "RmsNormBackward", [&] { return inner_->RmsNormBackward(s, a); });
}

Status ProfiledOpsBackend::DoGeluForward(Stream& s, const GeluForwardArgs& a) {
  return Timed(s, "GeluForward", [&] { return inner_->GeluForward(s, a); });
}

Status ProfiledOpsBackend::DoGeluBackward(Stream& s, const GeluBackwardArgs& a) {
  return Timed(s, "GeluBackward", [&] { return inner_->GeluBackward(s, a); });
}

Status ProfiledOpsBackend::DoSwiGluForward(Stream& s, const SwiGluForwardArgs& a) {
  return Timed(s, "SwiGluForward", [&] { return inner_->SwiGluForward(s, a); });
}

Status ProfiledOpsBackend::DoSwiGluBackward(Stream& s, const SwiGluBackwardArgs& a) {
  return Timed(s, "SwiGluBackward", [&] { return inner_->SwiGluBackward(s, a); });
}

Status ProfiledOpsBackend::DoRopeForward(Stream& s, const RopeForwardArgs& a) {
  return Timed(s, "RopeForward", [&] { return inner_->RopeForward(s, a); });
}

Status ProfiledOpsBackend::DoRopeBackward(Stream& s, const RopeBackwardArgs& a) {
  return Timed(s, "RopeBackward", [&] { return inner_->RopeBackward(s, a); });
}

Status ProfiledOpsBackend::DoAdd(Stream& s, const Tensor& a, const Tensor& b, const Tensor& y) {
  return Timed(s, "Add", [&] { return inner_->Add(s, a, b, y); });
}

Status ProfiledOpsBackend::DoAccumulate(Stream& s, const Tensor& x, const Tensor& y) {
  return Timed(s, "Accumulate", [&] { return inner_->Accumulate(s, x, y); });
}

Status ProfiledOpsBackend::DoAdamStep(Stream& s, const AdamStepArgs& a) {
  return Timed(s, "AdamStep", [&] { return inner_->AdamStep(s, a); });
}

Status ProfiledOpsBackend::DoConvert(Stream& s, const Tensor& src, const Tensor& dst) {
  return Timed(s, "Convert", [&] { return inner_->Convert(s, src, dst); });
}

Status ProfiledOpsBackend::DoSquaredSum(Stream& s, const Tensor& x, const Tensor& out) {
  return Timed(s, "SquaredSum", [&] { return inner_->SquaredSum(s, x, out); });
}

Status ProfiledOpsBackend::DoBlockSquaredSums(Stream& s, const Tensor& x, const BlockSumList& list,
                                              const Tensor& out) {
  return Timed(s, "BlockSquaredSums", [&] { return inner_->BlockSquaredSums(s, x, list, out); });
}

Status ProfiledOpsBackend::DoFlagInfOrNan(Stream& s, const Tensor& x, int32_t* flag) {
  return Timed(s, "FlagInfOrNan", [&] { return inner_->FlagInfOrNan(s, x, flag); });
}

Status ProfiledOpsBackend::DoFill(Stream& s, const Tensor& y, double value) {
  return Timed(s, "Fill", [&] { return inner_->Fill(s, y, value); });
}

Status ProfiledOpsBackend::DoScale(Stream& s, const Tensor& y, double factor) {
  return Timed(s, "Scale", [&] { return inner_->Scale(s, y, factor); });
}

Status ProfiledOpsBackend::DoCopySegments(Stream& s, const Tensor& src, const Tensor& dst,
                                          const CopySegmentList& segments) {
  return Timed(s, "CopySegments", [&] { return inner_->CopySegments(s, src, dst, segments); });
}

Status ProfiledOpsBackend::DoAccumulateSegments(Stream& s, const Tensor& src, const Tensor& dst,
                                                const CopySegmentList& segments) {
  return Timed(s, "AccumulateSegments",
               [&] { return inner_->AccumulateSegments(s, src, dst, segments); });
}

}  // namespace sluice::ops
