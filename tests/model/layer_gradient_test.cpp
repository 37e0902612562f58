// Every layer's backward against central finite differences in fp64 on the reference ops: the
// gradient of L = sum(y * r) (r fixed and random) with respect to each input element and each
// parameter element. Tiny dims: batch 2, seq 5, d_model 8, 2 query heads, 1 key/value head for
// grouped-query attention, vocab 11.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/attention.h"
#include "engine/model/cross_entropy.h"
#include "engine/model/decoder_block.h"
#include "engine/model/embedding.h"
#include "engine/model/linear.h"
#include "engine/model/mlp.h"
#include "engine/model/norm.h"
#include "engine/model/rope.h"
#include "kernels/ref/ops_loss.h"
#include "tests/model/model_test_util.h"

namespace sluice::model {
namespace {

using testing::CentralDifference;
using testing::ExpectGradientsAgree;
using testing::kStep;
using testing::RandomTokens;
using testing::RandomVector;
using testing::ToDevice;
using testing::ToHost;
using testing::VectorBinding;

constexpr int64_t kBatch = 2;
constexpr int64_t kSeq = 5;
constexpr int64_t kRows = kBatch * kSeq;
constexpr int64_t kDim = 8;
constexpr int32_t kVocab = 11;

class LayerGradientTest : public ::testing::Test {
 protected:
  LayerGradientTest() : builder_(registry_) { registry_.BeginUnit("layer"); }

  // Runs the full check on `layer`, whose input is [kRows, in_cols] (ignored for token input).
  void Check(Module<double>& layer, int64_t in_cols, uint64_t seed) {
    VectorBinding<double> binding(registry_);
    binding.values = RandomVector(registry_.total_elements(), seed);
    for (const ParameterInfo& info : registry_.parameters()) {
      if (info.init != InitKind::kOnes || info.is_alias()) continue;
      for (int64_t e = 0; e < info.numel; ++e) binding.values[info.offset + e] += 1.0;
    }
    const std::vector<int32_t> tokens = RandomTokens(kRows, kVocab, seed + 1);
    const DeviceBuffer device_tokens = ToDevice(*stream_, tokens);
    std::vector<double> x = RandomVector(kRows * in_cols, seed + 2);
    std::vector<double> r;

    const auto loss = [&]() -> double {
      ForwardContext<double> ctx(ops_, *stream_, binding, kBatch, kSeq,
                                 device_tokens.data_as<int32_t>());
      const DeviceBuffer device_x = ToDevice(*stream_, x);
      auto y = layer.Forward(ctx, Act<double>{device_x.data_as<double>(), kRows, in_cols});
      EXPECT_TRUE(y.ok()) << y.status().ToString();
      const std::vector<double> out = ToHost(*stream_, y->data, y->numel());
      if (r.empty()) r = RandomVector(y->numel(), seed + 3);
      double sum = 0.0;
      for (int64_t i = 0; i < y->numel(); ++i) sum += out[i] * r[i];
      return sum;
    };
    loss();  // sizes r

    // Analytic gradients, twice: parameter gradients must accumulate.
    std::vector<double> dx;
    std::vector<double> first_grads;
    for (int pass = 0; pass < 2; ++pass) {
      ForwardContext<double> ctx(ops_, *stream_, binding, kBatch, kSeq,
                                 device_tokens.data_as<int32_t>());
      const DeviceBuffer device_x = ToDevice(*stream_, x);
      auto y = layer.Forward(ctx, Act<double>{device_x.data_as<double>(), kRows, in_cols});
      ASSERT_TRUE(y.ok()) << y.status().ToString();
      const DeviceBuffer dy = ToDevice(*stream_, r);
      auto back = layer.Backward(ctx, Act<double>{dy.data_as<double>(), y->rows, y->cols});
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      if (!back->empty()) {
        ASSERT_EQ(back->rows, kRows);
        ASSERT_EQ(back->cols, in_cols);
        dx = ToHost(*stream_, back->data, back->numel());
      }
      ReleaseGradsOf(ctx, layer);
      ASSERT_TRUE(stream_->Synchronize().ok());  // the parameter gradients are host vectors
      EXPECT_EQ(ctx.held_bytes(), 0) << layer.name() << " left activations behind";
      if (pass == 0) first_grads = binding.grads;
    }
    // The second pass adds its row contributions onto the first pass's sums, so the result is
    // twice the first up to rounding.
    for (size_t i = 0; i < first_grads.size(); ++i) {
      ASSERT_NEAR(binding.grads[i], 2.0 * first_grads[i], 1e-12 * (1.0 + std::abs(first_grads[i])))
          << "element " << i << " of the flat gradients did not accumulate";
    }

    if (!dx.empty()) {
      for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
        ExpectGradientsAgree(dx[i], CentralDifference(loss, &x[i], kStep),
                             layer.name() + " input element " + std::to_string(i));
      }
    }
    int checked = 0;
    for (const ParameterInfo& info : registry_.parameters()) {
      if (info.is_alias()) continue;
      for (int64_t e = 0; e < info.numel; ++e) {
        const double numeric = CentralDifference(loss, &binding.values[info.offset + e], kStep);
        ExpectGradientsAgree(first_grads[info.offset + e], numeric,
                             info.name + " element " + std::to_string(e));
        ++checked;
      }
    }
    EXPECT_EQ(checked, registry_.total_elements());
  }

