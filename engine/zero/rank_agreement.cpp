#include "engine/zero/rank_agreement.h"

#include <fmt/format.h>

#include <map>
#include <vector>

#include "engine/zero/word_gather.h"

namespace sluice::zero {

Status CheckSameOnAllRanks(Comm& comm, std::span<const AgreedValue> values, std::string_view what) {
  std::vector<uint64_t> mine;
  mine.reserve(values.size());
  for (const AgreedValue& v : values) mine.push_back(static_cast<uint64_t>(v.value));
  Result<std::vector<uint64_t>> all = AllGatherWords(comm, mine);
  if (!all.ok()) return Status(all.status()).WithContext(fmt::format("checking {}", what));

  const size_t n = values.size();
  std::vector<std::string> disagreements;
  for (size_t i = 0; i < n; ++i) {
    std::map<int64_t, std::vector<int>> ranks_by_value;
    for (int r = 0; r < comm.size(); ++r) {
      ranks_by_value[static_cast<int64_t>((*all)[static_cast<size_t>(r) * n + i])].push_back(r);
    }
    if (ranks_by_value.size() == 1) continue;
    std::vector<std::string> parts;
    for (const auto& [value, ranks] : ranks_by_value) {
      parts.push_back(fmt::format("{} on rank{} {}", value, ranks.size() > 1 ? "s" : "",
                                  FormatRankList(ranks)));
    }
    disagreements.push_back(fmt::format("{}: {}", values[i].key, fmt::join(parts, ", ")));
  }
  if (disagreements.empty()) return OkStatus();
  return FailedPreconditionError(
      "ranks disagree on {}: {}; start every rank with the same config and model (rank {} of {} "
      "on {})",
      what, fmt::join(disagreements, "; "), comm.rank(), comm.size(), comm.name());
}

}  // namespace sluice::zero
