// PartitionLayers: DeepSpeed's "uniform" split and the "parameters" balance against an
// exhaustive search over every contiguous split, and the refusals.
#include "engine/parallel/layer_partition.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <vector>

namespace sluice::parallel {
namespace {

std::vector<int64_t> Partition(const std::vector<int64_t>& weights, int parts,
                               PartitionMethod method) {
  Result<std::vector<int64_t>> bounds = PartitionLayers(weights, parts, method);
  EXPECT_TRUE(bounds.ok()) << bounds.status().ToString();
  return bounds.ok() ? *bounds : std::vector<int64_t>{};
}

// Every part non-empty, contiguous, covering [0, n).
void ExpectSplit(const std::vector<int64_t>& bounds, int64_t n, int parts) {
  ASSERT_EQ(bounds.size(), static_cast<size_t>(parts) + 1);
  EXPECT_EQ(bounds.front(), 0);
  EXPECT_EQ(bounds.back(), n);
  for (int p = 0; p < parts; ++p) EXPECT_LT(bounds[p], bounds[p + 1]) << "part " << p;
}

int64_t Heaviest(const std::vector<int64_t>& w, const std::vector<int64_t>& bounds) {
  int64_t heaviest = 0;
  for (size_t p = 0; p + 1 < bounds.size(); ++p) {
    int64_t sum = 0;
    for (int64_t i = bounds[p]; i < bounds[p + 1]; ++i) sum += w[i];
    heaviest = std::max(heaviest, sum);
  }
  return heaviest;
}

// The lightest heaviest part over every split into `parts` non-empty contiguous parts.
int64_t BestBottleneck(const std::vector<int64_t>& w, int parts) {
  const auto n = static_cast<int64_t>(w.size());
  int64_t best = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> bounds{0};
  std::function<void()> search = [&] {
    const int placed = static_cast<int>(bounds.size()) - 1;
    if (placed == parts - 1) {
      bounds.push_back(n);
      best = std::min(best, Heaviest(w, bounds));
      bounds.pop_back();
      return;
    }
    for (int64_t next = bounds.back() + 1; next <= n - (parts - 1 - placed); ++next) {
      bounds.push_back(next);
      search();
      bounds.pop_back();
    }
  };
  search();
  return best;
}

TEST(LayerPartitionTest, UniformGivesTheFirstPartsTheRemainder) {
  // DeepSpeed's partition_uniform(10, 4): chunks of 2, the first 10 % 4 = 2 parts one longer.
  const std::vector<int64_t> weights(10, 7);  // weights do not matter to "uniform"
  const std::vector<int64_t> bounds = Partition(weights, 4, PartitionMethod::kUniform);
  ExpectSplit(bounds, 10, 4);
  EXPECT_EQ(bounds, (std::vector<int64_t>{0, 3, 6, 8, 10}));
  for (int n = 1; n <= 13; ++n) {
    for (int parts = 1; parts <= n; ++parts) {
      const std::vector<int64_t> b =
          Partition(std::vector<int64_t>(n, 1), parts, PartitionMethod::kUniform);
      ExpectSplit(b, n, parts);
      for (int p = 0; p < parts; ++p) {
        const int64_t size = b[p + 1] - b[p];
        EXPECT_EQ(size, n / parts + (p < n % parts ? 1 : 0)) << n << " in " << parts;
      }
    }
  }
}

TEST(LayerPartitionTest, ParametersFindTheLightestHeaviestStage) {
  // A decoder: heavy embeddings on the first layer, a heavy head on the last.
  const std::vector<int64_t> decoder = {90, 20, 20, 20, 20, 20, 20, 70};
  for (int parts = 1; parts <= 8; ++parts) {
    const std::vector<int64_t> b = Partition(decoder, parts, PartitionMethod::kParameters);
    ExpectSplit(b, 8, parts);
    EXPECT_EQ(Heaviest(decoder, b), BestBottleneck(decoder, parts)) << parts << " parts";
  }
  // Uneven layers: the first stage gets fewer blocks than "uniform" would give it.
  const std::vector<int64_t> four = Partition(decoder, 4, PartitionMethod::kParameters);
  const std::vector<int64_t> uniform = Partition(decoder, 4, PartitionMethod::kUniform);
  EXPECT_LT(four[1], uniform[1]);
  EXPECT_LT(Heaviest(decoder, four), Heaviest(decoder, uniform));

  std::mt19937 rng(21);
  std::uniform_int_distribution<int64_t> weight(0, 50);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + trial % 9;
    std::vector<int64_t> w(n);
    for (int64_t& x : w) x = weight(rng);
    const int parts = 1 + trial % n;
    const std::vector<int64_t> b = Partition(w, parts, PartitionMethod::kParameters);
    ExpectSplit(b, n, parts);
    EXPECT_EQ(Heaviest(w, b), BestBottleneck(w, parts)) << "trial " << trial;
  }
}

TEST(LayerPartitionTest, RefusesMoreStagesThanLayersNamingTheKey) {
  const std::vector<int64_t> three(3, 1);
  for (PartitionMethod method : {PartitionMethod::kUniform, PartitionMethod::kParameters}) {
    Result<std::vector<int64_t>> r = PartitionLayers(three, 4, method);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("pipeline.stages = 4"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("3 decoder layers"), std::string::npos);
    r = PartitionLayers(three, 6, method, "--pipeline-stages 3 x 2 chunks");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("--pipeline-stages 3 x 2 chunks = 6"), std::string::npos)
        << r.status().message();
  }
  EXPECT_FALSE(PartitionLayers(three, 0, PartitionMethod::kUniform).ok());
  const std::vector<int64_t> negative = {1, -1, 1};
  EXPECT_FALSE(PartitionLayers(negative, 2, PartitionMethod::kParameters).ok());
}

TEST(LayerPartitionTest, ParsesDeepSpeedsMethodNames) {
  EXPECT_EQ(ParsePartitionMethod("uniform", "k")->method, PartitionMethod::kUniform);
  EXPECT_EQ(ParsePartitionMethod("Parameters", "k")->method, PartitionMethod::kParameters);
  EXPECT_EQ(ParsePartitionMethod("TIME", "k")->method, PartitionMethod::kTime);
  Result<PartitionSpec> type = ParsePartitionMethod("Type:Decoder.*", "k");
  ASSERT_TRUE(type.ok()) << type.status().ToString();
  EXPECT_EQ(type->method, PartitionMethod::kType);
  EXPECT_EQ(type->type_regex, "Decoder.*");  // the regex as given
  EXPECT_EQ(PartitionMethodName(*type), "type:Decoder.*");
  // DeepSpeed's re.search with IGNORECASE: anywhere in the class name, any case.
  EXPECT_TRUE(MatchesLayerClass(*type, "DecoderBlock"));
  EXPECT_TRUE(MatchesLayerClass(*ParsePartitionMethod("type:block", "k"), "DecoderBlock"));
  EXPECT_FALSE(MatchesLayerClass(*ParsePartitionMethod("type:^block", "k"), "DecoderBlock"));
  EXPECT_TRUE(MatchesLayerClass(*ParsePartitionMethod("type:norm|head", "k"), "LMHead"));

  Result<PartitionSpec> r = ParsePartitionMethod("layers", "--partition-method");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--partition-method"), std::string::npos);
  EXPECT_NE(r.status().message().find("type:<regex>"), std::string::npos);
  r = ParsePartitionMethod("type:(", "pipeline.partition_method");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not a valid regex"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(ParsePartitionMethod("type:", "k").ok());
}

}  // namespace
}  // namespace sluice::parallel
