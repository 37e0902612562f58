// Fuzzes the safetensors reader (engine/checkpoint/safetensors_file.cpp, safetensors_format.cpp):
// the input is a whole .safetensors file. An accepted file's tensors must tile its data section
// exactly, each the size its dtype and shape say, and read back in full.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors_file.h"
#include "fuzz_util.h"

namespace {

using sluice::checkpoint::SafetensorsDTypeSize;
using sluice::checkpoint::SafetensorsFile;
using sluice::checkpoint::SafetensorsHeader;
using sluice::checkpoint::SafetensorsTensor;

// numel x dtype size, or nullopt when it does not fit (a hostile shape).
std::optional<uint64_t> TensorBytes(const SafetensorsTensor& t) {
  uint64_t bytes = SafetensorsDTypeSize(t.dtype);
  for (int64_t d : t.shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sluice::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path =
      sluice::fuzz::WriteScratchFile("model.safetensors", sluice::fuzz::AsText(data, size));
  sluice::Result<std::unique_ptr<SafetensorsFile>> file = SafetensorsFile::Open(path);
  if (!file.ok()) {
    SLUICE_FUZZ_EXPECT(!file.status().message().empty(), "an error without a message");
    return 0;
  }
  uint64_t data_start = 0;
  std::memcpy(&data_start, data, 8);
  data_start += 8;
  uint64_t cursor = 0;
  std::vector<char> buffer;
  for (const SafetensorsTensor& t : (*file)->tensors()) {
    SLUICE_FUZZ_EXPECT(t.begin == cursor && t.begin <= t.end, "tensor '%s' at [%llu, %llu)",
                       t.name.c_str(), static_cast<unsigned long long>(t.begin),
                       static_cast<unsigned long long>(t.end));
    const std::optional<uint64_t> bytes = TensorBytes(t);
    SLUICE_FUZZ_EXPECT(bytes && *bytes == t.end - t.begin,
                       "tensor '%s' shape %s does not hold its %llu bytes", t.name.c_str(),
                       t.ShapeString().c_str(), static_cast<unsigned long long>(t.end - t.begin));
    // Callers size their tensors by numel(): it must be the count the bytes hold.
    SLUICE_FUZZ_EXPECT(t.numel() >= 0 && static_cast<uint64_t>(t.numel()) ==
                                             *bytes / SafetensorsDTypeSize(t.dtype),
                       "tensor '%s' numel %lld", t.name.c_str(),
                       static_cast<long long>(t.numel()));
    buffer.resize(t.end - t.begin);
    sluice::Status read = (*file)->Read(t, buffer.data());
    SLUICE_FUZZ_EXPECT(read.ok(), "tensor '%s' does not read back: %s", t.name.c_str(),
                       read.message().c_str());
    SLUICE_FUZZ_EXPECT(buffer.empty() || std::memcmp(buffer.data(), data + data_start + t.begin,
                                                     buffer.size()) == 0,
                       "tensor '%s' read back other bytes", t.name.c_str());
    cursor = t.end;
  }
  SLUICE_FUZZ_EXPECT(data_start + cursor == size, "the tensors end at %llu of %zu bytes",
                     static_cast<unsigned long long>(data_start + cursor), size);
  (void)(*file)->Find("model.embed_tokens.weight");
  return 0;
}
