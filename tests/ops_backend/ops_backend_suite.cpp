// Every op of the ops table, run on device memory through the backend under test and compared
// with kernels/ref in fp64 on the host, at the compute dtype's declared tolerance; then the
// table's contract: argument errors that name the tensor, asynchronous launches, sticky errors.
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "kernels/ref/adam_ref.h"
#include "kernels/ref/ops_activation.h"
#include "kernels/ref/ops_attention.h"
#include "kernels/ref/ops_elementwise.h"
#include "kernels/ref/ops_embedding.h"
#include "kernels/ref/ops_linear.h"
#include "kernels/ref/ops_loss.h"
#include "kernels/ref/ops_norm.h"
#include "kernels/ref/ops_rope.h"
#include "tests/ops/ops_test_util.h"
#include "tests/ops_backend/ops_backend_suite_fixture.h"

namespace sluice::ops {
namespace {

namespace kr = kernels::ref;
using kernels::testing::ExpectClose;
using kernels::testing::Rng;

#define ASSERT_OK(expr)                                            \
  do {                                                             \
    const Status sluice_status_ = (expr);                          \
    ASSERT_TRUE(sluice_status_.ok()) << sluice_status_.ToString(); \
  } while (0)

TEST_P(OpsBackendTest, LinearForwardAndBackward) {
  const int64_t rows = 6, in = 16, out = 8;
  Rng rng(1);
  const std::vector<double> x = Rounded(rng.Uniform<double>(rows * in), compute());
  const std::vector<double> w = Rounded(rng.Uniform<double>(out * in), compute());
  const std::vector<double> b = Rounded(rng.Uniform<double>(out), compute());
  const std::vector<double> dy = Rounded(rng.Uniform<double>(rows * out), compute());
  const std::vector<double> dw0 = rng.Uniform<double>(out * in);  // accumulated into
  Tensor tx = Upload(x, compute(), {2, 3, in}), tw = Upload(w, compute(), {out, in}),
         tb = Upload(b, compute(), {out}), ty = Zeros(compute(), {2, 3, out}),
         tdy = Upload(dy, compute(), {2, 3, out}), tdx = Zeros(compute(), {2, 3, in}),
         tdw = Upload(Rounded(dw0, accum()), accum(), {out, in}), tdb = Zeros(accum(), {out});
  ASSERT_OK(ops_->LinearForward(*stream_, {.x = tx, .w = tw, .b = tb, .y = ty}));
  ASSERT_OK(ops_->LinearBackward(*stream_,
                                 {.x = tx, .w = tw, .dy = tdy, .dx = tdx, .dw = tdw, .db = tdb}));

  std::vector<double> y(rows * out), dx(rows * in), dw = Rounded(dw0, accum()), db(out, 0.0);
  kr::LinearForward(x.data(), w.data(), b.data(), y.data(), rows, in, out);
  kr::LinearBackward(x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), rows, in, out);
  ExpectClose(Download(ty), y, tol(), "y");
  ExpectClose(Download(tdx), dx, tol(), "dx");
  ExpectClose(Download(tdw), dw, tol(), "dw");
  ExpectClose(Download(tdb), db, tol(), "db");
}

TEST_P(OpsBackendTest, LinearBackwardSkipsGradientsNotWanted) {
  const int64_t rows = 4, in = 8, out = 8;
  Rng rng(2);
  const std::vector<double> x = Rounded(rng.Uniform<double>(rows * in), compute());
  const std::vector<double> w = Rounded(rng.Uniform<double>(out * in), compute());
  const std::vector<double> dy = Rounded(rng.Uniform<double>(rows * out), compute());
  Tensor tdx = Zeros(compute(), {rows, in});
  ASSERT_OK(ops_->LinearBackward(*stream_, {.x = Upload(x, compute(), {rows, in}),
                                            .w = Upload(w, compute(), {out, in}),
                                            .dy = Upload(dy, compute(), {rows, out}),
                                            .dx = tdx}));
  std::vector<double> dx(rows * in);
  kr::LinearBackward<double>(x.data(), w.data(), dy.data(), dx.data(), nullptr, nullptr, rows, in,
                             out);
  ExpectClose(Download(tdx), dx, tol(), "dx");
}

TEST_P(OpsBackendTest, EmbeddingsForwardAndBackward) {
  const int64_t n = 6, vocab = 11, dim = 16, batch = 2, seq = 3, positions = 5;
  Rng rng(3);
  const std::vector<int32_t> tokens = {3, 0, 10, 3, 7, 3};
  const std::vector<double> table = Rounded(rng.Uniform<double>(vocab * dim), compute());
  const std::vector<double> wpe = Rounded(rng.Uniform<double>(positions * dim), compute());
  const std::vector<double> dout = Rounded(rng.Uniform<double>(n * dim), compute());
  Int32View ttokens = UploadInt32(tokens);
  Tensor ttable = Upload(table, compute(), {vocab, dim}),
         tout = Zeros(compute(), {batch, seq, dim});
  Tensor twpe = Upload(wpe, compute(), {positions, dim});
  Tensor tdout = Upload(dout, compute(), {batch, seq, dim});
  Tensor tdtable = Zeros(accum(), {vocab, dim}), tdwpe = Zeros(accum(), {positions, dim});
  ASSERT_OK(ops_->EmbeddingForward(*stream_, {.tokens = ttokens, .table = ttable, .out = tout}));
  ASSERT_OK(ops_->PositionEmbeddingForward(*stream_, {.wpe = twpe, .x = tout}));
  ASSERT_OK(
      ops_->EmbeddingBackward(*stream_, {.tokens = ttokens, .dout = tdout, .dtable = tdtable}));
  ASSERT_OK(ops_->PositionEmbeddingBackward(*stream_, {.dx = tdout, .dwpe = tdwpe}));

  std::vector<double> out(n * dim), dtable(vocab * dim, 0.0), dwpe(positions * dim, 0.0);
  kr::EmbeddingForward(tokens.data(), table.data(), out.data(), n, vocab, dim);
  kr::PositionEmbeddingForward(wpe.data(), out.data(), batch, seq, positions, dim);
  kr::EmbeddingBackward(tokens.data(), dout.data(), dtable.data(), n, vocab, dim);
  kr::PositionEmbeddingBackward(dout.data(), dwpe.data(), batch, seq, positions, dim);
  ExpectClose(Download(tout), out, tol(), "out");
  ExpectClose(Download(tdtable), dtable, tol(), "dtable");
  ExpectClose(Download(tdwpe), dwpe, tol(), "dwpe");
}

TEST_P(OpsBackendTest, AttentionForwardAndBackward) {
  const kernels::AttentionDims d{.batch = 2, .seq = 5, .q_heads = 4, .kv_heads = 2, .head_dim = 32};
  const int64_t nq = d.batch * d.seq * d.q_heads * d.head_dim;
  const int64_t nk = d.batch * d.seq * d.kv_heads * d.head_dim;
  Rng rng(4);
  const std::vector<double> q = Rounded(rng.Uniform<double>(nq), compute());
  const std::vector<double> k = Rounded(rng.Uniform<double>(nk), compute());
  const std::vector<double> v = Rounded(rng.Uniform<double>(nk), compute());
  const std::vector<double> dout = Rounded(rng.Uniform<double>(nq), compute());
  const Shape qs{d.batch, d.seq, d.q_heads, d.head_dim}, ks{d.batch, d.seq, d.kv_heads, d.head_dim};
  Tensor tq = Upload(q, compute(), qs), tk = Upload(k, compute(), ks),
         tv = Upload(v, compute(), ks);
  Tensor tout = Zeros(compute(), qs), tlse = Zeros(accum(), {d.batch, d.q_heads, d.seq});
  Tensor tdout = Upload(dout, compute(), qs), tdq = Zeros(compute(), qs),
         tdk = Zeros(compute(), ks), tdv = Zeros(compute(), ks);
  ASSERT_OK(
      ops_->AttentionForward(*stream_, {.q = tq, .k = tk, .v = tv, .out = tout, .lse = tlse}));
  ASSERT_OK(ops_->AttentionBackward(*stream_, {.q = tq,
                                               .k = tk,
                                               .v = tv,
                                               .out = tout,
                                               .lse = tlse,
                                               .dout = tdout,
                                               .dq = tdq,
                                               .dk = tdk,
                                               .dv = tdv}));

  std::vector<double> out(nq), lse(d.batch * d.q_heads * d.seq), dq(nq), dk(nk), dv(nk);
  std::vector<double> ws(kernels::AttentionWorkspaceElements(d));
  kr::AttentionForward(q.data(), k.data(), v.data(), out.data(), lse.data(), d, ws.data());
  kr::AttentionBackward(q.data(), k.data(), v.data(), out.data(), lse.data(), dout.data(),
                        dq.data(), dk.data(), dv.data(), d, ws.data());
  ExpectClose(Download(tout), out, tol(), "out");
  ExpectClose(Download(tlse), lse, tol(), "lse");
  ExpectClose(Download(tdq), dq, tol(), "dq");
  ExpectClose(Download(tdk), dk, tol(), "dk");
  ExpectClose(Download(tdv), dv, tol(), "dv");
}

TEST_P(OpsBackendTest, CrossEntropyLossLandsOnTheDevice) {
  const int64_t rows = 5, vocab = 40;
  Rng rng(5);
  const std::vector<double> logits = Rounded(rng.Uniform<double>(rows * vocab, -3, 3), compute());
  const std::vector<int32_t> targets = {3, kernels::kIgnoreIndex, 39, 0, 17};
  Int32View ttargets = UploadInt32(targets);
  Tensor tlogits = Upload(logits, compute(), {rows, vocab}), tlse = Zeros(accum(), {rows});
  Tensor tloss = Zeros(accum(), Shape{}), tdlogits = Zeros(compute(), {rows, vocab});
  ASSERT_OK(ops_->CrossEntropyForward(
      *stream_, {.logits = tlogits, .targets = ttargets, .lse = tlse, .loss = tloss}));
  ASSERT_OK(ops_->CrossEntropyBackward(
      *stream_,
      {.logits = tlogits, .targets = ttargets, .lse = tlse, .dloss = 0.5f, .dlogits = tdlogits}));
  std::vector<double> lse(rows), dlogits(rows * vocab);
  const double loss =
      kr::CrossEntropyForward(logits.data(), targets.data(), lse.data(), rows, vocab);
  kr::CrossEntropyBackward(logits.data(), targets.data(), lse.data(), 0.5, dlogits.data(), rows,
                           vocab);
  ExpectClose(Download(tloss), std::vector<double>{loss}, tol(), "loss");
  ExpectClose(Download(tlse), lse, tol(), "lse");
  ExpectClose(Download(tdlogits), dlogits, tol(), "dlogits");
}

TEST_P(OpsBackendTest, NormsForwardAndBackward) {
  const int64_t rows = 6, cols = 24;
  Rng rng(6);
  const std::vector<double> x = Rounded(rng.Uniform<double>(rows * cols, -2, 2), compute());
  const std::vector<double> gamma = Rounded(rng.Uniform<double>(cols, 0.5, 1.5), compute());
  const std::vector<double> beta = Rounded(rng.Uniform<double>(cols), compute());
  const std::vector<double> dy = Rounded(rng.Uniform<double>(rows * cols), compute());
  const float eps = 1e-5f;
  Tensor tx = Upload(x, compute(), {2, 3, cols}), tg = Upload(gamma, compute(), {cols}),
         tb = Upload(beta, compute(), {cols}), tdy = Upload(dy, compute(), {2, 3, cols});
  Tensor ty = Zeros(compute(), {2, 3, cols}), tmean = Zeros(accum(), {2, 3}),
         trstd = Zeros(accum(), {2, 3}), tdx = Zeros(compute(), {2, 3, cols}),
         tdg = Zeros(accum(), {cols}), tdb = Zeros(accum(), {cols});
  ASSERT_OK(ops_->LayerNormForward(
      *stream_,
      {.x = tx, .gamma = tg, .beta = tb, .y = ty, .mean = tmean, .rstd = trstd, .eps = eps}));
  ASSERT_OK(ops_->LayerNormBackward(*stream_, {.x = tx,
                                               .gamma = tg,
                                               .mean = tmean,
                                               .rstd = trstd,
                                               .dy = tdy,
                                               .dx = tdx,
                                               .dgamma = tdg,
                                               .dbeta = tdb}));
  std::vector<double> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dg(cols, 0.0),
      db(cols, 0.0);
  kr::LayerNormForward(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(),
                       rows, cols, eps);
  kr::LayerNormBackward(x.data(), gamma.data(), mean.data(), rstd.data(), dy.data(), dx.data(),
                        dg.data(), db.data(), rows, cols);
  ExpectClose(Download(ty), y, tol(), "layernorm y");
  ExpectClose(Download(trstd), rstd, tol(), "layernorm rstd");
  ExpectClose(Download(tdx), dx, tol(), "layernorm dx");
  ExpectClose(Download(tdg), dg, tol(), "layernorm dgamma");
  ExpectClose(Download(tdb), db, tol(), "layernorm dbeta");

  Tensor ty2 = Zeros(compute(), {2, 3, cols}), trstd2 = Zeros(accum(), {6}),
         tdx2 = Zeros(compute(), {2, 3, cols}), tdg2 = Zeros(accum(), {cols});
  ASSERT_OK(
      ops_->RmsNormForward(*stream_, {.x = tx, .gamma = tg, .y = ty2, .rstd = trstd2, .eps = eps}));
  ASSERT_OK(ops_->RmsNormBackward(
      *stream_, {.x = tx, .gamma = tg, .rstd = trstd2, .dy = tdy, .dx = tdx2, .dgamma = tdg2}));
  std::fill(dg.begin(), dg.end(), 0.0);
  kr::RmsNormForward(x.data(), gamma.data(), y.data(), rstd.data(), rows, cols, eps);
  kr::RmsNormBackward(x.data(), gamma.data(), rstd.data(), dy.data(), dx.data(), dg.data(), rows,
                      cols);
  ExpectClose(Download(ty2), y, tol(), "rmsnorm y");
  ExpectClose(Download(tdx2), dx, tol(), "rmsnorm dx");
  ExpectClose(Download(tdg2), dg, tol(), "rmsnorm dgamma");
}

TEST_P(OpsBackendTest, ActivationsRopeAndResidual) {
  const int64_t b = 2, s = 3, h = 2, hd = 8, n = b * s * h * hd;
  const Shape shape{b, s, h, hd};
  Rng rng(7);
  const std::vector<double> x = Rounded(rng.Uniform<double>(n, -3, 3), compute());
  const std::vector<double> u = Rounded(rng.Uniform<double>(n, -3, 3), compute());
  const std::vector<double> dy = Rounded(rng.Uniform<double>(n), compute());
  Tensor tx = Upload(x, compute(), shape), tu = Upload(u, compute(), shape),
         tdy = Upload(dy, compute(), shape);
  auto zeros = [&] { return Zeros(compute(), shape); };
  Tensor gy = zeros(), gdx = zeros(), sy = zeros(), sdg = zeros(), sdu = zeros(), ry = zeros(),
         rdx = zeros(), ay = zeros(), acc = Upload(u, compute(), shape);
  ASSERT_OK(ops_->GeluForward(*stream_, {.x = tx, .y = gy}));
  ASSERT_OK(ops_->GeluBackward(*stream_, {.x = tx, .dy = tdy, .dx = gdx}));
  ASSERT_OK(ops_->SwiGluForward(*stream_, {.gate = tx, .up = tu, .y = sy}));
  ASSERT_OK(
      ops_->SwiGluBackward(*stream_, {.gate = tx, .up = tu, .dy = tdy, .dgate = sdg, .dup = sdu}));
  ASSERT_OK(ops_->RopeForward(*stream_, {.x = tx, .y = ry, .theta = 10000.0f}));
  ASSERT_OK(ops_->RopeBackward(*stream_, {.dy = tdy, .dx = rdx, .theta = 10000.0f}));
  ASSERT_OK(ops_->Add(*stream_, tx, tu, ay));
  ASSERT_OK(ops_->Accumulate(*stream_, tdy, acc));

  std::vector<double> e(n), e2(n);
  kr::GeluForward(x.data(), e.data(), n);
  ExpectClose(Download(gy), e, tol(), "gelu y");
  kr::GeluBackward(x.data(), dy.data(), e.data(), n);
  ExpectClose(Download(gdx), e, tol(), "gelu dx");
  kr::SwiGluForward(x.data(), u.data(), e.data(), n);
  ExpectClose(Download(sy), e, tol(), "swiglu y");
  kr::SwiGluBackward(x.data(), u.data(), dy.data(), e.data(), e2.data(), n);
  ExpectClose(Download(sdg), e, tol(), "swiglu dgate");
  ExpectClose(Download(sdu), e2, tol(), "swiglu dup");
  kr::RopeForward(x.data(), e.data(), b, s, h, hd, 10000.0f);
  ExpectClose(Download(ry), e, tol(), "rope y");
  kr::RopeBackward(dy.data(), e.data(), b, s, h, hd, 10000.0f);
  ExpectClose(Download(rdx), e, tol(), "rope dx");
  kr::Add(x.data(), u.data(), e.data(), n);
  ExpectClose(Download(ay), e, tol(), "add y");
  e = u;
  kr::Accumulate(dy.data(), e.data(), n);
  ExpectClose(Download(acc), e, tol(), "accumulate y");
}

TEST_P(OpsBackendTest, FlatOpsAdamConvertNormFlagFillSegments) {
  const int64_t n = 1000;
  Rng rng(8);
  // Adam over fp32 master state with a bf16 gradient and a bf16 copy.
  std::vector<float> p(n), m(n), v(n);
  std::vector<uint16_t> g(n), copy(n);
  const std::vector<double> p0 = Rounded(rng.Uniform<double>(n), DType::kF32);
  const std::vector<double> m0 = Rounded(rng.Uniform<double>(n, -0.1, 0.1), DType::kF32);
  const std::vector<double> v0 = Rounded(rng.Uniform<double>(n, 0.0, 0.01), DType::kF32);
  const std::vector<double> g0 = Rounded(rng.Uniform<double>(n), DType::kBF16);
  for (int64_t i = 0; i < n; ++i) {
    p[i] = static_cast<float>(p0[i]);
    m[i] = static_cast<float>(m0[i]);
    v[i] = static_cast<float>(v0[i]);
    g[i] = kernels::F32ToBf16(static_cast<float>(g0[i]));
  }
  Tensor tp = Upload(p0, DType::kF32, {n}), tm = Upload(m0, DType::kF32, {n}),
         tv = Upload(v0, DType::kF32, {n}), tg = Upload(g0, DType::kBF16, {n}),
         tcopy = Zeros(DType::kBF16, {n});
  const kernels::AdamHyperparams hyper{.lr = 1e-2f, .weight_decay = 0.1f, .step = 3};
  ASSERT_OK(ops_->AdamStep(*stream_, {.params = tp,
                                      .exp_avg = tm,
                                      .exp_avg_sq = tv,
                                      .grads = tg,
                                      .param_copy = tcopy,
                                      .hyper = hyper,
                                      .grad_scale = 0.5f}));
  kernels::AdamTensors t{.params = p.data(),
                         .exp_avg = m.data(),
                         .exp_avg_sq = v.data(),
                         .grads = g.data(),
                         .grad_type = kernels::AdamGradType::kBF16,
                         .param_copy = copy.data(),
                         .copy_type = kernels::AdamCopyType::kBF16,
                         .count = static_cast<size_t>(n)};
  kernels::AdamStepReference(t, hyper, 0.5f);
  // Every column follows AdamUpdateElement's operation order: equal to the reference's bits.
  ExpectClose(Download(tp), std::vector<double>(p.begin(), p.end()), 0.0, "adam params");
  ExpectClose(Download(tv), std::vector<double>(v.begin(), v.end()), 0.0, "adam exp_avg_sq");
  std::vector<double> copy_values(n);
  for (int64_t i = 0; i < n; ++i) copy_values[i] = kernels::Bf16ToF32(copy[i]);
  ExpectClose(Download(tcopy), copy_values, 0.0, "adam param_copy");

  // Convert f32 -> bf16 -> f32 rounds once, to nearest even.
  const std::vector<double> x = Rounded(rng.Uniform<double>(n, -100, 100), DType::kF32);
  Tensor tx = Upload(x, DType::kF32, {n}), th = Zeros(DType::kBF16, {n}),
         tback = Zeros(DType::kF32, {n});
  ASSERT_OK(ops_->Convert(*stream_, tx, th));
  ASSERT_OK(ops_->Convert(*stream_, th, tback));
  ExpectClose(Download(tback), Rounded(x, DType::kBF16), 0.0, "convert");

  // Squared sum into a device double.
  Tensor tsum = Zeros(DType::kF64, Shape{});
  ASSERT_OK(ops_->SquaredSum(*stream_, tx, tsum));
  double sum = 0.0;
  for (double value : x) sum += value * value;
  ExpectClose(Download(tsum), std::vector<double>{sum}, 1e-12, "squared sum");

  // inf/NaN flag: stays 0 for finite values, becomes 1 once one is not.
  std::vector<double> bad = x;
  bad[n / 2] = std::numeric_limits<double>::infinity();
  Int32View flag_view = UploadInt32({0});
  auto* flag = const_cast<int32_t*>(flag_view.data);
  ASSERT_OK(ops_->FlagInfOrNan(*stream_, tx, flag));
  EXPECT_EQ(DownloadInt32(flag, 1)[0], 0);
  ASSERT_OK(ops_->FlagInfOrNan(*stream_, Upload(bad, DType::kF32, {n}), flag));
  EXPECT_EQ(DownloadInt32(flag, 1)[0], 1);

  // Fill.
  Tensor tfill = Zeros(DType::kF32, {n});
  ASSERT_OK(ops_->Fill(*stream_, tfill, 0.25));
  ExpectClose(Download(tfill), std::vector<double>(n, 0.25), 0.0, "fill");

  // Segment copies, f32 -> bf16, with zero padding: what ZeRO's bucket packing does.
  const std::vector<CopySegment> segments = {
      {.src_offset = 10, .dst_offset = 0, .count = 5, .zero_fill = 3},
      {.src_offset = 0, .dst_offset = 8, .count = 4}};
  std::vector<uint8_t> seg_bytes(segments.size() * sizeof(CopySegment));
  std::memcpy(seg_bytes.data(), segments.data(), seg_bytes.size());
  const auto* seg_data = static_cast<const CopySegment*>(UploadBytes(std::move(seg_bytes)));
  Tensor tdst = Upload(std::vector<double>(12, 7.0), DType::kBF16, {12});
  ASSERT_OK(ops_->CopySegments(*stream_, tx, tdst,
                               {.data = seg_data, .count = 2, .max_segment_elements = 8}));
  const std::vector<double> xb = Rounded(x, DType::kBF16);
  std::vector<double> want = {xb[10], xb[11], xb[12], xb[13], xb[14], 0,
                              0,      0,      xb[0],  xb[1],  xb[2],  xb[3]};
  ExpectClose(Download(tdst), want, 0.0, "copy segments");
}

// Scale multiplies in place by the factor rounded to the tensor's dtype, one rounding per
// product: every column gives the bits of that product. 1/3 is inexact in both dtypes, and n is
// odd so that the CUDA kernel's unvectorized tail runs too.
TEST_P(OpsBackendTest, ScaleMultipliesInPlaceRoundingOnce) {
  const int64_t n = 1003;
  Rng rng(11);
  const double factor = 1.0 / 3.0;
  std::vector<DType> dtypes = {DType::kF32};
  if (accum() != DType::kF32) dtypes.push_back(accum());  // ref: its own f64 gradients
  for (DType dtype : dtypes) {
    const std::vector<double> x = Rounded(rng.Uniform<double>(n, -100, 100), dtype);
    Tensor y = Upload(x, dtype, {n});
    ASSERT_OK(ops_->Scale(*stream_, y, factor));
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = dtype == DType::kF32
                    ? static_cast<double>(static_cast<float>(x[i]) * static_cast<float>(factor))
                    : x[i] * factor;
    }
    ExpectClose(Download(y), want, 0.0, "scale " + std::string(DTypeName(dtype)));
    // Not the product in fp64 rounded once at the end: the factor was rounded first.
    if (dtype == DType::kF32) {
      int64_t differ = 0;
      for (int64_t i = 0; i < n; ++i) differ += want[i] != static_cast<float>(x[i] * factor);
      EXPECT_GT(differ, 0) << "the test cannot tell the two roundings apart";
    }
  }

