// The tensor-parallel layout of grouped-query attention's key/value heads (tensor_layout.h),
// without ranks: split over the tensor ranks when there are at least as many heads, shared by
// groups of consecutive ranks when there are fewer (SplitTensorShared), with the share group's
// first rank the one that counts and saves each piece, and the head rules that accept or refuse
// each size (head_layout.h).
#include "engine/parallel/tensor_layout.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "engine/model/head_layout.h"
#include "engine/parallel/global_runs.h"
#include "engine/parallel/tensor_sharding.h"

namespace sluice::parallel {
namespace {

// Llama, 8 query heads of 4 dimensions, `kv` key/value heads, this rank `rank` of `tensor`.
model::ModelOptions Llama(int64_t kv, int64_t tensor, int64_t rank) {
  model::ModelOptions o;
  o.family = model::Family::kLlama;
  o.d_model = 32;
  o.n_head = 8;
  o.n_kv_head = kv;
  o.d_ff = 64;
  o.vocab_size = 64;
  o.tensor_parallel_size = tensor;
  o.tensor_parallel_rank = rank;
  return o;
}

TensorSharding KvOf(const model::ModelOptions& o, const std::string& name) {
  const int64_t head_dim = o.d_model / o.n_head;
  Result<TensorSharding> s =
      TensorShardingOf(TensorLayoutOf(o), name, Shape({o.n_kv_head * head_dim, o.d_model}));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : TensorSharding{};
}

TEST(TensorLayoutTest, KeyValueHeadsAreSharedWhenFewerThanRanks) {
  // Two key/value heads over four ranks: ranks 0-1 hold head 0 (global rows 0-3), 2-3 head 1.
  for (int64_t rank = 0; rank < 4; ++rank) {
    const model::ModelOptions o = Llama(2, 4, rank);
    for (const char* name :
         {"model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"}) {
      const TensorSharding s = KvOf(o, name);
      SCOPED_TRACE(std::string(name) + " rank " + std::to_string(rank) + ": " + s.ToString());
      EXPECT_TRUE(s.split());
      EXPECT_TRUE(s.shared());
      EXPECT_TRUE(s.partial_grad);
      EXPECT_EQ(s.dim, 0);
      EXPECT_EQ(s.degree, 2);
      EXPECT_EQ(s.rank, rank / 2);
      EXPECT_EQ(s.replicas, 2);
      EXPECT_EQ(s.replica, rank % 2);
      EXPECT_EQ(s.LocalShape(), Shape({4, 32}));
      EXPECT_EQ(s.PieceStart(), 4 * (rank / 2));
      EXPECT_EQ(s.GlobalIndex(0), 4 * (rank / 2) * 32);
      EXPECT_EQ(s.FirstHolder(rank), rank % 2 == 0);
      // A checkpoint's global slice: the whole piece is one run of the global tensor.
      EXPECT_EQ(GlobalRunsOf(s, 0, 128),
                (std::vector<GlobalRun>{
                    {.local_begin = 0, .global_begin = 4 * (rank / 2) * 32, .count = 128}}));
    }
    // The query heads and the MLP split four ways as before, unshared.
    Result<TensorSharding> q = TensorShardingOf(
        TensorLayoutOf(o), "model.layers.0.self_attn.q_proj.weight", Shape({32, 32}));
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->degree, 4);
    EXPECT_FALSE(q->shared());
    EXPECT_FALSE(q->partial_grad);
    EXPECT_TRUE(q->FirstHolder(rank));
  }
  const TensorSharding s = KvOf(Llama(2, 4, 3), "model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(s.ToString(),
            "split dim 0 of [8, 32] 2 ways, piece 1, shared by 2 ranks (replica 1), partial "
            "gradients");
}

TEST(TensorLayoutTest, OneKeyValueHeadIsReplicatedWithPartialGradients) {
  for (int64_t rank = 0; rank < 2; ++rank) {
    const TensorSharding s = KvOf(Llama(1, 2, rank), "model.layers.0.self_attn.k_proj.weight");
    EXPECT_TRUE(s.replicated()) << s.ToString();
    EXPECT_FALSE(s.shared());
    EXPECT_TRUE(s.partial_grad);
    EXPECT_EQ(s.degree, 2);
    EXPECT_EQ(s.LocalShape(), Shape({4, 32}));
    EXPECT_EQ(s.FirstHolder(rank), rank == 0);
    EXPECT_EQ(s.ToString(), "replicated on 2 ranks, partial gradients");
  }
}

TEST(TensorLayoutTest, KeyValueHeadsSplitPlainlyWhenAtLeastAsManyAsRanks) {
  for (const int64_t kv : {4, 8}) {
    const TensorSharding s = KvOf(Llama(kv, 4, 3), "model.layers.0.self_attn.k_proj.weight");
    EXPECT_EQ(s.degree, 4) << s.ToString();
    EXPECT_EQ(s.rank, 3);
    EXPECT_FALSE(s.shared());
    EXPECT_FALSE(s.partial_grad);
    EXPECT_TRUE(s.FirstHolder(3));
    EXPECT_EQ(s.LocalShape().dim(0), kv);  // kv / 4 heads of 4 dimensions
  }
  // Without tensor parallelism: whole.
  const TensorSharding whole = KvOf(Llama(2, 1, 0), "model.layers.0.self_attn.k_proj.weight");
  EXPECT_FALSE(whole.split() || whole.replicated() || whole.partial_grad);
  EXPECT_TRUE(whole.FirstHolder(0));
}

TEST(TensorLayoutTest, SplitTensorSharedRefusesGroupsThatDoNotFit) {
  EXPECT_EQ(SplitTensorShared(Shape({12, 4}), 0, 3, 4, 0).status().code(),
            StatusCode::kInvalidArgument);  // 3 pieces over 4 ranks
  EXPECT_EQ(SplitTensorShared(Shape({6, 4}), 0, 4, 8, 0).status().code(),
            StatusCode::kInvalidArgument);  // 6 rows in 4 pieces
  EXPECT_EQ(SplitTensorShared(Shape({8, 4}), 0, 2, 4, 4).status().code(),
            StatusCode::kInvalidArgument);  // no rank 4 of 4
  // As many pieces as ranks: a plain split.
  Result<TensorSharding> plain = SplitTensorShared(Shape({8, 4}), 0, 4, 4, 1);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->shared());
  EXPECT_FALSE(plain->partial_grad);
  EXPECT_EQ(plain->rank, 1);
  // Every rank of a share group reads the same global elements, each piece held by its group.
  for (int64_t rank = 0; rank < 8; ++rank) {
    Result<TensorSharding> s = SplitTensorShared(Shape({8, 4}), 0, 2, 8, rank);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->replicas, 4);
    EXPECT_EQ(s->GlobalIndex(5), (rank / 4) * 16 + 5);
  }
}

