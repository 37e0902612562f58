// Helpers for the data tests: a scratch directory and files built byte by byte, independently of
// the library's own writers.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace sluice::data::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "sluice_data_XXXXXX").string();
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    path_ = pattern;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void WriteBytes(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  ASSERT_TRUE(out.good()) << path;
}

inline void WriteString(const std::string& path, const std::string& text) {
  WriteBytes(path, text.data(), text.size());
}

template <typename T>
void AppendValues(std::vector<uint8_t>* bytes, const std::vector<T>& values) {
  if (values.empty()) return;
  const size_t at = bytes->size();
  bytes->resize(at + values.size() * sizeof(T));
  std::memcpy(bytes->data() + at, values.data(), values.size() * sizeof(T));
}

// An llm.c file: 256 int32 header {magic, version, count, 0...}, then `tokens` of type T.
template <typename T>
std::vector<uint8_t> LlmcBytes(int32_t magic, int32_t version, int32_t count,
                               const std::vector<T>& tokens) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  std::vector<uint8_t> bytes;
  AppendValues(&bytes, header);
  AppendValues(&bytes, tokens);
  return bytes;
}

// Deterministic printable text with enough variety that distinct windows differ.
inline std::string MakeText(size_t size, uint32_t seed = 1) {
  std::string text(size, ' ');
  uint32_t x = seed;
  for (char& c : text) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(32 + (x >> 24) % 95);
  }
  return text;
}

}  // namespace sluice::data::testing
