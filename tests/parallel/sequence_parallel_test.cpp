// Megatron sequence parallelism on real ranks (mpirun -np 2 and 4), GPT-2 and Llama with
// grouped-query attention, at every tensor size the world allows: with the norms' partial
// gradients summed over the tensor group (ReduceSequenceParallelGrads), the loss and every
// gradient agree with the whole model's, also split into pipeline stages; each region all-gathers
// and reduce-scatters once per direction where plain tensor parallelism all-reduces, moving the
// same bytes; and at tensor size 2 the peak activation memory falls against the whole model's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/model/model.h"
#include "engine/parallel/sequence_parallel_grads.h"
#include "engine/parallel/sequence_region.h"
#include "engine/parallel/tensor_comm.h"
#include "runtime/trace.h"
#include "tests/parallel/tensor_parallel_util.h"

namespace sluice::parallel {
namespace {

ModelOptions SequenceOptions(Family family) {
  ModelOptions o = Options(family);
  o.sequence_parallel = true;
  return o;
}

// A norm's parameter (the ones sequence parallelism leaves with partial gradients).
bool IsNormParameter(const std::string& name) {
  return name.find(".ln_") != std::string::npos || name.find("layernorm") != std::string::npos ||
         name.starts_with("model.norm.");
}

struct GradientCheck {
  bool loss_as_plain = false;  // the loss bit for bit that of plain tensor parallelism
  int64_t as_plain = 0;        // parameters whose gradient is plain tensor parallelism's, bitwise
  int64_t not_partial = 0;     // parameters without partial gradients
  int64_t params = 0;
  int64_t bitwise = 0;         // parameters whose every gradient element equals the whole's
  double worst = 0;            // largest |piece - whole| / max|whole gradient of that parameter|
  double worst_partial = 1e9;  // before the sum: the smallest such difference of a partial one
};

// Every gradient of `piece` against the whole model's by global index; `partial_only` looks at
// the partial ones alone and keeps their smallest difference.
template <typename T>
void CompareGradients(const Model<T>& piece, const Model<T>& whole, double tolerance,
                      bool partial_only, GradientCheck* check) {
  for (const ParameterInfo& info : piece.registry().parameters()) {
    if (info.is_alias() || (partial_only && !info.sharding.partial_grad)) continue;
    const ParameterInfo& global = whole.registry().parameter(WholeIndex(whole, info));
    const T* mine = piece.grads_data() + info.offset;
    const T* theirs = whole.grads_data() + global.offset;
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
    if (partial_only) {
      check->worst_partial = std::min(check->worst_partial, worst);
      continue;
    }
    EXPECT_LE(worst, tolerance) << info.name << " (" << info.sharding.ToString() << ")";
    ++check->params;
    if (bitwise) ++check->bitwise;
    check->worst = std::max(check->worst, worst);
  }
}

// Replicated parameters end with the same gradient, bit for bit, on every tensor rank.
template <typename T>
void ExpectReplicatedGradientsAgree(const TensorSetup& setup, const Model<T>& piece) {
  std::vector<T> mine;
  for (const ParameterInfo& info : piece.registry().parameters()) {
    if (info.is_alias() || !info.sharding.replicated()) continue;
    mine.insert(mine.end(), piece.grads_data() + info.offset,
                piece.grads_data() + info.offset + info.numel);
  }
  Comm& tensor = setup.groups->tensor();
  std::vector<T> all(mine.size() * tensor.size());
  SLUICE_CHECK(tensor
                   .AllGather(mine.data(), all.data(), all.size(),
                              std::is_same_v<T, float> ? DType::kF32 : DType::kF64)
                   .ok());
  for (int r = 0; r < tensor.size(); ++r) {
    EXPECT_EQ(std::memcmp(all.data() + r * mine.size(), mine.data(), mine.size() * sizeof(T)), 0)
        << "tensor rank " << r << "'s replicated gradients differ from this rank's";
  }
}

// One ForwardBackward of the sequence-parallel piece and of the whole model on the same batch
// from the same values (the initial ones, or randomized ones: no zero bias, no unit norm weight).
template <typename T>
GradientCheck CompareOnePass(const TensorSetup& setup, bool checkpointing, bool randomize,
                             double tolerance) {
  ModelOptions o = setup.options;
  o.activation_checkpointing = checkpointing;
  HostAllocator host;
  auto piece = Build<T>(o, host, &setup.groups->tensor());
  ModelOptions plain_options = o;
  plain_options.sequence_parallel = false;
  auto plain = Build<T>(plain_options, host, &setup.groups->tensor());
  auto whole = Build<T>(Whole(o), host);
  if (randomize) {
    model::testing::Randomize(*whole, kSeed);
  } else {
    whole->InitializeParameters(kSeed);
  }
  CopySlices(*whole, *piece);
  CopySlices(*whole, *plain);
  const int64_t n = kBatch * o.seq_len;
  const auto vocab = static_cast<int32_t>(o.vocab_size);
  const std::vector<int32_t> tokens = model::testing::RandomTokens(n, vocab, 7);
  const std::vector<int32_t> targets = model::testing::RandomTokens(n, vocab, 8);
  Result<double> piece_loss =
      piece->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len);
  Result<double> whole_loss =
      whole->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len);
  Result<double> plain_loss =
      plain->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len);
  SLUICE_CHECK(plain_loss.ok()) << plain_loss.status().ToString();
  SLUICE_CHECK(piece_loss.ok()) << piece_loss.status().ToString();
  SLUICE_CHECK(whole_loss.ok()) << whole_loss.status().ToString();
  EXPECT_LE(std::abs(*piece_loss - *whole_loss), tolerance * std::abs(*whole_loss))
      << *piece_loss << " vs " << *whole_loss;

  GradientCheck check;
  check.loss_as_plain = SameBits(*piece_loss, *plain_loss);
  // The same ops on the same rows, but the norms' gradients, summed in two steps.
  for (const ParameterInfo& info : piece->registry().parameters()) {
    if (info.is_alias() || info.sharding.partial_grad) continue;
    ++check.not_partial;
    const T* mine = piece->grads_data() + info.offset;
    const T* theirs = plain->grads_data() + info.offset;
    if (std::memcmp(mine, theirs, static_cast<size_t>(info.numel) * sizeof(T)) == 0) {
      ++check.as_plain;
    }
  }
  // Before the sum each rank's norm gradients cover only its own tokens: far from the whole's.
  CompareGradients(*piece, *whole, tolerance, /*partial_only=*/true, &check);
  EXPECT_GT(check.worst_partial, 100 * tolerance);
  SumPartialGradients(setup, *piece);
  CompareGradients(*piece, *whole, tolerance, /*partial_only=*/false, &check);
  ExpectReplicatedGradientsAgree(setup, *piece);
  return check;
}

