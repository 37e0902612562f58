// What every benchmark record shares: timed samples and their medians, the date, and a
// description of the machine, so that figures from different runs and machines can be told apart.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "runtime/status.h"

namespace sluice::bench {

// Runs `fn` once; its wall time in seconds (steady clock).
template <typename Fn>
double ElapsedSeconds(Fn&& fn) {
  const auto start = std::chrono::steady_clock::now();
  std::forward<Fn>(fn)();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The median of `values`; 0 for none.
double Median(std::vector<double> values);

// The median over repeats of numerator[i] / denominator[i]: a ratio of neighbours in time, which
// noise from other processes disturbs far less than a ratio of two medians.
double MedianRatio(const std::vector<double>& numerator, const std::vector<double>& denominator);

// The current UTC time as a record's date, e.g. "2025-01-31T12:00:00Z".
std::string UtcTimestamp();

// An --isa value: scalar, avx2 or avx512.
Result<kernels::Isa> ParseIsaOption(const std::string& name);

// The 1-minute load average (other work on the machine while a benchmark ran, to judge its
// figures by); -1 when unknown.
double LoadAverage();

std::string HostName();

// The CPU (model, vendor, logical CPUs, AVX2 / AVX-512 / AVX512_BF16), the host name and
// load_average_1m_at_start.
nlohmann::json MachineJson();

// Prints `table`, then writes `record` to `json_path` when one is given: "-" is stdout (the
// table then goes to stderr, so that stdout stays JSON); a file is replaced atomically, so a
// failed write leaves the previous record whole.
Status PrintTableAndWriteRecord(const std::string& table, const nlohmann::json& record,
                                const std::string& json_path);

}  // namespace sluice::bench
