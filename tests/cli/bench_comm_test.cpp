// `sluice bench comm` under mpirun -np 2: every collective at four sizes (8 B to 4 KiB), each
// checked against the exact result (#wrong 0), nccl-tests' bus-bandwidth factors, and NCCL skipped
// with the reason where there is no GPU.
#include <gtest/gtest.h>

#include <set>

#include "benchmarks/lib/comm_bench.h"
#include "runtime/device/device_factory.h"

namespace sluice::bench {
namespace {

TEST(CommBenchTest, MeasuresAndChecksEveryCollective) {
  CommBenchOptions options;
  options.min_bytes = "8";
  options.max_bytes = "4K";
  options.step_factor = 8;
  options.iterations = 2;
  options.warmup = 1;
  options.dtype = "bfloat16";
  options.root = 1;
  Result<CommBenchReport> report = RunCommBench(options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const int n = report->ranks;
  ASSERT_GE(n, 1);
  std::set<std::string> seen;
  for (const CommBenchRow& row : report->rows) {
    if (row.backend != "mpi") continue;
    seen.insert(row.collective);
    EXPECT_EQ(row.wrong, 0) << row.collective << " " << row.bytes;
    EXPECT_GT(row.time_us, 0);
    EXPECT_EQ(row.bytes, row.count * 2) << "bfloat16";
    EXPECT_NEAR(row.busbw_gbps, row.algbw_gbps * BusBandwidthFactor(row.collective, n), 1e-9);
    if (row.collective == "all_gather" || row.collective == "reduce_scatter") {
      EXPECT_EQ(row.count % static_cast<uint64_t>(n), 0u);
    }
    EXPECT_EQ(row.root, row.collective == "broadcast" ? 1 : -1);
  }
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(report->rows.size(), 4u * 4u * (CudaDeviceCount() > 0 ? 2u : 1u));
  if (CudaDeviceCount() == 0) {
    ASSERT_EQ(report->skipped.size(), 1u);
    EXPECT_EQ(report->skipped[0]["backend"], "nccl");
    EXPECT_FALSE(report->skipped[0]["reason"].get<std::string>().empty());
  }
  const nlohmann::json record = CommBenchJson(*report);
  EXPECT_EQ(record["benchmark"], "comm");
  EXPECT_EQ(record["results"].size(), report->rows.size());
  EXPECT_TRUE(record["machine"].contains("cpu"));
  const std::string table = FormatCommBenchTable(*report);
  EXPECT_NE(table.find("#wrong"), std::string::npos);
  EXPECT_NE(table.find("busbw"), std::string::npos);
}

TEST(CommBenchTest, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_reduce", 4), 1.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("all_gather", 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("reduce_scatter", 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor("broadcast", 4), 1.0);
}

}  // namespace
}  // namespace sluice::bench
