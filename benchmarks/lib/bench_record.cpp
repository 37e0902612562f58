#include "benchmarks/lib/bench_record.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include "runtime/json_text.h"
#include "kernels/cpu/cpu_features.h"
#include "runtime/durable_file.h"

namespace sluice::bench {

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double MedianRatio(const std::vector<double>& numerator, const std::vector<double>& denominator) {
  std::vector<double> ratios;
  for (size_t i = 0; i < numerator.size() && i < denominator.size(); ++i) {
    ratios.push_back(numerator[i] / denominator[i]);
  }
  return Median(std::move(ratios));
}

std::string UtcTimestamp() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

Result<kernels::Isa> ParseIsaOption(const std::string& name) {
  if (name == "scalar") return kernels::Isa::kScalar;
  if (name == "avx2") return kernels::Isa::kAvx2;
  if (name == "avx512") return kernels::Isa::kAvx512;
  return InvalidArgumentError("--isa: '{}' is not one of scalar, avx2, avx512", name);
}

double LoadAverage() {
  double load = -1;
  std::ifstream("/proc/loadavg") >> load;
  return load;
}

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

nlohmann::json MachineJson() {
  const kernels::CpuFeatures& f = kernels::DetectCpuFeatures();
  return {{"cpu", f.model_name},
          {"vendor", f.vendor},
          {"logical_cpus", std::thread::hardware_concurrency()},
          {"avx2", f.avx2},
          {"avx512", f.avx512},
          {"avx512_bf16", f.avx512_bf16},
          {"hostname", HostName()},
          {"load_average_1m_at_start", LoadAverage()}};
}

Status PrintTableAndWriteRecord(const std::string& table, const nlohmann::json& record,
                                const std::string& json_path) {
  const bool json_to_stdout = json_path == "-";
  std::fputs(table.c_str(), json_to_stdout ? stderr : stdout);
  std::fflush(json_to_stdout ? stderr : stdout);
  if (json_path.empty()) return OkStatus();
  const std::string text = JsonText(record, 2) + "\n";
  if (json_to_stdout) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    return OkStatus();
  }
  return WriteFileAtomically(json_path, text, Durability::kUnsynced)
      .WithContext("writing the benchmark record");
}

}  // namespace sluice::bench
