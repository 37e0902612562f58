// Runs a shell command (usually the built `sluice` binary, SLUICE_BINARY) for end-to-end tests
// and collects its exit code and output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace sluice::test_cli {

struct CommandResult {
  int exit_code = -1;  // -1: not started, or killed by a signal
  std::string output;  // stdout, and stderr unless the caller dropped it
};

inline CommandResult RunCommand(const std::string& command, bool merge_stderr = true) {
  CommandResult result;
  FILE* pipe = ::popen((command + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

#ifdef SLUICE_BINARY
// `prefix` goes before the binary (environment assignments: "env -u X Y=1").
inline CommandResult RunSluice(const std::string& args, const std::string& prefix = "",
                               bool merge_stderr = true) {
  return RunCommand(prefix + " " + std::string(SLUICE_BINARY) + " " + args, merge_stderr);
}
#endif

#ifdef SLUICE_SOURCE_DIR
inline std::string SourcePath(const std::string& relative) {
  return std::string(SLUICE_SOURCE_DIR) + "/" + relative;
}
#endif

}  // namespace sluice::test_cli
