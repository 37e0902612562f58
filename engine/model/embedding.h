// Embeddings: the token table (GPT-2 "transformer.wte", Llama "model.embed_tokens"), GPT-2's
// learned positions ("transformer.wpe"), and the unit that combines them. Their input is the
// token ids of the ForwardContext, not an activation; their Backward returns an empty Act.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/model/module.h"
#include "runtime/ops/ops_backend.h"

namespace sluice::model {

// y[r, :] = weight[tokens[r], :]; weight [vocab, dim], normal init. The table is the one the
// registry gives it: a tensor-parallel plan's sharding rule may hand it a piece of the
// vocabulary's rows (SetVocabShard then says which ids they are).
template <typename T>
class TokenEmbedding final : public Module<T> {
 public:
  TokenEmbedding(ModuleBuilder& builder, std::string name, int64_t vocab, int64_t dim);

  // Ignores x: reads ctx.tokens() (validated by the caller).
  Result<Act<T>> Forward(ForwardContext<T>& ctx, Act<T> x) override;
  Result<Act<T>> Backward(ForwardContext<T>& ctx, Act<T> dy) override;

  // The table holds the ids [start, start + rows) of the vocabulary: the others look up zeros
  // and leave the table's gradient alone (summed over the pieces afterwards, Megatron's
  // VocabParallelEmbedding). Build time.
  void SetVocabShard(const ops::VocabShard& shard) { shard_ = shard; }

  int weight_param() const { return weight_; }
  int64_t rows() const { return rows_; }  // this rank's table rows (the registry's)

 private:
  int64_t rows_;
  int64_t dim_;
  int weight_;
  ops::VocabShard shard_;
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

  int token_weight_param() const { return table_->weight_param(); }

  // Replaces the token embedding by wrap(it): a module with its forward and backward (the
  // tensor-parallel plan's vocabulary-parallel embedding). Build time.
  using TokenWrapper =
      std::function<std::unique_ptr<Module<T>>(std::unique_ptr<TokenEmbedding<T>>)>;
  void WrapTokens(const TokenWrapper& wrap);

 private:
  TokenEmbedding<T>* table_;  // owned by tokens_, or by what wraps it
  std::unique_ptr<Module<T>> tokens_;
  std::unique_ptr<PositionEmbedding<T>> positions_;
};

extern template class TokenEmbedding<float>;
extern template class TokenEmbedding<double>;
extern template class PositionEmbedding<float>;
extern template class PositionEmbedding<double>;
extern template class Embeddings<float>;
extern template class Embeddings<double>;

}  // namespace sluice::model
