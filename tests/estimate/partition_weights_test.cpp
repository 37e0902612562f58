// The per-layer weights of each pipeline.partition_method (estimate/partition_weights.h) and the
// stages they give: type:<regex> counts the matched layer classes a layer carries (DeepSpeed's
// binary weights), time weighs each layer's compute time, so a heavy head leaves the last stage
// fewer blocks.
#include "engine/estimate/partition_weights.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/estimate/stage_layout.h"
#include "engine/parallel/layer_partition.h"

namespace sluice::estimate {
namespace {

using parallel::PartitionLayers;
using parallel::PartitionMethod;
using parallel::PartitionSpec;

model::ModelOptions Gpt(int64_t layers) {
  model::ModelOptions o;
  o.family = model::Family::kGpt2;
  o.n_layer = layers;
  o.d_model = 64;
  o.n_head = 4;
  o.n_kv_head = 4;
  o.d_ff = 256;
  o.vocab_size = 512;
  o.seq_len = 32;
  return o;
}

PartitionSpec Spec(const std::string& name) {
  Result<PartitionSpec> spec = parallel::ParsePartitionMethod(name, "pipeline.partition_method");
  SLUICE_CHECK(spec.ok()) << spec.status().ToString();
  return *spec;
}

std::vector<int64_t> Bounds(const model::ModelOptions& o, const PartitionSpec& spec, int parts,
                            const LayerTimes* times = nullptr) {
  Result<std::vector<int64_t>> weights = PartitionWeights(o, spec, times, o.seq_len);
  SLUICE_CHECK(weights.ok()) << weights.status().ToString();
  Result<std::vector<int64_t>> bounds = PartitionLayers(*weights, parts, spec.method);
  SLUICE_CHECK(bounds.ok()) << bounds.status().ToString();
  return *bounds;
}

TEST(PartitionWeightsTest, LayersCarryTheClassesOfTheirRoles) {
  const model::ModelOptions o = Gpt(4);
  EXPECT_EQ(LayerClasses(o, 0), (std::vector<std::string>{"Embeddings", "DecoderBlock"}));
  EXPECT_EQ(LayerClasses(o, 1), (std::vector<std::string>{"DecoderBlock"}));
  EXPECT_EQ(LayerClasses(o, 3), (std::vector<std::string>{"DecoderBlock", "LayerNorm", "LMHead"}));
  model::ModelOptions llama = o;
  llama.family = model::Family::kLlama;
  EXPECT_EQ(LayerClasses(llama, 3)[1], "RmsNorm");
}

TEST(PartitionWeightsTest, TypeCountsTheMatchedClasses) {
  model::ModelOptions o = Gpt(8);
  o.vocab_size = 8192;  // embeddings of 10 blocks' parameters
  EXPECT_EQ(*PartitionWeights(o, Spec("type:decoderblock")), std::vector<int64_t>(8, 1));
  EXPECT_EQ(*PartitionWeights(o, Spec("type:Embeddings|LMHead")),
            (std::vector<int64_t>{1, 0, 0, 0, 0, 0, 0, 1}));
  // The blocks alone: every stage the same number of blocks, unlike "parameters", which gives
  // the first and last stages fewer for the embeddings and the head they carry.
  EXPECT_EQ(Bounds(o, Spec("type:block"), 4), (std::vector<int64_t>{0, 2, 4, 6, 8}));
  EXPECT_NE(Bounds(o, Spec("parameters"), 4), Bounds(o, Spec("type:block"), 4));

  Result<std::vector<int64_t>> none = PartitionWeights(o, Spec("type:transformer"));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("type:transformer"), std::string::npos);
  EXPECT_NE(none.status().message().find("Embeddings, DecoderBlock, LayerNorm, LMHead"),
            std::string::npos)
      << none.status().message();
}

TEST(PartitionWeightsTest, TimeGivesAHeavyTailFewerBlocks) {
  const model::ModelOptions o = Gpt(8);
  // A block 10, the tail 40: in units of the tail, layer 0 0.25 + 0.0125, layers 1-6 0.25,
  // layer 7 1.25. Two stages: 6 layers (1.5125) and 2 (1.5) beat 4 and 4 (1.0125, 2.0).
  const LayerTimes times{.embeddings = 0.5, .block = 10, .tail = 40};
  EXPECT_EQ(Bounds(o, Spec("time"), 2, &times), (std::vector<int64_t>{0, 6, 8}));
  EXPECT_EQ(Bounds(o, Spec("uniform"), 2), (std::vector<int64_t>{0, 4, 8}));
  // Equal blocks and no roles: the uniform split.
  const LayerTimes flat{.embeddings = 0, .block = 3, .tail = 0};
  EXPECT_EQ(Bounds(o, Spec("time"), 4, &flat), Bounds(o, Spec("uniform"), 4));

  const LayerTimes bad{.embeddings = 0, .block = 0, .tail = 0};
  EXPECT_FALSE(PartitionWeights(o, Spec("time"), &bad).ok());
}

TEST(PartitionWeightsTest, WithoutMeasuredTimesFlopsStandIn) {
  const model::ModelOptions o = Gpt(4);
  const LayerTimes flops = FlopTimes(o, o.seq_len);
  EXPECT_EQ(flops.embeddings, 0);
  EXPECT_EQ(flops.tail, 6.0 * static_cast<double>(o.d_model * o.vocab_size));
  EXPECT_GT(flops.block, 0);
  EXPECT_EQ(*PartitionWeights(o, Spec("time"), nullptr, o.seq_len),
            *PartitionWeights(o, Spec("time"), &flops, o.seq_len));
}

}  // namespace
}  // namespace sluice::estimate
