// Megatron tensor parallelism on real ranks (mpirun -np 2 and 4): a model built at tensor size t
// holds bit for bit the slices of the whole model's weights, its loss and every gradient
// (gathered by global index) agree with the whole model's, and each pass all-reduces exactly
// twice per block forward and twice backward. GPT-2 (fused c_attn split per q, k, v) and Llama
// with grouped-query attention (key/value heads split, or shared by groups of ranks when there are
// fewer than ranks), at every tensor size the world allows
// (2, and 4 on four ranks), on devices whose memory the host cannot read where the CPU has
// protection keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/model/buffer.h"
#include "engine/model/model.h"
#include "engine/parallel/process_groups.h"
#include "engine/parallel/tensor_sharding.h"
#include "kernels/ref/ops_loss.h"
#include "runtime/device/device_factory.h"
#include "runtime/ops/ops_factory.h"
#include "runtime/trace.h"
#include "tests/common/test_world.h"
#include "tests/model/model_test_util.h"
#include "tests/parallel/tensor_parallel_util.h"

namespace sluice::parallel {
namespace {

class TensorParallel : public ::testing::TestWithParam<Family> {};

TEST_P(TensorParallel, PiecesAreTheWholeModelsSlicesAndCoverItOnce) {
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    TensorSetup setup = MakeSetup(GetParam(), t);
    const ModelOptions& o = setup.options;
    HostAllocator host;
    auto piece = Build(o, host, &setup.groups->tensor());
    auto whole = Build(Whole(o), host);
    piece->InitializeParameters(kSeed);
    whole->InitializeParameters(kSeed);
    EXPECT_EQ(piece->registry().parameters().size(), whole->registry().parameters().size());

    const int64_t head_dim = o.d_model / o.n_head;
    for (const ParameterInfo& info : piece->registry().parameters()) {
      SCOPED_TRACE(info.name + " " + info.sharding.ToString());
      const int w = WholeIndex(*whole, info);
      const ParameterInfo& global = whole->registry().parameter(w);
      EXPECT_EQ(info.sharding.global_shape, global.shape);
      EXPECT_EQ(info.sharding.degree, t);
      // The plan's layout, checked against the names: the rank's heads and d_ff columns.
      const std::string& n = info.name;
      const bool row = n.ends_with("c_proj.weight") || n.ends_with("o_proj.weight") ||
                       n.ends_with("down_proj.weight");
      const bool column = n.ends_with("c_attn.weight") || n.ends_with("c_attn.bias") ||
                          n.ends_with("c_fc.weight") || n.ends_with("c_fc.bias") ||
                          n.ends_with("q_proj.weight") || n.ends_with("k_proj.weight") ||
                          n.ends_with("v_proj.weight") || n.ends_with("gate_proj.weight") ||
                          n.ends_with("up_proj.weight");
      // The vocabulary tables: pieces as even as possible (vocab 50 over 4 ranks: 13, 13, 12, 12).
      const bool vocab =
          n.ends_with("wte.weight") || n.ends_with("embed_tokens.weight") || n == "lm_head.weight";
      if (vocab) {
        const int64_t r = o.tensor_parallel_rank;
        EXPECT_EQ(info.sharding.dim, 0);
        EXPECT_EQ(info.shape.dim(0), o.vocab_size / t + (r < o.vocab_size % t ? 1 : 0));
        EXPECT_EQ(info.sharding.PieceStart(),
                  r * (o.vocab_size / t) + std::min(r, o.vocab_size % t));
      } else if (row) {
        EXPECT_EQ(info.sharding.dim, 1);
        EXPECT_EQ(info.shape.dim(1), global.shape.dim(1) / t);
      } else if (column) {
        EXPECT_EQ(info.sharding.dim, 0);
        EXPECT_EQ(info.shape.dim(0), global.shape.dim(0) / t);
      } else {
        EXPECT_TRUE(info.sharding.replicated());
        EXPECT_EQ(info.shape, global.shape);
      }
      if (n.ends_with("c_attn.weight")) {
        EXPECT_EQ(info.shape.dim(0), 3 * o.n_head / t * head_dim);
      }
      if (n.ends_with("k_proj.weight")) {
        EXPECT_EQ(info.shape.dim(0), o.n_kv_head / t * head_dim);
      }
      if (info.is_alias()) continue;

      // Bit for bit the whole model's value at the global index.
      int64_t mismatched = 0;
      std::vector<float> count(static_cast<size_t>(global.numel), 0.0f);
      for (int64_t e = 0; e < info.numel; ++e) {
        const int64_t g = info.sharding.GlobalIndex(e);
        ASSERT_GE(g, 0);
        ASSERT_LT(g, global.numel);
        count[g] += 1.0f;
        if (Bits(piece->ParameterValue(&info - piece->registry().parameters().data(), e)) !=
            Bits(whole->ParameterValue(w, g))) {
          ++mismatched;
        }
      }
      EXPECT_EQ(mismatched, 0);
      // Over the tensor ranks the pieces of a split tensor hold each element once; a replicated
      // one is whole everywhere.
      Status summed =
          setup.groups->tensor().AllReduce(count.data(), count.size(), DType::kF32, ReduceOp::kSum);
      ASSERT_TRUE(summed.ok()) << summed.ToString();
      const float expected = info.sharding.split() ? 1.0f : static_cast<float>(t);
      EXPECT_EQ(std::count(count.begin(), count.end(), expected),
                static_cast<std::ptrdiff_t>(count.size()));
    }
    // The GPT-2 c_attn piece of rank r is [q heads; k heads; v heads] of that rank, in order:
    // row i of its k block is global row d_model + r * d_model / t + i.
    if (GetParam() == Family::kGpt2) {
      const int p = *piece->registry().Find("transformer.h.0.attn.c_attn.weight");
      const parallel::TensorSharding& s = piece->registry().parameter(p).sharding;
      const int64_t local_q = o.d_model / t;
      EXPECT_EQ(s.GlobalIndex(local_q * o.d_model),
                (o.d_model + o.tensor_parallel_rank * local_q) * o.d_model);
    }
  }
}

struct PassResult {
  double loss = 0;
  int64_t bitwise_params = 0;  // parameters whose every gradient element equals the whole's
  int64_t params = 0;
  double worst = 0;  // largest |piece - whole| / max|whole gradient of that parameter|
};

// One ForwardBackward of the piece and the whole model on the same batch, from the same values:
// the initial ones, or randomized ones (no zero bias, no unit norm weight: the row-parallel
// biases are added once). Every gradient element may differ from the whole model's by
// `tolerance` times the largest element of that parameter's gradient, the loss by `tolerance`
// relative.
template <typename T>
PassResult CompareOnePass(const TensorSetup& setup, bool checkpointing, bool randomize,
                          double tolerance, bool some_ignored = false) {
  ModelOptions o = setup.options;
  o.activation_checkpointing = checkpointing;
  HostAllocator host;
  auto piece = Build<T>(o, host, &setup.groups->tensor());
  auto whole = Build<T>(Whole(o), host);
  if (randomize) {
    model::testing::Randomize(*whole, kSeed);
  } else {
    whole->InitializeParameters(kSeed);
  }
  CopySlices(*whole, *piece);

  const int64_t n = kBatch * o.seq_len;
  const auto vocab = static_cast<int32_t>(o.vocab_size);
  const std::vector<int32_t> tokens = model::testing::RandomTokens(n, vocab, 7);
  std::vector<int32_t> targets = model::testing::RandomTokens(n, vocab, 8);
  if (some_ignored) {
    for (int64_t i = 0; i < n; i += 3) targets[i] = kernels::kIgnoreIndex;
  }
  piece->ZeroGrads();
  whole->ZeroGrads();
  Result<double> piece_loss =
      piece->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len);
  Result<double> whole_loss =
      whole->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len);
  SLUICE_CHECK(piece_loss.ok()) << piece_loss.status().ToString();
  SLUICE_CHECK(whole_loss.ok()) << whole_loss.status().ToString();
  EXPECT_LE(std::abs(*piece_loss - *whole_loss), tolerance * std::abs(*whole_loss))
      << *piece_loss << " vs " << *whole_loss;
  // Key/value heads shared by groups of ranks: each holder has its own query heads' part.
  SumPartialGradients(setup, *piece);

  PassResult result;
  result.loss = *piece_loss;
  std::vector<T> replicated_grads;
  for (const ParameterInfo& info : piece->registry().parameters()) {
    if (info.is_alias()) continue;
    const ParameterInfo& global = whole->registry().parameter(WholeIndex(*whole, info));
    const T* mine = piece->grads_data() + info.offset;
    const T* theirs = whole->grads_data() + global.offset;
    double scale = 0;
    for (int64_t g = 0; g < global.numel; ++g) {
      scale = std::max(scale, std::abs(static_cast<double>(theirs[g])));
    }
    bool bitwise = true;
    double worst = 0;
    for (int64_t e = 0; e < info.numel; ++e) {
      const T a = mine[e];
      const T b = theirs[info.sharding.GlobalIndex(e)];
      bitwise = bitwise && SameBits(a, b);
      worst = std::max(worst, std::abs(static_cast<double>(a) - b) / std::max(scale, 1e-30));
    }
    EXPECT_LE(worst, tolerance)
        << info.name << " (" << info.sharding.ToString()
        << "): largest difference relative to the gradient's largest element";
    ++result.params;
    if (bitwise) ++result.bitwise_params;
    result.worst = std::max(result.worst, worst);
    if (info.sharding.replicated())
      replicated_grads.insert(replicated_grads.end(), mine, mine + info.numel);
  }
  // Replicated parameters get the same gradient, bit for bit, on every tensor rank.
  Comm& tensor = setup.groups->tensor();
  std::vector<T> all(replicated_grads.size() * tensor.size());
  Status gathered = tensor.AllGather(replicated_grads.data(), all.data(), all.size(),
                                     std::is_same_v<T, float> ? DType::kF32 : DType::kF64);
  SLUICE_CHECK(gathered.ok()) << gathered.ToString();
  for (int r = 0; r < tensor.size(); ++r) {
    EXPECT_EQ(std::memcmp(all.data() + r * replicated_grads.size(), replicated_grads.data(),
                          replicated_grads.size() * sizeof(T)),
              0)
        << "tensor rank " << r << "'s replicated gradients differ from this rank's";
  }
  return result;
}