TEST(TensorLayoutTest, HeadRulesAcceptSharedKeyValueHeadsAndNameTheKeys) {
  EXPECT_EQ(model::TensorSplitError(8, 2, 64, 4), "");
  EXPECT_EQ(model::TensorSplitError(8, 1, 64, 2), "");
  EXPECT_EQ(model::TensorSplitError(8, 2, 64, 8), "");
  EXPECT_EQ(model::TensorSplitError(8, 8, 64, 4), "");
  // Neither divides the other: 3 heads over 2 or 4 ranks, 6 over 4.
  for (const auto& [n_head, kv, tensor] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{12, 3, 2}, {12, 3, 4}, {12, 6, 4}}) {
    const std::string error = model::TensorSplitError(n_head, kv, 64, tensor);
    EXPECT_NE(
        error.find("model.n_kv_head = " + std::to_string(kv) +
                   " does not split over tensor_parallel.autotp_size = " + std::to_string(tensor)),
        std::string::npos)
        << error;
  }
  EXPECT_EQ(model::KvHeadsPerTensorRank(2, 4), 1);
  EXPECT_EQ(model::KvHeadsPerTensorRank(1, 2), 1);
  EXPECT_EQ(model::KvHeadsPerTensorRank(8, 4), 2);
  EXPECT_EQ(model::KvHeadsPerTensorRank(8, 1), 8);
}

}  // namespace
}  // namespace sluice::parallel
