// Shared helpers of the fuzz targets (tests/fuzz/README.md): a private scratch directory for the
// parsers that read files by path, quiet logging, and a check that aborts (a crash libFuzzer
// records) when a parser accepts an input that breaks what its callers rely on.
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "runtime/logging.h"

namespace sluice::fuzz {

// The folder the scratch directory goes in: $SLUICE_FUZZ_TMPDIR, else /dev/shm (a file system
// in memory: a hundred times the executions per second of a disk), else $TMPDIR or /tmp.
inline std::filesystem::path ScratchParent() {
  if (const char* dir = std::getenv("SLUICE_FUZZ_TMPDIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  if (access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

// A directory of this process, removed at exit.
inline const std::filesystem::path& ScratchDir() {
  static const std::filesystem::path dir = [] {
    std::string templ = (ScratchParent() / "sluice_fuzz.XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr) {
      std::perror("sluice fuzz: mkdtemp");
      std::abort();
    }
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(ScratchDir(), ec);
    });
    return std::filesystem::path(templ);
  }();
  return dir;
}

// Replaces the file `name` in the scratch directory by `bytes`; returns its path.
inline std::filesystem::path WriteScratchFile(std::string_view name, std::string_view bytes) {
  std::filesystem::path path = ScratchDir() / name;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror("sluice fuzz: open scratch file");
    std::abort();
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      std::perror("sluice fuzz: write scratch file");
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  close(fd);
  return path;
}

// Parsers log warnings for odd but accepted input; millions of them would only slow fuzzing.
inline void QuietLogs() { SetLogLevel(LogLevel::kOff); }

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace sluice::fuzz

// An invariant of accepted input: failing it is a finding (the parser let through what its
// callers cannot handle), reported like a crash.
#define SLUICE_FUZZ_EXPECT(cond, ...)                                                 \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "sluice fuzz: %s:%d: invariant failed: %s\n", __FILE__, \
                   __LINE__, #cond);                                                  \
      std::fprintf(stderr, "  " __VA_ARGS__);                                         \
      std::fprintf(stderr, "\n");                                                     \
      std::abort();                                                                   \
    }                                                                                 \
  } while (0)
