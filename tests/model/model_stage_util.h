// Pipeline-stage helpers shared by the stage tests (model_stage_test) and the executor's
// (tests/parallel/pipeline_executor_test): random micro-batches, and a stage holding a whole
// model's values.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/model/model.h"
#include "runtime/check.h"
#include "tests/common/test_ops.h"
#include "tests/model/model_test_util.h"

namespace sluice::model::testing {

// Sequences per micro-batch.
inline constexpr int64_t kStageBatch = 2;

struct MicroBatchData {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
};

// `count` micro-batches of kStageBatch full-length sequences.
inline std::vector<MicroBatchData> MakeMicroBatches(const ModelOptions& o, int count,
                                                    uint64_t seed) {
  std::vector<MicroBatchData> out;
  const int64_t n = kStageBatch * o.seq_len;
  const auto vocab = static_cast<int32_t>(o.vocab_size);
  for (int m = 0; m < count; ++m) {
    out.push_back({RandomTokens(n, vocab, seed + 2 * m), RandomTokens(n, vocab, seed + 2 * m + 1)});
  }
  return out;
}

// `status` has `code` and a message that contains `needle`.
inline void ExpectError(const Status& status, StatusCode code, const std::string& needle) {
  EXPECT_EQ(status.code(), code) << status.ToString();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.ToString();
}

// Chunks of `whole` in one model (Model::CreateChunks) holding its values, copied by parameter
// name.
inline std::unique_ptr<Model<float>> ChunksOf(const Model<float>& whole,
                                              std::span<const ModelStage> chunks,
                                              HostAllocator& host) {
  auto model =
      Model<float>::CreateChunks(whole.options(), chunks, host, sluice::testing::OpsFor<float>());
  SLUICE_CHECK(model.ok()) << model.status().ToString();
  const auto& params = (*model)->registry().parameters();
  for (int p = 0; p < static_cast<int>(params.size()); ++p) {
    if (params[p].is_alias()) continue;
    const std::optional<int> source = whole.registry().Find(params[p].name);
    SLUICE_CHECK(source.has_value()) << params[p].name;
    for (int64_t e = 0; e < params[p].numel; ++e) {
      (*model)->SetParameterValue(p, e, whole.ParameterValue(*source, e));
    }
  }
  return std::move(model).value();
}

// A stage of `whole` holding its values.
inline std::unique_ptr<Model<float>> StageOf(const Model<float>& whole, const ModelStage& stage,
                                             HostAllocator& host) {
  return ChunksOf(whole, std::span<const ModelStage>(&stage, 1), host);
}

}  // namespace sluice::model::testing