  // Scaling by 1/8 before a sum and by 8 after it keeps two values near FLT_MAX finite, where
  // their plain sum overflows (what prescale_gradients guards against in 16-bit reductions).
  const double big = 3e38;
  Tensor pair = Upload({big, big}, DType::kF32, {2});
  ASSERT_OK(ops_->Scale(*stream_, pair, 0.125));
  const std::vector<double> scaled = Download(pair);
  EXPECT_EQ(scaled[0], static_cast<double>(static_cast<float>(big) * 0.125f));
  EXPECT_TRUE(std::isfinite(static_cast<float>(scaled[0] + scaled[1])));

  // Arguments: a 16-bit tensor, no tensor, a factor that is not finite.
  Status status = ops_->Scale(*stream_, Zeros(DType::kBF16, {4}), 2.0);
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("Scale: y is bf16[4], expected an f32 or f64 tensor"),
            std::string::npos)
      << status.message();
  EXPECT_EQ(ops_->Scale(*stream_, Tensor(), 2.0).code(), StatusCode::kInvalidArgument);
  status = ops_->Scale(*stream_, Zeros(DType::kF32, {4}), std::numeric_limits<double>::infinity());
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("Scale: factor inf is not finite"), std::string::npos)
      << status.message();
  if (ops_->name() == "cuda") {
    status = ops_->Scale(*stream_, Zeros(DType::kF64, {4}), 2.0);
    EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.ToString();
  }
  ASSERT_OK(stream_->Synchronize());
}

