// Configs for the estimate tests: a small GPT-2 on the CPU device, parsed from YAML text.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "engine/config/config.h"

namespace sluice::estimate::testing {

// n_layer 4, d_model 128, 4 heads, d_ff 512, vocab 1000, seq 128, bf16, micro-batch 2, small
// buckets; `extra` is appended (more sections, or keys of top-level sections not given here).
inline std::string BaseYaml(const std::string& zero = "stage: 0", const std::string& extra = "") {
  return R"(
train_micro_batch_size_per_gpu: 2
gradient_accumulation_steps: 1
bf16: {enabled: true}
model: {family: gpt2, n_layer: 4, n_head: 4, d_model: 128, d_ff: 512, vocab_size: 1000,
        seq_len: 128}
device: {type: cpu, memory_limit: 1GiB, host_memory_limit: 4GiB}
zero_optimization: {reduce_bucket_size: 100000, allgather_bucket_size: 50000,
                    stage3_prefetch_bucket_size: 20000, stage3_param_persistence_threshold: 1000,
                    )" +
         zero + "}\n" + extra;
}

inline Config LoadYaml(const std::string& text, int world_size = 1) {
  ConfigSources sources;
  sources.env.emplace();
  sources.world_size = world_size;
  Result<Config> config = LoadConfigFromText(text, ConfigFormat::kYaml, sources);
  EXPECT_TRUE(config.ok()) << config.status().ToString() << "\n" << text;
  return config.ok() ? *config : Config{};
}

}  // namespace sluice::estimate::testing
