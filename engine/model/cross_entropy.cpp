#include "engine/model/cross_entropy.h"

namespace sluice::model {

// Saved, in order: lse [rows], logits (a view).
template <typename T>
Status CrossEntropyLoss<T>::Forward(ForwardContext<T>& ctx, Act<T> logits, const int32_t* targets,
                                    T* loss) {
  SLUICE_CHECK_EQ(logits.cols, vocab_);
  SLUICE_ASSIGN_OR_RETURN(T * lse, ctx.AllocateSaved(id_, logits.rows));
  ctx.KeepSaved(id_, logits.data);
  return ctx.ops().CrossEntropyForward(ctx.stream(), {.logits = ctx.View(logits),
                                                      .targets = {targets, logits.rows},
                                                      .lse = ctx.View(lse, {logits.rows}),
                                                      .loss = ctx.View(loss, {1})});
}

template <typename T>
Result<Act<T>> CrossEntropyLoss<T>::Backward(ForwardContext<T>& ctx, const int32_t* targets,
                                             double dloss) {
  const auto saved = ctx.Saved(id_);
  const Act<T> logits{saved[1], ctx.rows(), vocab_};
  SLUICE_RETURN_IF_ERROR(
      ctx.ops().CrossEntropyBackward(ctx.stream(), {.logits = ctx.View(logits),
                                                    .targets = {targets, logits.rows},
                                                    .lse = ctx.View(saved[0], {logits.rows}),
                                                    .dloss = dloss,
                                                    .dlogits = ctx.View(logits)}));
  ctx.ReleaseSaved(id_);
  return logits;
}

template class CrossEntropyLoss<float>;
template class CrossEntropyLoss<double>;

}  // namespace sluice::model