// A missing or wrong-rank weight is an error naming it, not an abort while the expected shapes
// are built from it.
// The blocked norm of a ZeRO shard: blocks of pieces, one of them empty, pieces out of order and
// of one element, a block longer than a CUDA thread block's stride.
TEST_P(OpsBackendTest, BlockSquaredSumsAddEachBlocksPieces) {
  const int64_t n = 3000;
  Rng rng(21);
  const std::vector<double> x = Rounded(rng.Uniform<double>(n, -2.0, 2.0), DType::kF32);
  const std::vector<std::vector<SumPiece>> blocks = {
      {{.offset = 0, .count = 700}, {.offset = 1500, .count = 300}},
      {},
      {{.offset = 900, .count = 513}},
      {{.offset = 2999, .count = 1}, {.offset = 1000, .count = 100}}};
  std::vector<SumPiece> pieces;
  std::vector<int64_t> first = {0};
  std::vector<double> expected;
  for (const std::vector<SumPiece>& block : blocks) {
    double sum = 0.0;
    for (const SumPiece& piece : block) {
      pieces.push_back(piece);
      for (int64_t i = piece.offset; i < piece.offset + piece.count; ++i) sum += x[i] * x[i];
    }
    first.push_back(static_cast<int64_t>(pieces.size()));
    expected.push_back(sum);
  }
  const auto upload = [this](const auto& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(values[0]));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return UploadBytes(std::move(bytes));
  };
  const BlockSumList list{.pieces = static_cast<const SumPiece*>(upload(pieces)),
                          .first = static_cast<const int64_t*>(upload(first)),
                          .blocks = static_cast<int64_t>(blocks.size())};
  Tensor sums = Zeros(DType::kF64, {list.blocks});
  ASSERT_OK(ops_->BlockSquaredSums(*stream_, Upload(x, DType::kF32, {n}), list, sums));
  const std::vector<double> got = Download(sums);
  if (GetParam().device == DeviceKind::kCpu) {
    EXPECT_EQ(got, expected) << "the host columns add in piece order, as the reference does";
  } else {
    ExpectClose(got, expected, 1e-13, "block squared sums");
  }
  EXPECT_EQ(got[1], 0.0);

  // Out-of-range pieces are the stream's error on the host columns; bad arguments fail at once.
  EXPECT_FALSE(
      ops_->BlockSquaredSums(*stream_, Upload(x, DType::kF32, {n}), list, Zeros(DType::kF64, {2}))
          .ok());
  EXPECT_FALSE(ops_->BlockSquaredSums(*stream_, Upload(x, DType::kF64, {n}), list, sums).ok());
}

