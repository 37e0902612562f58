// The built `sluice estimate` of a tensor-parallel config: the grid in the headline, one tensor
// rank's figures, the JSON record's grid, tensor_parallel.autotp_size from the config, the
// composition with pipeline stages, and the refusals.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "tests/common/run_command.h"

namespace sluice::estimate {
namespace {

using test_cli::CommandResult;
using test_cli::RunSluice;
using test_cli::SourcePath;

// llama_tiny.yaml: 4 layers, 8 heads (2 key/value), micro-batch 4, ZeRO stage 2.
std::string TensorEstimate(const std::string& args) {
  return "estimate --config " + SourcePath("configs/llama_tiny.yaml") + " " + args;
}

nlohmann::json Json(const std::string& args) {
  const CommandResult r = RunSluice(TensorEstimate(args + " --json"), "", /*merge_stderr=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json();
}

TEST(EstimateTensorCliTest, PrintsTheGridAndOneTensorRanksFigures) {
  const CommandResult r = RunSluice(TensorEstimate("--tensor-parallel 2 --ranks 4"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text :
       {"Grid: data 2 x tensor 2 x pipeline 1 = 4 rank(s); tensor parallelism: each rank holds "
        "its tensor rank's pieces",
        "on this tensor rank (Ψ)", "ZeRO stage 2 on 2 data-parallel rank(s)",
        "tensor parallelism over 2 ranks", "tensor rank 0 of 2: heads, d_ff and vocabulary 1/2",
        "R*d_ff/2"}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  }
  const CommandResult plain = RunSluice(TensorEstimate("--ranks 2"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("Grid: data 2 x tensor 1 x pipeline 1 = 2 rank(s)\n"),
            std::string::npos)
      << plain.output;
}

TEST(EstimateTensorCliTest, RecordsTheGridAndHalvesTheModelStates) {
  const nlohmann::json split = Json("--tensor-parallel 2 --ranks 4");
  const nlohmann::json whole = Json("--ranks 2");
  ASSERT_FALSE(split.is_null());
  ASSERT_FALSE(whole.is_null());
  EXPECT_EQ(split["grid"]["data"], 2);
  EXPECT_EQ(split["grid"]["tensor"], 2);
  EXPECT_EQ(split["grid"]["pipeline"], 1);
  EXPECT_EQ(split["grid"]["world"], 4);
  EXPECT_EQ(split["grid"]["vocab_parallel"], true);
  EXPECT_EQ(whole["grid"]["tensor"], 1);
  EXPECT_EQ(split["settings"]["world_size"], 2);  // ZeRO's: the data-parallel ranks
  EXPECT_EQ(split["model"]["parameters"], whole["model"]["parameters"]);
  const int64_t psi = whole["model"]["parameters"].get<int64_t>();
  const int64_t mine = split["grid"]["tensor_rank_parameters"].get<int64_t>();
  EXPECT_LT(mine, psi / 2 + psi / 20);  // the norms stay whole: a little above half
  EXPECT_GT(mine, psi / 2);
  for (const char* category : {"params", "grads", "optimizer", "activations"}) {
    const auto& s = split["per_rank"]["device"]["categories"][category];
    const auto& w = whole["per_rank"]["device"]["categories"][category];
    EXPECT_LT(s.get<int64_t>(), w.get<int64_t>()) << category;
  }
  // Sequence parallelism splits the norms' and the residual stream's rows too.
  const nlohmann::json sequence =
      Json("--tensor-parallel 2 --ranks 4 --set tensor_parallel.sequence_parallel=true");
  ASSERT_FALSE(sequence.is_null());
  EXPECT_EQ(sequence["grid"]["sequence_parallel"], true);
  EXPECT_LT(sequence["per_rank"]["device"]["categories"]["activations"].get<int64_t>(),
            split["per_rank"]["device"]["categories"]["activations"].get<int64_t>());
}

TEST(EstimateTensorCliTest, TakesTheSizeFromTheConfigAndComposesWithPipelineStages) {
  const nlohmann::json from_config = Json("--set tensor_parallel.autotp_size=2 --ranks 4");
  const nlohmann::json from_flag = Json("--tensor-parallel 2 --ranks 4");
  ASSERT_FALSE(from_config.is_null());
  EXPECT_EQ(from_config["grid"], from_flag["grid"]);
  EXPECT_EQ(from_config["per_rank"], from_flag["per_rank"]);

  const CommandResult r =
      RunSluice(TensorEstimate("--tensor-parallel 2 --pipeline-stages 2 --ranks 8"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* text :
       {"Grid: data 2 x tensor 2 x pipeline 2 = 8 rank(s)",
        "Pipeline: 2 stage(s) x 2 data-parallel rank(s) x 2 tensor-parallel rank(s) = 8 ranks"}) {
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  }
  const nlohmann::json j = Json("--tensor-parallel 2 --pipeline-stages 2 --ranks 8");
  ASSERT_FALSE(j.is_null());
  EXPECT_EQ(j["pipeline"]["tensor_parallel"], 2);
  EXPECT_EQ(j["pipeline"]["data_parallel"], 2);
  EXPECT_EQ(j["grid"]["world"], 8);
}

// Fewer key/value heads than tensor ranks (2 over 4): each rank holds a copy of one head, as it
// would with 4 heads split 4 ways, so its parameters are the same while the whole model has two
// heads' k/v rows fewer per layer (4 layers x 2 projections x 2 heads x 16 x 128).
TEST(EstimateTensorCliTest, CountsSharedKeyValueHeadsOncePerRank) {
  const CommandResult r = RunSluice(TensorEstimate("--tensor-parallel 4 --ranks 4"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("a copy of the key/value head it shares with 1 other tensor rank(s)"),
            std::string::npos)
      << r.output;
  const nlohmann::json shared = Json("--tensor-parallel 4 --ranks 4");
  const nlohmann::json split = Json("--tensor-parallel 4 --ranks 4 --set model.n_kv_head=4");
  ASSERT_FALSE(shared.is_null());
  ASSERT_FALSE(split.is_null());
  EXPECT_EQ(shared["grid"]["tensor_rank_parameters"], split["grid"]["tensor_rank_parameters"]);
  EXPECT_EQ(
      split["model"]["parameters"].get<int64_t>() - shared["model"]["parameters"].get<int64_t>(),
      4 * 2 * 2 * 16 * 128);
  EXPECT_EQ(shared["per_rank"]["device"]["categories"]["activations"],
            split["per_rank"]["device"]["categories"]["activations"]);
}

TEST(EstimateTensorCliTest, RefusesWhatTheGridCannotHold) {
  CommandResult r = RunSluice(TensorEstimate("--tensor-parallel 2 --ranks 3"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--ranks 3 is not a multiple of the 2 tensor-parallel ranks "
                          "(--tensor-parallel)"),
            std::string::npos)
      << r.output;
  r = RunSluice(TensorEstimate("--tensor-parallel 2 --pipeline-stages 2 --ranks 6"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("use --ranks 8"), std::string::npos) << r.output;
  // 6 key/value heads neither split 4 ways nor divide 4 (12 heads of 8 dimensions).
  r =
      RunSluice(TensorEstimate("--tensor-parallel 4 --set model.d_model=96 --set model.n_head=12 "
                               "--set model.n_kv_head=6"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("model.n_kv_head = 6 does not split over "
                          "tensor_parallel.autotp_size = 4"),
            std::string::npos)
      << r.output;
  r = RunSluice(TensorEstimate("--set tensor_parallel.autotp_size=two"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("tensor_parallel.autotp_size = \"two\" (--set "
                          "tensor_parallel.autotp_size=two)"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace sluice::estimate