void Report(const char* what, int t, bool checkpointing, const PassResult& r) {
  if (TestWorld().rank() != 0) return;
  std::printf(
      "[ %s tp %d%s ] loss %.9f, %lld of %lld parameters' gradients bitwise, largest "
      "difference %.3g of the gradient's largest element\n",
      what, t, checkpointing ? " checkpointed" : "", r.loss,
      static_cast<long long>(r.bitwise_params), static_cast<long long>(r.params), r.worst);
}

// fp32 from the initial values (init_std 0.1): the split sums of the row-parallel projections
// and of the all-reduces round differently from the whole model's single sums, within 1e-6.
TEST_P(TensorParallel, LossAndEveryGradientMatchTheWholeModel) {
  const std::string family(model::FamilyName(GetParam()));
  for (const int t : TensorSizes()) {
    for (const bool checkpointing : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "tensor size " << t << (checkpointing ? ", checkpointed" : ""));
      TensorSetup setup = MakeSetup(GetParam(), t);
      Report((family + " f32").c_str(), t, checkpointing,
             CompareOnePass<float>(setup, checkpointing, /*randomize=*/false, 1e-6));
    }
  }
}

// fp64 on the reference backend from randomized values (biases and norm weights included): the
// same sums to within fp64 rounding, so any misplaced head, column or bias would show.
TEST_P(TensorParallel, Fp64LossAndGradientsMatchTheWholeModelFromRandomValues) {
  const std::string family(model::FamilyName(GetParam()));
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    TensorSetup setup = MakeSetup(GetParam(), t);
    Report((family + " f64 randomized").c_str(), t, false,
           CompareOnePass<double>(setup, /*checkpointing=*/false, /*randomize=*/true, 1e-12));
  }
}

