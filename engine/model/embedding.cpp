#include "engine/model/embedding.h"

#include <utility>

namespace sluice::model {

template <typename T>
TokenEmbedding<T>::TokenEmbedding(ModuleBuilder& builder, std::string name, int64_t vocab,
                                  int64_t dim)
    : Module<T>(builder, std::move(name)), dim_(dim) {
  weight_ = this->AddParameter(builder, "weight", {vocab, dim}, InitKind::kNormal);
  rows_ = builder.registry().parameter(weight_).shape.dim(0);
}

template <typename T>
Result<Act<T>> TokenEmbedding<T>::Forward(ForwardContext<T>& ctx, Act<T> /*x*/) {
  SLUICE_ASSIGN_OR_RETURN(T * y, ctx.AllocateSaved(this->id(), ctx.rows() * dim_));
  SLUICE_RETURN_IF_ERROR(ctx.ops().EmbeddingForward(
      ctx.stream(), {.tokens = ctx.tokens(),
                     .table = ctx.View(ctx.params().Value(weight_), {rows_, dim_}),
                     .out = ctx.View(y, {ctx.rows(), dim_}),
                     .shard = shard_}));
  return Act<T>{y, ctx.rows(), dim_};
}

template <typename T>
Result<Act<T>> TokenEmbedding<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, dim_) << this->name();
  if (T* dtable = ctx.params().Grad(weight_); dtable != nullptr) {
    SLUICE_RETURN_IF_ERROR(
        ctx.ops().EmbeddingBackward(ctx.stream(), {.tokens = ctx.tokens(),
                                                   .dout = ctx.View(dy),
                                                   .dtable = ctx.View(dtable, {rows_, dim_}),
                                                   .shard = shard_}));
  }
  ctx.ReleaseSaved(this->id());
  return Act<T>{};
}

template <typename T>
PositionEmbedding<T>::PositionEmbedding(ModuleBuilder& builder, std::string name, int64_t positions,
                                        int64_t dim)
    : Module<T>(builder, std::move(name)), positions_(positions), dim_(dim) {
  weight_ = this->AddParameter(builder, "weight", {positions, dim}, InitKind::kNormal);
}

template <typename T>
Result<Act<T>> PositionEmbedding<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.cols, dim_) << this->name();
  SLUICE_CHECK_LE(ctx.seq(), positions_) << this->name();
  SLUICE_ASSIGN_OR_RETURN(T * y, ctx.AllocateSaved(this->id(), x.numel()));
  SLUICE_RETURN_IF_ERROR(ctx.Copy(x, y));
  SLUICE_RETURN_IF_ERROR(ctx.ops().PositionEmbeddingForward(
      ctx.stream(), {.wpe = ctx.View(ctx.params().Value(weight_), {positions_, dim_}),
                     .x = ctx.View(y, {ctx.batch(), ctx.seq(), dim_})}));
  return Act<T>{y, x.rows, dim_};
}

template <typename T>
Result<Act<T>> PositionEmbedding<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  SLUICE_CHECK_EQ(dy.cols, dim_) << this->name();
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(this->id(), dy.numel()));
  SLUICE_RETURN_IF_ERROR(ctx.Copy(dy, dx));
  if (T* dwpe = ctx.params().Grad(weight_); dwpe != nullptr) {
    SLUICE_RETURN_IF_ERROR(ctx.ops().PositionEmbeddingBackward(
        ctx.stream(), {.dx = ctx.View(dy.data, {ctx.batch(), ctx.seq(), dim_}),
                       .dwpe = ctx.View(dwpe, {positions_, dim_})}));
  }
  ctx.ReleaseSaved(this->id());
  return Act<T>{dx, dy.rows, dim_};
}

template <typename T>
Embeddings<T>::Embeddings(ModuleBuilder& builder, std::string name, std::string token_name,
                          std::string position_name, int64_t vocab, int64_t positions, int64_t dim)
    : Module<T>(builder, std::move(name)) {
  auto table = std::make_unique<TokenEmbedding<T>>(builder, std::move(token_name), vocab, dim);
  table_ = table.get();
  tokens_ = std::move(table);
  this->AddChild(tokens_.get());
  if (positions > 0) {
    positions_ =
        std::make_unique<PositionEmbedding<T>>(builder, std::move(position_name), positions, dim);
    this->AddChild(positions_.get());
  }
}

template <typename T>
void Embeddings<T>::WrapTokens(const TokenWrapper& wrap) {
  const Module<T>* old = tokens_.get();
  SLUICE_CHECK(old == table_) << this->name() << ": the token embedding is wrapped already";
  tokens_ =
      wrap(std::unique_ptr<TokenEmbedding<T>>(static_cast<TokenEmbedding<T>*>(tokens_.release())));
  SLUICE_CHECK(tokens_ != nullptr) << this->name() << ": a wrapper returned nothing";
  this->ReplaceChild(old, tokens_.get());
}

template <typename T>
Result<Act<T>> Embeddings<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_ASSIGN_OR_RETURN(Act<T> h, tokens_->Forward(ctx, x));
  if (positions_ == nullptr) return h;
  return positions_->Forward(ctx, h);
}

template <typename T>
Result<Act<T>> Embeddings<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  if (positions_ == nullptr) return tokens_->Backward(ctx, dy);
  SLUICE_ASSIGN_OR_RETURN(Act<T> dh, positions_->Backward(ctx, dy));
  SLUICE_RETURN_IF_ERROR(tokens_->Backward(ctx, dh));
  ctx.ReleaseGrads(positions_->id());
  return Act<T>{};
}

template class TokenEmbedding<float>;
template class TokenEmbedding<double>;
template class PositionEmbedding<float>;
template class PositionEmbedding<double>;
template class Embeddings<float>;
template class Embeddings<double>;

}  // namespace sluice::model