// ZeRO's accumulation of a reduced piece into the gradient shard: one fp32 addition per element,
// the same bits on every column; elements outside the segments stay as they are.
TEST_P(OpsBackendTest, AccumulateSegmentsAddsInFp32) {
  Rng rng(31);
  const std::vector<double> x = Rounded(rng.Uniform<double>(300, -1.0, 1.0), DType::kF32);
  const std::vector<double> y = Rounded(rng.Uniform<double>(500, -1.0, 1.0), DType::kF32);
  const std::vector<CopySegment> segments = {{.src_offset = 0, .dst_offset = 400, .count = 100},
                                             {.src_offset = 100, .dst_offset = 3, .count = 200}};
  std::vector<double> expected = y;
  for (const CopySegment& g : segments) {
    for (int64_t i = 0; i < g.count; ++i) {
      expected[g.dst_offset + i] =
          static_cast<float>(expected[g.dst_offset + i]) + static_cast<float>(x[g.src_offset + i]);
    }
  }
  std::vector<uint8_t> bytes(segments.size() * sizeof(CopySegment));
  std::memcpy(bytes.data(), segments.data(), bytes.size());
  const auto* list = static_cast<const CopySegment*>(UploadBytes(std::move(bytes)));
  Tensor ty = Upload(y, DType::kF32, {500});
  ASSERT_OK(ops_->AccumulateSegments(*stream_, Upload(x, DType::kF32, {300}), ty,
                                     {.data = list, .count = 2, .max_segment_elements = 200}));
  EXPECT_EQ(Download(ty), expected);
  EXPECT_FALSE(ops_->AccumulateSegments(*stream_, Upload(x, DType::kBF16, {300}), ty,
                                        {.data = list, .count = 2, .max_segment_elements = 200})
                   .ok());
}