// The loss's ignored rows (a third of the targets) count and weigh as in the whole model's:
// fp64 to within rounding. In fp32 the gradients are a third smaller while each rank's
// log-sum-exp (summed in fp64 and rounded once) and the whole model's (an fp32 SIMD sum) round
// apart by an ulp, so the bound is 2e-6 there.
TEST_P(TensorParallel, IgnoredTargetsAsInTheWholeModel) {
  const std::string family(model::FamilyName(GetParam()));
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    TensorSetup setup = MakeSetup(GetParam(), t);
    Report((family + " f32 ignored targets").c_str(), t, false,
           CompareOnePass<float>(setup, false, /*randomize=*/false, 2e-6, /*some_ignored=*/true));
    Report((family + " f64 ignored targets").c_str(), t, false,
           CompareOnePass<double>(setup, false, /*randomize=*/true, 1e-12, /*some_ignored=*/true));
  }
}

// The logits, the largest activation, are split over the vocabulary: with a vocabulary large
// enough to dominate, a rank's peak activation memory falls by at least the logits it no longer
// holds ([rows, vocab - its piece] elements).
TEST_P(TensorParallel, LogitsMemoryFallsByTheTensorSize) {
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    TensorSetup setup = MakeSetup(GetParam(), t);
    ModelOptions o = setup.options;
    o.vocab_size = 4099;  // does not divide by 2 or 4
    HostAllocator host;
    auto piece = Build(o, host, &setup.groups->tensor());
    auto whole = Build(Whole(o), host);
    piece->InitializeParameters(kSeed);
    whole->InitializeParameters(kSeed);
    const int64_t n = kBatch * o.seq_len;
    const auto vocab = static_cast<int32_t>(o.vocab_size);
    const std::vector<int32_t> tokens = model::testing::RandomTokens(n, vocab, 7);
    const std::vector<int32_t> targets = model::testing::RandomTokens(n, vocab, 8);
    Result<double> piece_loss =
        piece->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len);
    Result<double> whole_loss =
        whole->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len);
    ASSERT_TRUE(piece_loss.ok()) << piece_loss.status().ToString();
    ASSERT_TRUE(whole_loss.ok()) << whole_loss.status().ToString();
    EXPECT_LE(std::abs(*piece_loss - *whole_loss), 1e-6 * std::abs(*whole_loss));
    const int64_t columns =
        piece->registry().parameter(*piece->registry().Find("lm_head.weight")).shape.dim(0);
    const int64_t logits_saved = n * (o.vocab_size - columns) * static_cast<int64_t>(sizeof(float));
    const int64_t whole_peak = whole->last_peak_activation_bytes();
    const int64_t piece_peak = piece->last_peak_activation_bytes();
    EXPECT_GE(whole_peak - piece_peak, logits_saved) << whole_peak << " vs " << piece_peak;
    if (TestWorld().rank() == 0) {
      std::printf("[ %s tp %d vocab %lld ] peak activation bytes %lld, whole model %lld\n",
                  std::string(model::FamilyName(GetParam())).c_str(), t,
                  static_cast<long long>(o.vocab_size), static_cast<long long>(piece_peak),
                  static_cast<long long>(whole_peak));
    }
  }
}