  ops::OpsBackend& ops_ = sluice::testing::OpsFor<double>();
  std::unique_ptr<Stream> stream_ = std::move(ops_.device().CreateStream()).value();
  ParameterRegistry registry_;
  ModuleBuilder builder_;
};

TEST_F(LayerGradientTest, TokenEmbedding) {
  TokenEmbedding<double> layer(builder_, "transformer.wte", kVocab, kDim);
  Check(layer, kDim, 11);
}

TEST_F(LayerGradientTest, PositionEmbedding) {
  PositionEmbedding<double> layer(builder_, "transformer.wpe", 7, kDim);
  Check(layer, kDim, 12);
}

TEST_F(LayerGradientTest, GptEmbeddingsUnit) {
  Embeddings<double> layer(builder_, "transformer", "transformer.wte", "transformer.wpe", kVocab, 7,
                           kDim);
  Check(layer, kDim, 13);
}

TEST_F(LayerGradientTest, LayerNorm) {
  LayerNorm<double> layer(builder_, "ln", kDim, 1e-5f);
  Check(layer, kDim, 14);
}

TEST_F(LayerGradientTest, RmsNorm) {
  RmsNorm<double> layer(builder_, "norm", kDim, 1e-6f);
  Check(layer, kDim, 15);
}

TEST_F(LayerGradientTest, LinearWithBias) {
  Linear<double> layer(builder_, "fc", kDim, 6, /*bias=*/true);
  Check(layer, kDim, 16);
}

TEST_F(LayerGradientTest, LinearWithoutBias) {
  Linear<double> layer(builder_, "fc", kDim, 6, /*bias=*/false);
  Check(layer, kDim, 17);
}

TEST_F(LayerGradientTest, Rope) {
  Rope<double> layer(builder_, "rope", 2, 4, 10000.0);
  Check(layer, kDim, 18);
}

TEST_F(LayerGradientTest, MultiHeadAttentionFusedWithBias) {
  AttentionOptions options;
  options.d_model = kDim;
  options.n_head = 2;
  options.n_kv_head = 2;
  options.fused_qkv = true;
  options.bias = true;
  CausalSelfAttention<double> layer(builder_, "attn", options);
  Check(layer, kDim, 19);
}

TEST_F(LayerGradientTest, GroupedQueryAttentionWithRope) {
  AttentionOptions options;
  options.d_model = kDim;
  options.n_head = 2;
  options.n_kv_head = 1;
  options.rope = true;
  CausalSelfAttention<double> layer(builder_, "self_attn", options);
  Check(layer, kDim, 20);
}

TEST_F(LayerGradientTest, GroupedQueryAttentionFused) {
  AttentionOptions options;
  options.d_model = kDim;
  options.n_head = 2;
  options.n_kv_head = 1;
  options.fused_qkv = true;
  CausalSelfAttention<double> layer(builder_, "attn", options);
  Check(layer, kDim, 21);
}

TEST_F(LayerGradientTest, GeluMlp) {
  Mlp<double> layer(builder_, "mlp", MlpOptions{kDim, 12, /*swiglu=*/false, /*bias=*/true});
  Check(layer, kDim, 22);
}

TEST_F(LayerGradientTest, SwiGluMlp) {
  Mlp<double> layer(builder_, "mlp", MlpOptions{kDim, 12, /*swiglu=*/true, /*bias=*/false});
  Check(layer, kDim, 23);
}

ModelOptions BlockOptions(Family family, bool checkpoint) {
  ModelOptions o = testing::TinyOptions(family);
  o.activation_checkpointing = checkpoint;
  return o;
}

TEST_F(LayerGradientTest, Gpt2DecoderBlock) {
  DecoderBlock<double> layer(builder_, "transformer.h.0", BlockOptions(Family::kGpt2, false));
  Check(layer, kDim, 24);
}

TEST_F(LayerGradientTest, LlamaDecoderBlock) {
  DecoderBlock<double> layer(builder_, "model.layers.0", BlockOptions(Family::kLlama, false));
  Check(layer, kDim, 25);
}

TEST_F(LayerGradientTest, CheckpointedGpt2DecoderBlock) {
  DecoderBlock<double> layer(builder_, "transformer.h.0", BlockOptions(Family::kGpt2, true));
  ASSERT_TRUE(layer.checkpointed());
  Check(layer, kDim, 26);
}

TEST_F(LayerGradientTest, CheckpointedLlamaDecoderBlock) {
  DecoderBlock<double> layer(builder_, "model.layers.0", BlockOptions(Family::kLlama, true));
  Check(layer, kDim, 27);
}

// The loss: d(dloss * mean cross-entropy)/d(logits), with one ignored target.
TEST(CrossEntropyGradientTest, MatchesFiniteDifferences) {
  ParameterRegistry registry;
  ModuleBuilder builder(registry);
  CrossEntropyLoss<double> loss_layer(builder, kVocab);
  ops::OpsBackend& ops = sluice::testing::OpsFor<double>();
  const std::unique_ptr<Stream> stream = std::move(ops.device().CreateStream()).value();
  VectorBinding<double> binding(registry);
  const DeviceBuffer tokens = ToDevice(*stream, RandomTokens(kRows, kVocab, 30));
  std::vector<int32_t> targets = RandomTokens(kRows, kVocab, 31);
  targets[3] = kernels::kIgnoreIndex;
  const DeviceBuffer device_targets = ToDevice(*stream, targets);
  const int32_t* targets_data = device_targets.data_as<int32_t>();
  std::vector<double> logits = RandomVector(kRows * kVocab, 32, -3.0, 3.0);
  const double dloss = 0.75;
  const DeviceBuffer device_loss = ToDevice(*stream, std::vector<double>(1));
  double* loss_data = device_loss.data_as<double>();

  const auto loss = [&]() -> double {
    ForwardContext<double> ctx(ops, *stream, binding, kBatch, kSeq, tokens.data_as<int32_t>());
    const DeviceBuffer device_logits = ToDevice(*stream, logits);
    EXPECT_TRUE(loss_layer
                    .Forward(ctx, Act<double>{device_logits.data_as<double>(), kRows, kVocab},
                             targets_data, loss_data)
                    .ok());
    return dloss * ToHost(*stream, loss_data, 1)[0];
  };

  ForwardContext<double> ctx(ops, *stream, binding, kBatch, kSeq, tokens.data_as<int32_t>());
  const DeviceBuffer work = ToDevice(*stream, logits);
  ASSERT_TRUE(
      loss_layer
          .Forward(ctx, Act<double>{work.data_as<double>(), kRows, kVocab}, targets_data, loss_data)
          .ok());
  auto grad = loss_layer.Backward(ctx, targets_data, dloss);
  ASSERT_TRUE(grad.ok());
  EXPECT_EQ(grad->data, work.data_as<double>()) << "the gradient is written over the logits";
  EXPECT_EQ(ctx.held_bytes(), 0);
  const std::vector<double> dlogits = ToHost(*stream, grad->data, kRows * kVocab);
  for (int64_t i = 0; i < kRows * kVocab; ++i) {
    ExpectGradientsAgree(dlogits[i], CentralDifference(loss, &logits[i], kStep),
                         "logit " + std::to_string(i));
  }
  for (int64_t v = 0; v < kVocab; ++v) EXPECT_EQ(dlogits[3 * kVocab + v], 0.0);
}

}  // namespace
}  // namespace sluice::model