TEST_P(OpsBackendTest, MissingOrWrongRankWeightsAreErrorsNamingThem) {
  Tensor x = Zeros(compute(), {8, 32});
  Tensor y = Zeros(compute(), {8, 64});
  for (const Tensor& w : {Tensor(), Zeros(compute(), {64})}) {
    Status status = ops_->LinearForward(*stream_, {.x = x, .w = w, .y = y});
    ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("LinearForward: w is "), std::string::npos) << status.message();
    status = ops_->LinearBackward(*stream_, {.x = x, .w = w, .dy = y});
    ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
    EXPECT_NE(status.message().find("LinearBackward: w is "), std::string::npos)
        << status.message();
  }
  Tensor dout = Zeros(compute(), {8, 32});
  const Status status = ops_->EmbeddingBackward(
      *stream_, {.tokens = {}, .dout = dout, .dtable = Zeros(AccumDType(compute()), {32})});
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("dtable"), std::string::npos) << status.message();
}

TEST_P(OpsBackendTest, MismatchedShapeOrDTypeNamesTheTensor) {
  Tensor x = Zeros(compute(), {8, 32});
  Tensor w = Zeros(compute(), {64, 16});  // in should be 32
  Tensor y = Zeros(compute(), {8, 64});
  Status status = ops_->LinearForward(*stream_, {.x = x, .w = w, .y = y});
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  const std::string t(DTypeName(compute()));
  EXPECT_EQ(status.message(), "LinearForward: w is " + t + "[64, 16], expected " + t +
                                  "[64, 32] (x is " + t + "[8, 32])");

  const DType other = compute() == DType::kF32 ? DType::kF64 : DType::kF32;
  Tensor w_other = Zeros(other, {64, 32});
  status = ops_->LinearForward(*stream_, {.x = x, .w = w_other, .y = y});
  ASSERT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("w is " + std::string(DTypeName(other)) + "[64, 32]"),
            std::string::npos)
      << status.message();

  status = ops_->LayerNormForward(*stream_, {.x = x,
                                             .gamma = Zeros(compute(), {31}),
                                             .y = Zeros(compute(), {8, 32}),
                                             .mean = Zeros(accum(), {8}),
                                             .rstd = Zeros(accum(), {8})});
  EXPECT_NE(status.message().find("LayerNormForward: gamma is"), std::string::npos)
      << status.ToString();

  // Host memory is not device memory.
  std::vector<float> host(8 * 32);
  Tensor on_host(host.data(), compute(), {8, 32}, MemoryTier::kHost);
  status = ops_->GeluForward(*stream_, {.x = on_host, .y = Zeros(compute(), {8, 32})});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("GeluForward: x is"), std::string::npos) << status.ToString();

  // A compute dtype the column lacks names the op and the dtype.
  const DType unsupported = ops_->Supports(DType::kBF16) ? DType::kF64 : DType::kBF16;
  Tensor xu = Zeros(unsupported, {4, 8});
  status = ops_->GeluForward(*stream_, {.x = xu, .y = Zeros(unsupported, {4, 8})});
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented) << status.ToString();
  EXPECT_NE(
      status.message().find("GeluForward: compute dtype " + std::string(DTypeName(unsupported))),
      std::string::npos)
      << status.message();
  ASSERT_OK(stream_->Synchronize());
}

