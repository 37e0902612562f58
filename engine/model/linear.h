// Linear layer y = x·Wᵀ + b with nn.Linear's weight layout [out, in] (Hugging Face's names
// "<prefix>.weight", "<prefix>.bias"), optionally without bias, optionally reading a weight
// registered elsewhere (the LM head tied to the token embedding). Its widths are those of the
// weight the registry gives it: a tensor-parallel plan's sharding rule may hand it a piece of
// the [out, in] it asked for (parameter_registry.h), and it computes with that piece.
//
// In a split backward (ForwardContext::defers_weight_grads, deferred_weight_grads.h) Backward
// computes dx = dy·W and the bias gradient only, and queues dW += dyᵀ·x for the micro-batch's
// backward-weight, which runs the same GEMM the fused backward would: the weight gradient is
// the same, bit for bit. A tied weight (the LM head read from the token embedding) is not
// deferred. A bias left out of the forward (OmitBiasInForward) still gets its gradient in B.
#pragma once

#include <memory>
#include <string>

#include "engine/model/module.h"

namespace sluice::model {

template <typename T>
class Linear final : public Module<T> {
 public:
  // Registers weight [out, in] (initialized by `weight_init`) and, with `bias`, bias [out]
  // (zeros).
  Linear(ModuleBuilder& builder, std::string name, int64_t in, int64_t out, bool bias,
         InitKind weight_init = InitKind::kNormal);
  // Registers "<name>.weight" as an alias of `weight_param` ([out, in]); no bias.
  static std::unique_ptr<Linear> Tied(ModuleBuilder& builder, std::string name, int weight_param);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

  // Leaves the bias out of the forward; the backward still accumulates its gradient (dy summed
  // over the rows). For outputs summed over ranks afterwards (a row-parallel projection), where
  // one rank adds the bias and the others must not. Build time.
  void OmitBiasInForward() { bias_in_forward_ = false; }

  // The deferred half of a split backward: dW += dyᵀ·x over `rows` rows, with x and dy as the
  // backward-input kept them.
  Status BackwardWeight(ForwardContext<T>& ctx, const T* x, const T* dy, int64_t rows) const;

  int weight_param() const { return weight_; }
  int bias_param() const { return bias_; }  // -1 without bias
  // This rank's widths (the weight's shape in the registry).
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }

 private:
  Linear(ModuleBuilder& builder, std::string name, int64_t in, int64_t out, int tied_weight);

  int64_t in_;
  int64_t out_;
  int weight_ = -1;
  int bias_ = -1;
  bool bias_in_forward_ = true;
  bool tied_ = false;  // reads a weight registered elsewhere
};

extern template class Linear<float>;
extern template class Linear<double>;

}  // namespace sluice::model
