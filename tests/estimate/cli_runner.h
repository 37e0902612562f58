// Runs the built `sluice` binary (SLUICE_BINARY) through a shell and collects its output.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace sluice::estimate::testing {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string all;  // stdout and stderr
};

// `prefix` goes before the binary (environment assignments: "env -u X Y=1").
inline RunResult RunSluice(const std::string& args, const std::string& prefix = "",
                           bool merge_stderr = true) {
  const std::string command = prefix + " " + std::string(SLUICE_BINARY) + " " + args +
                              (merge_stderr ? " 2>&1" : " 2>/dev/null");
  RunResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.out.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.all = result.out;
  return result;
}

inline std::string SourcePath(const std::string& relative) {
  return std::string(SLUICE_SOURCE_DIR) + "/" + relative;
}

}  // namespace sluice::estimate::testing
