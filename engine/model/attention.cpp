#include "engine/model/attention.h"

#include <utility>

namespace sluice::model {
namespace {

// Saved by the module itself, in order: q, k, v (owned when fused, views otherwise), out, lse.
constexpr int kQ = 0;
constexpr int kK = 1;
constexpr int kV = 2;
constexpr int kOut = 3;
constexpr int kLse = 4;

}  // namespace

template <typename T>
CausalSelfAttention<T>::CausalSelfAttention(ModuleBuilder& builder, std::string name,
                                            const AttentionOptions& options)
    : Module<T>(builder, std::move(name)), options_(options) {
  SLUICE_CHECK(options.n_head > 0 && options.n_kv_head > 0 && options.d_model % options.n_head == 0)
      << this->name() << ": d_model " << options.d_model << ", heads " << options.n_head;
  head_dim_ = options.d_model / options.n_head;
  const std::string& prefix = this->name();
  const int64_t d = options.d_model;
  const int64_t all_q = options.n_head * head_dim_;
  const int64_t all_kv = options.n_kv_head * head_dim_;
  if (options.fused_qkv) {
    qkv_ = std::make_unique<Linear<T>>(builder, prefix + ".c_attn", d, all_q + 2 * all_kv,
                                       options.bias);
    this->AddChild(qkv_.get());
    // A piece of the fused rows holds the same share of the q, k and v heads.
    const int64_t all = all_q + 2 * all_kv;
    SLUICE_CHECK(all % qkv_->out() == 0 && options.n_kv_head % (all / qkv_->out()) == 0)
        << this->name() << ": " << qkv_->out() << " of the " << all << " q/k/v rows";
    n_head_ = options.n_head / (all / qkv_->out());
    n_kv_head_ = options.n_kv_head / (all / qkv_->out());
  } else {
    q_ = std::make_unique<Linear<T>>(builder, prefix + ".q_proj", d, all_q, options.bias);
    k_ = std::make_unique<Linear<T>>(builder, prefix + ".k_proj", d, all_kv, options.bias);
    v_ = std::make_unique<Linear<T>>(builder, prefix + ".v_proj", d, all_kv, options.bias);
    this->AddChild(q_.get());
    this->AddChild(k_.get());
    this->AddChild(v_.get());
    n_head_ = q_->out() / head_dim_;
    n_kv_head_ = k_->out() / head_dim_;
    SLUICE_CHECK(q_->out() % head_dim_ == 0 && k_->out() == v_->out() &&
                 k_->out() % head_dim_ == 0 && n_head_ % n_kv_head_ == 0)
        << this->name() << ": q " << q_->out() << ", k " << k_->out() << ", v " << v_->out()
        << " columns of heads of " << head_dim_;
  }
  out_ = std::make_unique<Linear<T>>(builder, prefix + (options.fused_qkv ? ".c_proj" : ".o_proj"),
                                     all_q, d, options.bias, InitKind::kNormalResidual);
  SLUICE_CHECK_EQ(out_->in(), q_width()) << this->name() << ": output projection";
  this->AddChild(out_.get());
  if (options.rope) {
    SLUICE_CHECK(!options.fused_qkv) << this->name() << ": RoPE needs separate projections";
    rope_q_ = std::make_unique<Rope<T>>(builder, prefix + ".rope_q", n_head_, head_dim_,
                                        options.rope_theta);
    rope_k_ = std::make_unique<Rope<T>>(builder, prefix + ".rope_k", n_kv_head_, head_dim_,
                                        options.rope_theta);
    this->AddChild(rope_q_.get());
    this->AddChild(rope_k_.get());
  }
}

template <typename T>
Result<Act<T>> CausalSelfAttention<T>::Forward(ForwardContext<T>& ctx, Act<T> x) {
  SLUICE_CHECK_EQ(x.cols, options_.d_model) << this->name();
  const int id = this->id();
  const int64_t rows = x.rows;
  const int64_t qw = q_width();
  const int64_t kvw = kv_width();
  if (qkv_ != nullptr) {
    // The kernel wants q, k and v each packed [rows, heads, head_dim]: split the fused rows.
    SLUICE_ASSIGN_OR_RETURN(Act<T> qkv, qkv_->Forward(ctx, x));
    SLUICE_ASSIGN_OR_RETURN(T * q, ctx.AllocateSaved(id, rows * qw));
    SLUICE_ASSIGN_OR_RETURN(T * k, ctx.AllocateSaved(id, rows * kvw));
    SLUICE_ASSIGN_OR_RETURN(T * v, ctx.AllocateSaved(id, rows * kvw));
    SLUICE_RETURN_IF_ERROR(ctx.CopyColumns(qkv.data, qkv.cols, q, qw, rows, qw));
    SLUICE_RETURN_IF_ERROR(ctx.CopyColumns(qkv.data + qw, qkv.cols, k, kvw, rows, kvw));
    SLUICE_RETURN_IF_ERROR(ctx.CopyColumns(qkv.data + qw + kvw, qkv.cols, v, kvw, rows, kvw));
  } else {
    SLUICE_ASSIGN_OR_RETURN(Act<T> q, q_->Forward(ctx, x));
    SLUICE_ASSIGN_OR_RETURN(Act<T> k, k_->Forward(ctx, x));
    SLUICE_ASSIGN_OR_RETURN(Act<T> v, v_->Forward(ctx, x));
    if (rope_q_ != nullptr) {
      SLUICE_ASSIGN_OR_RETURN(q, rope_q_->Forward(ctx, q));
      SLUICE_ASSIGN_OR_RETURN(k, rope_k_->Forward(ctx, k));
    }
    ctx.KeepSaved(id, q.data);
    ctx.KeepSaved(id, k.data);
    ctx.KeepSaved(id, v.data);
  }
  SLUICE_ASSIGN_OR_RETURN(T * out, ctx.AllocateSaved(id, rows * qw));
  SLUICE_ASSIGN_OR_RETURN(T * lse, ctx.AllocateSaved(id, ctx.batch() * n_head_ * ctx.seq()));
  const auto saved = ctx.Saved(id);
  const Shape q_shape = QShape(ctx);
  const Shape kv_shape = KvShape(ctx);
  SLUICE_RETURN_IF_ERROR(
      ctx.ops().AttentionForward(ctx.stream(), {.q = ctx.View(saved[kQ], q_shape),
                                                .k = ctx.View(saved[kK], kv_shape),
                                                .v = ctx.View(saved[kV], kv_shape),
                                                .out = ctx.View(out, q_shape),
                                                .lse = ctx.View(lse, LseShape(ctx))}));
  return out_->Forward(ctx, Act<T>{out, rows, qw});
}

template <typename T>
Result<Act<T>> CausalSelfAttention<T>::Backward(ForwardContext<T>& ctx, Act<T> dy) {
  const int id = this->id();
  const int64_t rows = dy.rows;
  const int64_t qw = q_width();
  const int64_t kvw = kv_width();
  SLUICE_ASSIGN_OR_RETURN(Act<T> dout, out_->Backward(ctx, dy));
  SLUICE_ASSIGN_OR_RETURN(Scratch<T> dq, ctx.AllocateScratch(rows * qw));
  SLUICE_ASSIGN_OR_RETURN(Scratch<T> dk, ctx.AllocateScratch(rows * kvw));
  SLUICE_ASSIGN_OR_RETURN(Scratch<T> dv, ctx.AllocateScratch(rows * kvw));
  const auto saved = ctx.Saved(id);
  const Shape q_shape = QShape(ctx);
  const Shape kv_shape = KvShape(ctx);
  SLUICE_RETURN_IF_ERROR(
      ctx.ops().AttentionBackward(ctx.stream(), {.q = ctx.View(saved[kQ], q_shape),
                                                 .k = ctx.View(saved[kK], kv_shape),
                                                 .v = ctx.View(saved[kV], kv_shape),
                                                 .out = ctx.View(saved[kOut], q_shape),
                                                 .lse = ctx.View(saved[kLse], LseShape(ctx)),
                                                 .dout = ctx.View(dout.data, q_shape),
                                                 .dq = ctx.View(dq.get(), q_shape),
                                                 .dk = ctx.View(dk.get(), kv_shape),
                                                 .dv = ctx.View(dv.get(), kv_shape)}));
  ReleaseGradsOf(ctx, *out_);
  ctx.ReleaseSaved(id);

  if (qkv_ != nullptr) {
    const int64_t width = qw + 2 * kvw;
    SLUICE_ASSIGN_OR_RETURN(Scratch<T> dqkv, ctx.AllocateScratch(rows * width));
    SLUICE_RETURN_IF_ERROR(ctx.CopyColumns(dq.get(), qw, dqkv.get(), width, rows, qw));
    SLUICE_RETURN_IF_ERROR(ctx.CopyColumns(dk.get(), kvw, dqkv.get() + qw, width, rows, kvw));
    SLUICE_RETURN_IF_ERROR(ctx.CopyColumns(dv.get(), kvw, dqkv.get() + qw + kvw, width, rows, kvw));
    return qkv_->Backward(ctx, Act<T>{dqkv.get(), rows, width});
  }

  Act<T> dq_act{dq.get(), rows, qw};
  Act<T> dk_act{dk.get(), rows, kvw};
  if (rope_q_ != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(dq_act, rope_q_->Backward(ctx, dq_act));
    SLUICE_ASSIGN_OR_RETURN(dk_act, rope_k_->Backward(ctx, dk_act));
  }
  SLUICE_ASSIGN_OR_RETURN(Act<T> dx_q, q_->Backward(ctx, dq_act));
  SLUICE_ASSIGN_OR_RETURN(Act<T> dx_k, k_->Backward(ctx, dk_act));
  SLUICE_ASSIGN_OR_RETURN(Act<T> dx_v, v_->Backward(ctx, Act<T>{dv.get(), rows, kvw}));
  SLUICE_ASSIGN_OR_RETURN(T * dx, ctx.AllocateGrad(id, dx_q.numel()));
  const Tensor dx_view = ctx.View(dx, {rows, options_.d_model});
  SLUICE_RETURN_IF_ERROR(ctx.ops().Add(ctx.stream(), ctx.View(dx_q), ctx.View(dx_k), dx_view));
  SLUICE_RETURN_IF_ERROR(ctx.ops().Accumulate(ctx.stream(), ctx.View(dx_v), dx_view));
  for (Module<T>* child : this->children()) {
    if (child != out_.get()) ReleaseGradsOf(ctx, *child);
  }
  return Act<T>{dx, rows, options_.d_model};
}

template class CausalSelfAttention<float>;
template class CausalSelfAttention<double>;

}  // namespace sluice::model