void Report(const std::string& what, int t, const GradientCheck& c) {
  // Two ranks add in one order whatever the collective: a row's reduce-scatter sum is its
  // all-reduce sum, and everything but the norms' gradients is plain tensor parallelism's.
  if (t == 2) {
    EXPECT_TRUE(c.loss_as_plain);
    EXPECT_EQ(c.as_plain, c.not_partial);
  }
  if (TestWorld().rank() != 0) return;
  std::printf(
      "[ %s tp %d sp ] against the whole model: %lld of %lld parameters' gradients bitwise, "
      "largest difference %.3g of the gradient's largest element (norms' partial gradients "
      "before the sum: %.3g); against plain tensor parallelism: loss %s, %lld of %lld "
      "non-norm gradients bitwise\n",
      what.c_str(), t, static_cast<long long>(c.bitwise), static_cast<long long>(c.params), c.worst,
      c.worst_partial, c.loss_as_plain ? "bitwise" : "not bitwise",
      static_cast<long long>(c.as_plain), static_cast<long long>(c.not_partial));
}

class SequenceParallel : public ::testing::TestWithParam<Family> {};

TEST_P(SequenceParallel, OnlyTheNormsHavePartialGradients) {
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    for (const bool sequence : {false, true}) {
      ModelOptions o = Options(GetParam());
      o.sequence_parallel = sequence;
      TensorSetup setup = MakeSetup(o, t);
      HostAllocator host;
      auto piece = Build(setup.options, host, &setup.groups->tensor());
      int64_t partial = 0;
      for (const ParameterInfo& info : piece->registry().parameters()) {
        EXPECT_EQ(info.sharding.partial_grad, sequence && IsNormParameter(info.name)) << info.name;
        if (info.sharding.partial_grad) {
          ++partial;
          EXPECT_TRUE(info.sharding.replicated()) << info.name;
          EXPECT_NE(info.sharding.ToString().find("partial"), std::string::npos);
        }
      }
      // Two norms per block and the final one; GPT-2's have a weight and a bias.
      const int64_t per_norm = GetParam() == Family::kGpt2 ? 2 : 1;
      EXPECT_EQ(partial, sequence ? (2 * setup.options.n_layer + 1) * per_norm : 0);
      EXPECT_EQ(PartialGradParameters(piece->registry()).size(), static_cast<size_t>(partial));
    }
  }
}

