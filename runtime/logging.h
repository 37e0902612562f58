// Rank-aware logging with levels and subsystems.
//
//   SLUICE_LOG(kInfo, "aio", "opened {} files", n);   ->  [rank 1/4] I 12:03:04.512 aio: opened 2 files
//
// Levels are filtered per subsystem from SLUICE_LOG (e.g. "info", "warn,aio=debug,comm=trace") or
// SetLogLevel(). SLUICE_LOG_ONCE prints a message the first time its call site is reached.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <string>
#include <string_view>

#include "runtime/status.h"

namespace sluice {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

Result<LogLevel> ParseLogLevel(std::string_view name);

// Spec "LEVEL[,SUBSYSTEM=LEVEL...]". Replaces the current filter.
Status SetLogSpec(std::string_view spec);
void SetLogLevel(LogLevel level);
void SetLogLevel(std::string_view subsystem, LogLevel level);
// Identifies this process in every line; called by the communicator once ranks are known.
void SetLogRank(int rank, int world_size);
bool LogEnabled(LogLevel level, std::string_view subsystem);
void LogMessage(LogLevel level, std::string_view subsystem, std::string_view message);

}  // namespace sluice

#define SLUICE_LOG(level, subsystem, ...)                                        \
  do {                                                                           \
    if (::sluice::LogEnabled(::sluice::LogLevel::level, subsystem)) {           \
      ::sluice::LogMessage(::sluice::LogLevel::level, subsystem, fmt::format(__VA_ARGS__)); \
    }                                                                            \
  } while (0)

#define SLUICE_LOG_ONCE(level, subsystem, ...)                                   \
  do {                                                                           \
    static std::atomic<bool> sluice_logged_once_{false};                        \
    if (!sluice_logged_once_.exchange(true)) SLUICE_LOG(level, subsystem, __VA_ARGS__); \
  } while (0)
