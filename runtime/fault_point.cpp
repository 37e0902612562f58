#include "runtime/fault_point.h"

#include <signal.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "runtime/check.h"

namespace sluice {
namespace {

struct Fault {
  std::string point;
  int rank = 0;
  int hit = 1;
  int signal = SIGSTOP;
};

std::optional<Fault> ParseFault(const char* text) {
  std::vector<std::string> fields(1);
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c == ':') {
      fields.emplace_back();
    } else {
      fields.back() += *c;
    }
  }
  auto number = [](const std::string& field, int* out) {
    const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), *out);
    return error == std::errc() && end == field.data() + field.size();
  };
  Fault fault;
  if (fields.size() != 4 || fields[0].empty() || !number(fields[1], &fault.rank) ||
      !number(fields[2], &fault.hit) || fault.hit < 1 ||
      (fields[3] != "stop" && fields[3] != "kill")) {
    return std::nullopt;
  }
  fault.point = fields[0];
  fault.signal = fields[3] == "stop" ? SIGSTOP : SIGKILL;
  return fault;
}

const std::optional<Fault>& ConfiguredFault() {
  static const std::optional<Fault> fault = [] {
    const char* text = std::getenv("SLUICE_FAULT_POINT");
    if (text == nullptr) return std::optional<Fault>();
    std::optional<Fault> parsed = ParseFault(text);
    SLUICE_CHECK(parsed.has_value()) << "SLUICE_FAULT_POINT='" << text
                                     << "': expected <point>:<rank>:<hit>:<stop|kill>, e.g. "
                                        "checkpoint.rank_files_written:1:2:stop";
    return parsed;
  }();
  return fault;
}

}  // namespace

void FaultPoint(std::string_view point, int rank) {
  const std::optional<Fault>& fault = ConfiguredFault();
  if (!fault.has_value() || fault->point != point || fault->rank != rank) return;
  static std::atomic<int> hits{0};
  if (hits.fetch_add(1) + 1 != fault->hit) return;
  // A stuck rank stays stuck: the SIGCONT that Open MPI's abort sends ahead of SIGTERM and
  // SIGKILL would otherwise let it finish a collective its peers gave up on, racing the abort.
  for (;;) ::raise(fault->signal);
}

}  // namespace sluice
