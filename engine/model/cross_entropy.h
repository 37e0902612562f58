// The loss: mean softmax cross-entropy of the LM head's logits against the targets, with
// kIgnoreIndex (-1) targets skipped. Not a Module (it takes targets and yields a scalar), but it
// keeps its state (the per-row log-sum-exp) in the ForwardContext the same way.
#pragma once

#include <cstdint>

#include "engine/model/module.h"

namespace sluice::model {

// A tensor-parallel plan may give the model a loss of its own instead (the vocabulary-parallel
// cross-entropy of engine/parallel/tensor_vocab.h), through the same two calls.
template <typename T>
class CrossEntropyLoss {
 public:
  CrossEntropyLoss(ModuleBuilder& builder, int64_t vocab)
      : id_(builder.NextModuleId()), vocab_(vocab) {}
  virtual ~CrossEntropyLoss() = default;

  int id() const { return id_; }
  int64_t vocab() const { return vocab_; }  // the logits' columns

  // logits [rows, vocab], targets [rows] (device int32, validated by the caller); writes the mean
  // loss into `loss` (one element of device memory). Keeps a view of the logits, which must stay
  // alive until Backward.
  virtual Status Forward(ForwardContext<T>& ctx, Act<T> logits, const int32_t* targets, T* loss);
  // d(dloss * mean loss)/d(logits), written OVER the logits (they are not needed afterwards, and
  // a [rows, vocab] buffer is the largest activation of a model); returns that buffer, which
  // stays owned by the logits' producer.
  virtual Result<Act<T>> Backward(ForwardContext<T>& ctx, const int32_t* targets, double dloss);

 private:
  int id_;
  int64_t vocab_;
};

extern template class CrossEntropyLoss<float>;
extern template class CrossEntropyLoss<double>;

}  // namespace sluice::model