TEST_P(TensorParallel, TwoAllReducesPerBlockInEachDirectionAndNoLogitsGathered) {
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    TensorSetup setup = MakeSetup(GetParam(), t);
    const ModelOptions& o = setup.options;
    HostAllocator host;
    auto piece = Build(o, host, &setup.groups->tensor());
    piece->InitializeParameters(kSeed);
    const int64_t n = kBatch * o.seq_len;
    const auto vocab = static_cast<int32_t>(o.vocab_size);
    const std::vector<int32_t> tokens = model::testing::RandomTokens(n, vocab, 7);
    const std::vector<int32_t> targets = model::testing::RandomTokens(n, vocab, 8);
    const uint64_t activation_bytes = static_cast<uint64_t>(n * o.d_model) * sizeof(float);
    const std::string root = GetParam() == Family::kGpt2 ? "transformer.h." : "model.layers.";
    const std::string attn = GetParam() == Family::kGpt2 ? ".attn" : ".self_attn";

    TraceRecorder::Global().Enable();
    for (const bool backward : {false, true}) {
      SCOPED_TRACE(backward ? "forward and backward" : "forward only");
      TraceRecorder::Global().Clear();
      if (backward) {
        ASSERT_TRUE(piece->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len).ok());
      } else {
        ASSERT_TRUE(piece->ForwardLoss(tokens.data(), targets.data(), kBatch, o.seq_len).ok());
      }
      uint64_t g_bytes = 0;
      uint64_t f_bytes = 0;
      uint64_t ce_bytes = 0;
      uint64_t all_bytes = 0;
      const std::map<std::string, int> g = CommEvents("tp.g ", &g_bytes);
      const std::map<std::string, int> f = CommEvents("tp.f ", &f_bytes);
      const std::map<std::string, int> ce = CommEvents("tp.ce.", &ce_bytes);
      (void)CommEvents("", &all_bytes);
      // The tensor collectives, and nothing else, on the comm lane: none of them the logits'.
      EXPECT_EQ(all_bytes, g_bytes + f_bytes + ce_bytes);
      // The vocabulary-parallel loss: an all-gather of every rank's [rows] log-sum-exps and an
      // all-reduce of the [rows] target logits, each pass.
      const std::map<std::string, int> ce_expected = {{"tp.ce.lse lm_head", 1},
                                                      {"tp.ce.target lm_head", 1}};
      EXPECT_EQ(ce, ce_expected);
      EXPECT_EQ(ce_bytes, static_cast<uint64_t>(t + 1) * n * sizeof(float));
      std::map<std::string, int> per_block;
      for (int64_t layer = 0; layer < o.n_layer; ++layer) {
        per_block[root + std::to_string(layer) + attn] = 1;
        per_block[root + std::to_string(layer) + ".mlp"] = 1;
      }
      std::map<std::string, int> g_expected;
      std::map<std::string, int> f_expected;
      for (const auto& [name, count] : per_block) {
        g_expected["tp.g " + name] = count;
        if (backward) f_expected["tp.f " + name] = count;
      }
      // The embedding's partial lookups summed (forward), the head's input gradient (backward).
      g_expected[GetParam() == Family::kGpt2 ? "tp.g transformer.wte" : "tp.g model.embed_tokens"] =
          1;
      if (backward) f_expected["tp.f lm_head"] = 1;
      EXPECT_EQ(g, g_expected);
      EXPECT_EQ(f, f_expected);
      EXPECT_EQ(g_bytes, (2 * o.n_layer + 1) * activation_bytes);
      EXPECT_EQ(f_bytes, backward ? (2 * o.n_layer + 1) * activation_bytes : 0);
    }
    TraceRecorder::Global().Disable();
    TraceRecorder::Global().Clear();
  }
}

