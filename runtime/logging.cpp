#include "runtime/logging.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <mutex>
#include <unistd.h>

namespace sluice {
namespace {

struct LogState {
  std::mutex mu;
  LogLevel default_level = LogLevel::kInfo;
  std::map<std::string, LogLevel, std::less<>> subsystem_levels;
  int rank = 0;
  int world_size = 1;

  LogState() {
    if (const char* spec = std::getenv("SLUICE_LOG")) {
      Status s = ApplySpec(spec);
      if (!s.ok()) std::fprintf(stderr, "sluice: ignoring SLUICE_LOG: %s\n", s.message().c_str());
    }
  }

  Status ApplySpec(std::string_view spec) {
    LogLevel level = default_level;
    std::map<std::string, LogLevel, std::less<>> levels;
    while (!spec.empty()) {
      size_t comma = spec.find(',');
      std::string_view item = spec.substr(0, comma);
      spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
      if (item.empty()) continue;
      size_t eq = item.find('=');
      std::string_view name = eq == std::string_view::npos ? item : item.substr(eq + 1);
      Result<LogLevel> parsed = ParseLogLevel(name);
      if (!parsed.ok()) return parsed.status();
      if (eq == std::string_view::npos) {
        level = *parsed;
      } else {
        levels[std::string(item.substr(0, eq))] = *parsed;
      }
    }
    default_level = level;
    subsystem_levels = std::move(levels);
    return OkStatus();
  }
};

LogState& State() {
  static LogState state;
  return state;
}

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return 'T';
    case LogLevel::kDebug: return 'D';
    case LogLevel::kInfo: return 'I';
    case LogLevel::kWarn: return 'W';
    case LogLevel::kError: return 'E';
    case LogLevel::kOff: return '-';
  }
  return '?';
}

}  // namespace

Result<LogLevel> ParseLogLevel(std::string_view name) {
  if (name == "trace") return LogLevel::kTrace;
  if (name == "debug") return LogLevel::kDebug;
  if (name == "info") return LogLevel::kInfo;
  if (name == "warn" || name == "warning") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  if (name == "off") return LogLevel::kOff;
  return InvalidArgumentError("unknown log level '{}': use trace, debug, info, warn, error or off",
                              name);
}

Status SetLogSpec(std::string_view spec) {
  LogState& state = State();
  std::lock_guard lock(state.mu);
  return state.ApplySpec(spec);
}

void SetLogLevel(LogLevel level) {
  LogState& state = State();
  std::lock_guard lock(state.mu);
  state.default_level = level;
}

void SetLogLevel(std::string_view subsystem, LogLevel level) {
  LogState& state = State();
  std::lock_guard lock(state.mu);
  state.subsystem_levels[std::string(subsystem)] = level;
}

void SetLogRank(int rank, int world_size) {
  LogState& state = State();
  std::lock_guard lock(state.mu);
  state.rank = rank;
  state.world_size = world_size;
}

bool LogEnabled(LogLevel level, std::string_view subsystem) {
  LogState& state = State();
  std::lock_guard lock(state.mu);
  auto it = state.subsystem_levels.find(subsystem);
  LogLevel threshold = it != state.subsystem_levels.end() ? it->second : state.default_level;
  return level >= threshold && level != LogLevel::kOff;
}

void LogMessage(LogLevel level, std::string_view subsystem, std::string_view message) {
  using Clock = std::chrono::system_clock;
  auto now = Clock::now();
  std::time_t seconds = Clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&seconds, &tm);
  LogState& state = State();
  int rank, world_size;
  {
    std::lock_guard lock(state.mu);
    rank = state.rank;
    world_size = state.world_size;
  }
  std::string line = fmt::format("[rank {}/{}] {} {:02}:{:02}:{:02}.{:03} {}: {}\n", rank,
                                 world_size, LevelLetter(level), tm.tm_hour, tm.tm_min, tm.tm_sec,
                                 millis, subsystem, message);
  // One write per line so lines of concurrent threads and ranks do not interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace sluice