// fp32 from the initial values with and without checkpointing (within 1e-6, as plain tensor
// parallelism), fp64 on the reference backend from randomized values (within 1e-12).
TEST_P(SequenceParallel, LossAndEveryGradientMatchTheWholeModel) {
  const std::string family(model::FamilyName(GetParam()));
  for (const int t : TensorSizes()) {
    TensorSetup setup = MakeSetup(SequenceOptions(GetParam()), t);
    for (const bool checkpointing : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "tensor size " << t << (checkpointing ? ", checkpointed" : ""));
      Report(family + (checkpointing ? " f32 checkpointed" : " f32"), t,
             CompareOnePass<float>(setup, checkpointing, /*randomize=*/false, 1e-6));
    }
    SCOPED_TRACE(::testing::Message() << "tensor size " << t << ", fp64");
    Report(family + " f64 randomized", t,
           CompareOnePass<double>(setup, /*checkpointing=*/false, /*randomize=*/true, 1e-12));
  }
}

// Two pipeline stages of the sequence-parallel piece, run one after the other in this process:
// the first gathers its output rows for the next, which keeps its own rows of them; the input
// gradient goes back whole. Loss and gradients as the whole model's.
TEST_P(SequenceParallel, PipelineStagesPassWholeRows) {
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    TensorSetup setup = MakeSetup(SequenceOptions(GetParam()), t);
    ModelOptions o = setup.options;
    o.n_layer = 3;
    o.tie_embeddings = false;  // a tied head must be on the embeddings' stage
    HostAllocator host;
    auto make_stage = [&](model::ModelStage stage) {
      auto made = Model<double>::CreateStage(o, stage, host, SharedOps().For<double>(),
                                             model::ModelStorage::kFlat, &setup.groups->tensor());
      SLUICE_CHECK(made.ok()) << made.status().ToString();
      return std::move(made).value();
    };
    auto first = make_stage({0, 2});
    auto last = make_stage({2, 3});
    auto whole = Build<double>(Whole(o), host);
    model::testing::Randomize(*whole, kSeed);
    CopySlices(*whole, *first);
    CopySlices(*whole, *last);

    const int64_t n = kBatch * o.seq_len;
    const auto vocab = static_cast<int32_t>(o.vocab_size);
    const std::vector<int32_t> tokens = model::testing::RandomTokens(n, vocab, 7);
    const std::vector<int32_t> targets = model::testing::RandomTokens(n, vocab, 8);
    Device& device = *SharedOps().device;
    const size_t bytes = static_cast<size_t>(n * o.d_model) * sizeof(double);
    auto hidden = device.Allocate(bytes, MemoryCategory::kActivations);
    auto hidden_grad = device.Allocate(bytes, MemoryCategory::kActivations);
    ASSERT_TRUE(hidden.ok() && hidden_grad.ok());
    ASSERT_TRUE(first->BeginPass(true).ok());
    ASSERT_TRUE(last->BeginPass(true).ok());
    ASSERT_TRUE(first
                    ->Forward(0, {.batch = kBatch, .seq = o.seq_len, .tokens = tokens.data()},
                              hidden->data_as<double>())
                    .ok());
    ASSERT_TRUE(first->stream().Synchronize().ok());
    ASSERT_TRUE(last->Forward(0, {.batch = kBatch,
                                  .seq = o.seq_len,
                                  .hidden = hidden->data_as<double>(),
                                  .targets = targets.data()})
                    .ok());
    ASSERT_TRUE(last->Backward(0, {.loss_grad = 1.0}, hidden_grad->data_as<double>()).ok());
    ASSERT_TRUE(last->stream().Synchronize().ok());
    ASSERT_TRUE(first->Backward(0, {.hidden = hidden_grad->data_as<double>()}).ok());
    Result<std::map<int, double>> losses = last->EndPass();
    ASSERT_TRUE(losses.ok()) << losses.status().ToString();
    ASSERT_TRUE(first->EndPass().ok());
    Result<double> whole_loss =
        whole->ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len);
    ASSERT_TRUE(whole_loss.ok());
    EXPECT_LE(std::abs(losses->at(0) - *whole_loss), 1e-12 * std::abs(*whole_loss));
    SumPartialGradients(setup, *first);
    SumPartialGradients(setup, *last);
    GradientCheck check;
    CompareGradients(*first, *whole, 1e-12, /*partial_only=*/false, &check);
    CompareGradients(*last, *whole, 1e-12, /*partial_only=*/false, &check);
    EXPECT_EQ(check.params, static_cast<int64_t>(first->registry().parameters().size() +
                                                 last->registry().parameters().size()));
  }
}