INSTANTIATE_TEST_SUITE_P(Families, TensorParallel, ::testing::Values(Family::kGpt2, Family::kLlama),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return std::string(model::FamilyName(info.param));
                         });

// Llama with fewer key/value heads than tensor ranks (n_kv_head t / 2: 1 at tp 2, 2 at tp 4): a
// rank's k_proj and v_proj are the one head its query heads use, bit for bit the whole model's
// rows, each element held by the t / n_kv_head ranks of its share group; once those ranks' partial
// gradients are summed, the loss and every gradient match the whole model's (fp32 from the initial
// values within 2e-6: the first norm's weight gradient, a sum over the rows of an input gradient
// that now adds four ranks' key/value parts in another order, came to 1.1e-6 at tp 4; fp64 from
// random values within 1e-12, where any misplaced head would show), and without the sum they do
// not.
TEST(TensorParallelSharedKv, PiecesAreSharedSlicesAndGradientsMatchOnceSummed) {
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    ModelOptions shared = Options(Family::kLlama);
    shared.n_kv_head = t / 2;
    TensorSetup setup = MakeSetup(shared, t);
    const ModelOptions& o = setup.options;
    const int64_t replicas = t / o.n_kv_head;
    const int64_t rank = o.tensor_parallel_rank;
    const int64_t head_dim = o.d_model / o.n_head;
    HostAllocator host;
    auto piece = Build(o, host, &setup.groups->tensor());
    auto whole = Build(Whole(o), host);
    piece->InitializeParameters(kSeed);
    whole->InitializeParameters(kSeed);
    int kv_params = 0;
    for (const ParameterInfo& info : piece->registry().parameters()) {
      if (!info.name.ends_with("k_proj.weight") && !info.name.ends_with("v_proj.weight")) continue;
      SCOPED_TRACE(info.name + " " + info.sharding.ToString());
      ++kv_params;
      EXPECT_EQ(info.shape, Shape({head_dim, o.d_model}));
      EXPECT_TRUE(info.sharding.partial_grad);
      EXPECT_EQ(info.sharding.FirstHolder(rank), rank % replicas == 0);
      const int w = WholeIndex(*whole, info);
      const int p = static_cast<int>(&info - piece->registry().parameters().data());
      int64_t mismatched = 0;
      std::vector<float> count(static_cast<size_t>(whole->registry().parameter(w).numel), 0.0f);
      for (int64_t e = 0; e < info.numel; ++e) {
        const int64_t g = info.sharding.GlobalIndex(e);
        // Rank r's head is r / replicas: rows [head * head_dim, + head_dim).
        EXPECT_EQ(g / o.d_model / head_dim, rank / replicas);
        count[static_cast<size_t>(g)] += 1.0f;
        if (Bits(piece->ParameterValue(p, e)) != Bits(whole->ParameterValue(w, g))) ++mismatched;
      }
      EXPECT_EQ(mismatched, 0);
      ASSERT_TRUE(setup.groups->tensor()
                      .AllReduce(count.data(), count.size(), DType::kF32, ReduceOp::kSum)
                      .ok());
      EXPECT_EQ(std::count(count.begin(), count.end(), static_cast<float>(replicas)),
                static_cast<std::ptrdiff_t>(count.size()));
    }
    EXPECT_EQ(kv_params, 2 * o.n_layer);
    Report("llama shared kv f32", t, false,
           CompareOnePass<float>(setup, /*checkpointing=*/false, /*randomize=*/false, 2e-6));
    Report("llama shared kv f32 checkpointed", t, true,
           CompareOnePass<float>(setup, /*checkpointing=*/true, /*randomize=*/false, 2e-6));
    Report("llama shared kv f64 randomized", t, false,
           CompareOnePass<double>(setup, /*checkpointing=*/false, /*randomize=*/true, 1e-12));

    // Without the share group's sum a holder has only its own query heads' part.
    piece->ZeroGrads();
    const int64_t n = kBatch * o.seq_len;
    const std::vector<int32_t> tokens =
        model::testing::RandomTokens(n, static_cast<int32_t>(o.vocab_size), 7);
    ASSERT_TRUE(piece->ForwardBackward(tokens.data(), tokens.data(), kBatch, o.seq_len).ok());
    whole->ZeroGrads();
    ASSERT_TRUE(whole->ForwardBackward(tokens.data(), tokens.data(), kBatch, o.seq_len).ok());
    const int k = *piece->registry().Find("model.layers.0.self_attn.k_proj.weight");
    const ParameterInfo& info = piece->registry().parameter(k);
    const ParameterInfo& global = whole->registry().parameter(WholeIndex(*whole, info));
    double off = 0;
    double scale = 0;
    for (int64_t e = 0; e < info.numel; ++e) {
      const float a = piece->grads_data()[info.offset + e];
      const float b = whole->grads_data()[global.offset + info.sharding.GlobalIndex(e)];
      off = std::max(off, static_cast<double>(std::abs(a - b)));
      scale = std::max(scale, static_cast<double>(std::abs(b)));
    }
    EXPECT_GT(off, 0.01 * scale) << "the unsummed part should be far from the whole gradient";
  }
}

