#include "engine/model/cross_entropy.h"

#include "engine/model/ops_backend.h"

namespace sluice::model {

// Saved, in order: lse [rows], logits (a view).
template <typename T>
Result<T> CrossEntropyLoss<T>::Forward(ForwardContext<T>& ctx, Act<T> logits,
                                       const int32_t* targets) {
  SLUICE_ASSIGN_OR_RETURN(T * lse, ctx.AllocateSaved(id_, logits.rows));
  ctx.KeepSaved(id_, logits.data);
  SLUICE_CHECK_EQ(logits.cols, vocab_);
  return Ops<T>::CrossEntropyForward(logits.data, targets, lse, logits.rows, logits.cols,
                                     ctx.num_threads());
}

template <typename T>
Result<Act<T>> CrossEntropyLoss<T>::Backward(ForwardContext<T>& ctx, const int32_t* targets,
                                             T dloss) {
  const auto saved = ctx.Saved(id_);
  T* logits = saved[1];
  const int64_t rows = ctx.rows();
  Ops<T>::CrossEntropyBackward(logits, targets, saved[0], dloss, logits, rows, vocab_,
                               ctx.num_threads());
  ctx.ReleaseSaved(id_);
  return Act<T>{logits, rows, vocab_};
}

template class CrossEntropyLoss<float>;
template class CrossEntropyLoss<double>;

}  // namespace sluice::model
