// Fuzzes the checkpoint manifest reader (engine/checkpoint/manifest.cpp): the input is a whole
// manifest.json, read as CheckpointReader does (ReadManifest of a step directory). An accepted
// manifest must write back (ManifestToJson) to a manifest that reads the same, and every tensor's
// element count and byte size must be computable (callers size reads by them).
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/checkpoint/manifest.h"
#include "fuzz_util.h"

namespace {

using sluice::checkpoint::Manifest;
using sluice::checkpoint::ManifestTensor;

bool ElementsFit(const ManifestTensor& t) {
  int64_t n = 1;
  for (int64_t d : t.shape.dims()) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  int64_t bytes = 0;
  return !__builtin_mul_overflow(n, static_cast<int64_t>(sluice::DTypeSize(t.dtype)), &bytes);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  sluice::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sluice::fuzz::WriteScratchFile(sluice::checkpoint::kManifestFileName,
                                 sluice::fuzz::AsText(data, size));
  sluice::Result<Manifest> manifest = sluice::checkpoint::ReadManifest(sluice::fuzz::ScratchDir());
  if (!manifest.ok()) {
    SLUICE_FUZZ_EXPECT(!manifest.status().message().empty(), "an error without a message");
    return 0;
  }
  SLUICE_FUZZ_EXPECT(manifest->ranks.size() == static_cast<size_t>(manifest->world_size),
                     "%zu ranks for world size %d", manifest->ranks.size(), manifest->world_size);
  for (const ManifestTensor& t : manifest->tensors) {
    SLUICE_FUZZ_EXPECT(ElementsFit(t), "tensor '%s' of shape %s has more elements than fit",
                       t.name.c_str(), t.shape.ToString().c_str());
    (void)t.shape.numel();
  }
  const nlohmann::ordered_json written = sluice::checkpoint::ManifestToJson(*manifest);
  const std::string text = written.dump(2);
  sluice::Result<Manifest> again =
      sluice::checkpoint::ManifestFromJson(written, sluice::fuzz::ScratchDir() / "again.json");
  SLUICE_FUZZ_EXPECT(again.ok(), "the manifest as written does not read back: %s",
                     again.status().message().c_str());
  SLUICE_FUZZ_EXPECT(sluice::checkpoint::ManifestToJson(*again).dump(2) == text,
                     "the manifest changed on a round trip");
  return 0;
}
