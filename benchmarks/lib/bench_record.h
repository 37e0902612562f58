// What every benchmark record shares: medians of samples and a description of the machine, so
// that figures from different runs and machines can be told apart.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace sluice::bench {

// The median of `values`; 0 for none.
double Median(std::vector<double> values);

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
