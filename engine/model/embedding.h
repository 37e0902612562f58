// Embeddings: the token table (GPT-2 "transformer.wte", Llama "model.embed_tokens"), GPT-2's
// learned positions ("transformer.wpe"), and the unit that combines them. Their input is the
// token ids of the ForwardContext, not an activation; their Backward returns an empty Act.
#pragma once

#include <memory>
#include <string>

#include "engine/model/module.h"

namespace sluice::model {

// y[r, :] = weight[tokens[r], :]; weight [vocab, dim], normal init.
template <typename T>
class TokenEmbedding final : public Module<T> {
 public:
  TokenEmbedding(ModuleBuilder& builder, std::string name, int64_t vocab, int64_t dim);

  // Ignores x: reads ctx.tokens() (validated by the caller).
  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

  int weight_param() const { return weight_; }

 private:
  int64_t vocab_;
  int64_t dim_;
  int weight_;
};

// y[b, t, :] = x[b, t, :] + weight[t, :]; weight [positions, dim], normal init; needs
// ctx.seq() <= positions.
template <typename T>
class PositionEmbedding final : public Module<T> {
 public:
  PositionEmbedding(ModuleBuilder& builder, std::string name, int64_t positions, int64_t dim);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

 private:
  int64_t positions_;
  int64_t dim_;
  int weight_;
};

// The embeddings unit: token embedding, then (GPT-2) learned positions.
template <typename T>
class Embeddings final : public Module<T> {
 public:
  // positions == 0: no position table (Llama, whose positions come from RoPE).
  Embeddings(ModuleBuilder& builder, std::string name, std::string token_name,
             std::string position_name, int64_t vocab, int64_t positions, int64_t dim);

  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

  int token_weight_param() const { return tokens_->weight_param(); }

 private:
  std::unique_ptr<TokenEmbedding<T>> tokens_;
  std::unique_ptr<PositionEmbedding<T>> positions_;
};

extern template class TokenEmbedding<float>;
extern template class TokenEmbedding<double>;
extern template class PositionEmbedding<float>;
extern template class PositionEmbedding<double>;
extern template class Embeddings<float>;
extern template class Embeddings<double>;

}  // namespace sluice::model