TEST(TensorParallelOptions, RefusesWhatDoesNotSplit) {
  ModelOptions o = Options(Family::kLlama);
  o.tensor_parallel_size = 8;  // n_kv_head 4: each key/value head shared by 2 ranks
  EXPECT_TRUE(model::ValidateModelOptions(o).ok());
  ModelOptions six = o;  // 12 heads, 6 key/value heads over 4 ranks: neither divides the other
  six.n_head = 12;
  six.n_kv_head = 6;
  six.d_model = 96;
  six.tensor_parallel_size = 4;
  Status status = model::ValidateModelOptions(six);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("model.n_kv_head = 6 does not split over "
                                  "tensor_parallel.autotp_size = 4"),
            std::string::npos)
      << status.ToString();
  o.tensor_parallel_size = 3;
  status = model::ValidateModelOptions(o);
  EXPECT_NE(status.message().find("n_head = 8"), std::string::npos) << status.ToString();
  o.tensor_parallel_size = 2;
  o.tensor_parallel_rank = 2;
  EXPECT_EQ(model::ValidateModelOptions(o).code(), StatusCode::kInvalidArgument);
}

TEST(TensorParallelOptions, RefusesAMissingOrWrongCommunicator) {
  ModelOptions o = Options(Family::kGpt2);
  o.tensor_parallel_size = 2;
  o.tensor_parallel_rank = 0;
  HostAllocator host;
  auto missing = Model<float>::Create(o, host, *SharedOps().ops);
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("no tensor-parallel communicator"), std::string::npos)
      << missing.status().ToString();
  // The world is not a tensor group of 2 on four ranks, nor rank 0 of it on rank 1.
  o.tensor_parallel_rank = TestWorld().rank() == 0 ? 1 : 0;
  auto wrong =
      Model<float>::Create(o, host, *SharedOps().ops, model::ModelStorage::kFlat, &TestWorld());
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("tensor group"), std::string::npos)
      << wrong.status().ToString();
}

}  // namespace
}  // namespace sluice::parallel