TEST_P(OpsBackendTest, OpReturnsBeforeItRuns) {
  const int64_t n = 256;
  Tensor y = Zeros(DType::kF32, {n});
  ASSERT_OK(stream_->Synchronize());
  std::atomic<bool> slept{false};
  ASSERT_OK(device_->LaunchHostFunc(
      *stream_,
      [&slept] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        slept = true;
        return OkStatus();
      },
      "sleep"));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_OK(ops_->Fill(*stream_, y, 3.0));
  const double enqueue_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(slept.load()) << "the op waited for the stream";
  EXPECT_LT(enqueue_ms, 150.0);
  ExpectClose(Download(y), std::vector<double>(n, 3.0), 0.0, "fill after the sleep");
  EXPECT_TRUE(slept.load());
}

TEST_P(OpsBackendTest, ErrorsAreStickyOnTheStream) {
  Tensor y = Zeros(DType::kF32, {16});
  ASSERT_OK(stream_->Synchronize());
  ASSERT_OK(device_->LaunchHostFunc(
      *stream_, [] { return InternalError("injected failure"); }, "failing task"));
  ASSERT_OK(ops_->Fill(*stream_, y, 1.0));  // enqueued fine; the stream is already failed
  Status synced = stream_->Synchronize();
  EXPECT_FALSE(synced.ok());
  EXPECT_NE(synced.ToString().find("injected failure"), std::string::npos) << synced.ToString();
  EXPECT_FALSE(stream_->Synchronize().ok()) << "the error must stay on the stream";
}

TEST_P(OpsBackendTest, BadTokenIsTheStreamsErrorNamingTheOp) {
  if (GetParam().device == DeviceKind::kCuda) {
    GTEST_SKIP() << "CUDA zeroes the row and sets the flag instead (kernels/cuda/embedding.h)";
  }
  Tensor table = Zeros(compute(), {4, 8}), out = Zeros(compute(), {2, 8});
  Int32View tokens = UploadInt32({1, 9});
  ASSERT_OK(ops_->EmbeddingForward(*stream_, {.tokens = tokens, .table = table, .out = out}));
  ASSERT_OK(ops_->Fill(*stream_, out, 1.0));
  Status synced = stream_->Synchronize();
  ASSERT_EQ(synced.code(), StatusCode::kInvalidArgument) << synced.ToString();
  EXPECT_NE(synced.message().find("EmbeddingForward: token 9 at index 1"), std::string::npos)
      << synced.message();
}

}  // namespace
}  // namespace sluice::ops