// The wire bytes of a collective per rank of a ring over t ranks, times t: an all-reduce sends
// 2 (t - 1) / t of its buffer, an all-gather or reduce-scatter (t - 1) / t of the whole buffer
// (the trace's bytes).
uint64_t WireBytesTimesT(const std::string& name, uint64_t bytes, int t) {
  const bool all_reduce = name.starts_with("tp.f ") || name.starts_with("tp.g ");
  return (all_reduce ? 2 : 1) * static_cast<uint64_t>(t - 1) * bytes;
}

// The comm-lane events of the last pass, by name, with their bytes.
std::map<std::string, std::pair<int, uint64_t>> Events() {
  std::map<std::string, std::pair<int, uint64_t>> events;
  for (const TraceEvent& event : TraceRecorder::Global().Snapshot()) {
    if (event.lane != kTraceLaneComm) continue;
    auto& [count, bytes] = events[event.name];
    ++count;
    bytes += event.bytes;
  }
  return events;
}

TEST_P(SequenceParallel, AnAllGatherAndAReduceScatterForEachAllReduceAndTheSameBytes) {
  const bool gpt2 = GetParam() == Family::kGpt2;
  const std::string root = gpt2 ? "transformer.h." : "model.layers.";
  const std::string attn = gpt2 ? ".attn" : ".self_attn";
  const std::string table = gpt2 ? "transformer.wte" : "model.embed_tokens";
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    TensorSetup setup = MakeSetup(SequenceOptions(GetParam()), t);
    const ModelOptions& o = setup.options;
    ModelOptions plain_options = o;
    plain_options.sequence_parallel = false;
    HostAllocator host;
    auto sequence = Build(o, host, &setup.groups->tensor());
    auto plain = Build(plain_options, host, &setup.groups->tensor());
    sequence->InitializeParameters(kSeed);
    plain->InitializeParameters(kSeed);
    const int64_t n = kBatch * o.seq_len;
    const auto vocab = static_cast<int32_t>(o.vocab_size);
    const std::vector<int32_t> tokens = model::testing::RandomTokens(n, vocab, 7);
    const std::vector<int32_t> targets = model::testing::RandomTokens(n, vocab, 8);
    const uint64_t whole_rows = static_cast<uint64_t>(n * o.d_model) * sizeof(float);

    TraceRecorder::Global().Enable();
    for (const bool backward : {false, true}) {
      SCOPED_TRACE(backward ? "forward and backward" : "forward only");
      const auto run = [&](Model<float>& model) {
        TraceRecorder::Global().Clear();
        if (backward) {
          EXPECT_TRUE(model.ForwardBackward(tokens.data(), targets.data(), kBatch, o.seq_len).ok());
        } else {
          EXPECT_TRUE(model.ForwardLoss(tokens.data(), targets.data(), kBatch, o.seq_len).ok());
        }
        return Events();
      };
      const auto plain_events = run(*plain);
      const auto events = run(*sequence);

      std::map<std::string, std::pair<int, uint64_t>> expected;
      const int per_direction = backward ? 2 : 1;
      for (int64_t layer = 0; layer < o.n_layer; ++layer) {
        for (const std::string& sublayer : {attn, std::string(".mlp")}) {
          const std::string name = root + std::to_string(layer) + sublayer;
          // In place of g (forward) and f (backward): each once per direction, of whole rows.
          expected["tp.ag " + name] = {per_direction, per_direction * whole_rows};
          expected["tp.rs " + name] = {per_direction, per_direction * whole_rows};
          // Megatron's price for keeping only the slice between the passes: the backward gathers
          // the region's input again for the weight gradients.
          if (backward) expected["tp.regather " + name] = {1, whole_rows};
          uint64_t wire = 0;
          uint64_t plain_wire = 0;
          for (const char* op : {"tp.ag ", "tp.rs "}) {
            if (events.contains(op + name)) {
              wire += WireBytesTimesT(op + name, events.at(op + name).second, t);
            }
          }
          for (const char* op : {"tp.f ", "tp.g "}) {
            if (plain_events.contains(op + name)) {
              plain_wire += WireBytesTimesT(op + name, plain_events.at(op + name).second, t);
            }
          }
          EXPECT_EQ(wire, plain_wire) << name;
          EXPECT_EQ(plain_events.at("tp.g " + name).first, 1) << name;
          EXPECT_EQ(plain_events.contains("tp.f " + name), backward) << name;
        }
      }
      // The embeddings: Llama's reduce-scatter their lookups; GPT-2's all-reduce them, add the
      // positions to the whole rows and keep theirs (backward: the rows' gradients gathered).
      if (gpt2) {
        expected["tp.g " + table] = {1, whole_rows};
        if (backward) expected["tp.ag transformer"] = {1, whole_rows};
      } else {
        expected["tp.rs " + table] = {1, whole_rows};
        if (backward) expected["tp.ag " + table] = {1, whole_rows};
      }
      // The head's rows gathered, its input gradient reduce-scattered; the loss as before.
      expected["tp.ag lm_head"] = {1, whole_rows};
      if (backward) expected["tp.rs lm_head"] = {1, whole_rows};
      expected["tp.ce.lse lm_head"] = plain_events.at("tp.ce.lse lm_head");
      expected["tp.ce.target lm_head"] = plain_events.at("tp.ce.target lm_head");
      EXPECT_EQ(events, expected);
    }

    // The partial gradients: one all-reduce per norm (GPT-2's weight and bias lie end to end).
    TraceRecorder::Global().Clear();
    SumPartialGradients(setup, *sequence);
    const auto sums = Events();
    EXPECT_EQ(static_cast<int64_t>(sums.size()), 2 * o.n_layer + 1);
    for (const auto& [name, count_bytes] : sums) {
      EXPECT_TRUE(name.starts_with("tp.sp.grads ")) << name;
      EXPECT_EQ(count_bytes.first, 1) << name;
      EXPECT_EQ(count_bytes.second,
                static_cast<uint64_t>((gpt2 ? 2 : 1) * o.d_model) * sizeof(float))
          << name;
    }
    TraceRecorder::Global().Disable();
    TraceRecorder::Global().Clear();
  }
}

// Peak activation bytes of one ForwardBackward (the pass's activation meter), for one batch.
int64_t PeakActivations(const ModelOptions& options, Comm* tensor, int64_t batch) {
  HostAllocator host;
  auto model = Build(options, host, tensor);
  model->InitializeParameters(kSeed);
  const int64_t n = batch * options.seq_len;
  const auto vocab = static_cast<int32_t>(options.vocab_size);
  const std::vector<int32_t> tokens = model::testing::RandomTokens(n, vocab, 7);
  const std::vector<int32_t> targets = model::testing::RandomTokens(n, vocab, 8);
  SLUICE_CHECK(model->ForwardBackward(tokens.data(), targets.data(), batch, options.seq_len).ok());
  return model->last_peak_activation_bytes();
}

// Between the regions each rank holds its slice of the rows, so activation memory falls well
// below plain tensor parallelism's, whose norms, residual stream and region inputs stay whole.
// What stays whole under sequence parallelism: per region the gathered input of the column-
// parallel projections (Linear keeps it for its weight gradient; Megatron keeps the slice and
// gathers again in the backward) and the row-parallel projection's [rows, d_model] partial sums
// (reduce-scattered in place); and the embeddings' output.
TEST_P(SequenceParallel, ActivationMemoryFalls) {
  ModelOptions base = SequenceOptions(GetParam());
  base.n_layer = 4;
  base.d_ff = 4 * base.d_model;
  base.seq_len = 64;
  const int64_t batch = 4;
  const int64_t whole = PeakActivations(Whole(base), nullptr, batch);
  for (const int t : TensorSizes()) {
    SCOPED_TRACE(::testing::Message() << "tensor size " << t);
    TensorSetup setup = MakeSetup(base, t);
    ModelOptions plain_options = setup.options;
    plain_options.sequence_parallel = false;
    const int64_t plain = PeakActivations(plain_options, &setup.groups->tensor(), batch);
    const int64_t sequence = PeakActivations(setup.options, &setup.groups->tensor(), batch);
    const double ratio = static_cast<double>(sequence) / static_cast<double>(whole);
    if (TestWorld().rank() == 0) {
      std::printf(
          "[ %s tp %d ] peak activation bytes: whole model %lld, tensor parallel %lld (%.3f), "
          "with sequence parallelism %lld (%.3f)\n",
          std::string(model::FamilyName(GetParam())).c_str(), t, static_cast<long long>(whole),
          static_cast<long long>(plain), static_cast<double>(plain) / whole,
          static_cast<long long>(sequence), ratio);
    }
    EXPECT_LT(sequence, plain);
    if (t == 2) {
      EXPECT_LE(ratio, 0.6);  // the bound
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, SequenceParallel,
                         ::testing::Values(Family::kGpt2, Family::kLlama),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return std::string(model::FamilyName(info.param));
                         });

TEST(SequenceParallelOptions, RefusesItWithoutTensorParallelism) {
  ModelOptions o = Options(Family::kGpt2);
  o.sequence_parallel = true;
  o.tensor_parallel_size = 1;
  const Status status = model::ValidateModelOptions(o);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("tensor_parallel.sequence_parallel"), std::string::npos)
      << status.ToString();
}

// A micro-batch whose tokens do not split into equal slices is refused, naming the setting; the
// next one runs.
TEST(SequenceParallelOptions, RefusesATokenCountThatDoesNotSplit) {
  for (const Family family : {Family::kGpt2, Family::kLlama}) {
    const int t = TensorSizes().back();
    TensorSetup setup = MakeSetup(SequenceOptions(family), t);
    HostAllocator host;
    auto piece = Build(setup.options, host, &setup.groups->tensor());
    piece->InitializeParameters(kSeed);
    const int64_t seq = 7;  // one sequence of 7 tokens: no split over 2 or 4 ranks
    const std::vector<int32_t> tokens = model::testing::RandomTokens(seq, 10, 7);
    Result<double> refused = piece->ForwardBackward(tokens.data(), tokens.data(), 1, seq);
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("tensor_parallel.sequence_parallel"),
              std::string::npos)
        << refused.status().ToString();
    const std::vector<int32_t> more = model::testing::RandomTokens(8, 10, 7);
    EXPECT_TRUE(piece->ForwardBackward(more.data(), more.data(), 1, 8).ok());
  }
}

}  // namespace
}  // namespace sluice::parallel
