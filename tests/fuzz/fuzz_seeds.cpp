// Writes the generated part of the fuzzers' seed corpora with Sluice's own writers, so the seeds
// are real files of the current format versions: token files (token_writer.h), safetensors
// (SafetensorsWriter), shard files (WriteRankShardFiles), manifests (ManifestToJson, versions 2
// and 1) and swap headers (EncodeSwapHeader), small enough to fuzz quickly; and a libFuzzer
// dictionary of the config keys and values (the settings registry) with YAML's syntax.
//
//   fuzz_seeds OUT_DIR     -> OUT_DIR/<fuzz target>/..., OUT_DIR/config.dict
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/safetensors_writer.h"
#include "engine/checkpoint/shard_writer.h"
#include "engine/config/config_schema.h"
#include "engine/data/token_writer.h"
#include "offload/swap_format.h"
#include "runtime/logging.h"

namespace fs = std::filesystem;
using namespace sluice;

namespace {

void Check(const Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "fuzz_seeds: %s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

void WriteFile(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

fs::path Fresh(const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void TokenSeeds(const fs::path& dir) {
  WriteFile(dir / "text.txt", "Sluice trains models; \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n");
  const std::vector<int32_t> ids = {50256, 464, 2068, 7586, 21831, 18045, 625, 262, 0, 1, 50255};
  Check(data::WriteNanogptU16((dir / "nanogpt.bin").string(), ids), "nanogpt");
  Check(data::WriteLlmc((dir / "gpt2.bin").string(), ids, data::LlmcTokenKind::kGpt2), "gpt2");
  const std::vector<int32_t> llama = {128000, 9906, 1917, 0, 128255};
  Check(data::WriteLlmc((dir / "llama3.bin").string(), llama, data::LlmcTokenKind::kLlama3),
        "llama3");
}

void SafetensorsSeeds(const fs::path& dir) {
  using checkpoint::SafetensorsDType;
  using checkpoint::SafetensorsTensorSpec;
  auto write = [&](const std::string& name, const std::vector<SafetensorsTensorSpec>& specs,
                   const std::map<std::string, std::string>& metadata) {
    auto writer = checkpoint::SafetensorsWriter::Create(dir / name, specs, metadata);
    Check(writer.status(), name.c_str());
    while (const checkpoint::SafetensorsTensor* t = (*writer)->current()) {
      std::vector<uint8_t> bytes(t->end - t->begin);
      for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
      Check((*writer)->Append(bytes.data(), bytes.size()), name.c_str());
      if (bytes.empty()) break;  // an empty tensor completes without data
    }
    Check((*writer)->Finish(), name.c_str());
  };
  write("gpt2.safetensors",
        {{"wte.weight", SafetensorsDType::kF32, {8, 4}},
         {"h.0.ln_1.weight", SafetensorsDType::kBF16, {4}},
         {"h.0.attn.c_attn.bias", SafetensorsDType::kF16, {12}},
         {"empty", SafetensorsDType::kF32, {0, 3}}},
        {{"format", "pt"}, {"sluice.step", "12"}});
  write("none.safetensors", {}, {});
  std::vector<SafetensorsTensorSpec> every;
  for (const char* name : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16",
                           "I32", "U32", "F32", "F64", "I64", "U64"}) {
    every.push_back({std::string("t_") + name, *checkpoint::ParseSafetensorsDType(name), {2, 1}});
  }
  write("dtypes.safetensors", every, {{"k", "v"}});
}

void ShardSeeds(const fs::path& dir) {
  using checkpoint::ShardTensor;
  using checkpoint::StateKind;
  std::vector<float> a(24), b(10);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.25f * static_cast<float>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = -1.5f * static_cast<float>(i);
  std::vector<uint16_t> h(6, 0x3f80);
  auto tensor = [](StateKind kind, std::string name, DType dtype, Shape shape, int64_t begin,
                   int64_t end, const void* data) {
    ShardTensor t;
    t.kind = kind;
    t.name = std::move(name);
    t.dtype = dtype;
    t.shape = shape;
    t.begin = begin;
    t.end = end;
    t.data = data;
    return t;
  };
  // Rank 1 of 2: each tensor's second part, in checksum blocks of 32 bytes (several per tensor).
  const std::vector<ShardTensor> tensors = {
      tensor(StateKind::kMasterWeights, "wte.weight", DType::kF32, {8, 6}, 24, 48, a.data()),
      tensor(StateKind::kMasterWeights, "ln_f.bias", DType::kBF16, {12}, 6, 12, h.data()),
      tensor(StateKind::kExpAvg, "wte.weight", DType::kF32, {8, 6}, 24, 48, a.data()),
      tensor(StateKind::kExpAvgSq, "wte.weight", DType::kF32, {8, 6}, 38, 48, b.data()),
  };
  const fs::path scratch = Fresh(dir / "scratch");
  Check(checkpoint::WriteRankShardFiles(scratch, 1, 2, tensors, 32), "shard files");
  for (const auto& entry : fs::directory_iterator(scratch)) {
    fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  }
  fs::remove_all(scratch);
}

void ManifestSeeds(const fs::path& dir) {
  using checkpoint::Manifest;
  using checkpoint::ShardGroup;
  using checkpoint::StateKind;
  Manifest m;
  m.step = 12;
  m.world_size = 2;
  m.zero_stage = 3;
  for (int r = 0; r < 2; ++r) {
    checkpoint::ManifestRank rank;
    rank.rank = r;
    rank.files[ShardGroup::kWeights] = {checkpoint::ShardFileName(ShardGroup::kWeights, r),
                                        uint64_t{4096} + r};
    rank.files[ShardGroup::kOptimizer] = {checkpoint::ShardFileName(ShardGroup::kOptimizer, r),
                                          uint64_t{8192} + r};
    for (auto& [group, file] : rank.files) file.checksum = 0x0123456789abcdefull + r;
    m.ranks.push_back(rank);
  }
  m.tensors = {{StateKind::kMasterWeights, "wte.weight", DType::kF32, {8, 6}},
               {StateKind::kExpAvg, "wte.weight", DType::kF32, {8, 6}},
               {StateKind::kExpAvgSq, "wte.weight", DType::kF32, {8, 6}},
               {StateKind::kMasterWeights, "ln_f.bias", DType::kBF16, {12}},
               {StateKind::kMasterWeights, "scalar", DType::kF16, {}}};
  m.config = {{"zero_optimization", {{"stage", 3}}}, {"train_batch_size", 8}};
  m.states = {{"data_loader", {{"position", 96}, {"epoch", 0}}},
              {"rng", {{"seed", 1234}, {"offset", 7}}},
              {"loss_scaler", {{"scale", 65536.0}}}};
  WriteFile(dir / "manifest_v2.json", checkpoint::ManifestToJson(m).dump(2));
  Manifest v1 = m;
  v1.version = 1;
  for (auto& rank : v1.ranks) {
    for (auto& [group, file] : rank.files) file.checksum.reset();
  }
  WriteFile(dir / "manifest_v1.json", checkpoint::ManifestToJson(v1).dump(2));
}

void SwapSeeds(const fs::path& dir) {
  offload::SwapHeader h;
  h.store_id = 0x5eed;
  h.rank = 1;
  h.stripe_count = 2;
  h.stripe_index = 0;
  h.max_extents = 8;
  h.stripe_size = 1 << 20;
  h.slot_bytes = offload::SwapSlotBytes(h.max_extents);
  h.data_offset = offload::SwapDataOffset(h.slot_bytes);
  h.capacity = uint64_t{4} << 20;
  offload::SwapExtentRecord e;
  e.name = "exp_avg.rank1.part0";
  e.capacity = 1 << 16;
  e.length = 1000;
  e.checksum = 0xfeed;
  e.flags = offload::kSwapExtentWritten | offload::kSwapExtentChecksummed;
  e.checksum_chunk_shift = 16;
  auto slot = [&](uint64_t generation, int extents) {
    offload::SwapHeader s = h;
    s.generation = generation;
    for (int i = 0; i < extents; ++i) {
      offload::SwapExtentRecord r = e;
      r.name += std::to_string(i);
      r.offset = static_cast<uint64_t>(i) * e.capacity;
      s.extents.push_back(r);
    }
    std::vector<std::byte> bytes = offload::EncodeSwapHeader(s);
    bytes.resize(h.slot_bytes);
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  WriteFile(dir / "two_slots.swp", slot(3, 3) + slot(2, 2));
  WriteFile(dir / "empty_table.swp", slot(1, 0));
  WriteFile(dir / "slot_b_newer.swp", slot(4, 1) + slot(5, 4));
}

// Config keys and values for the YAML and JSON fuzzers, with the syntax that composes them.
void ConfigDict(const fs::path& path) {
  std::set<std::string> tokens = {
      "---", "...", ": ", "- ", "[", "]", "{", "}", ", ", "&a ", "*a", "<<: ", "!!str ",
      "!!int ", "!!float ", "!!binary ", "!!map", "!!seq", "? ", "|\n", ">-\n", "'", "\"",
      "# ", "\\t", "\\u00e9", "\\ud800", "~", "null", "true", "false", "yes", "no", "on", "off",
      ".inf", "-.inf", ".nan", "0x1F", "0o17", "1e308", "1e-320", "-0", "9223372036854775807",
      "9223372036854775808", "18446744073709551616", "auto", "%YAML 1.2", "%TAG ! tag:x,2024:"};
  for (const SettingSpec& spec : ConfigRegistry().settings()) {
    std::string_view path = spec.path;
    size_t start = 0;
    while (start <= path.size()) {
      const size_t dot = path.find('.', start);
      tokens.insert(std::string(path.substr(start, dot - start)));
      if (dot == std::string_view::npos) break;
      start = dot + 1;
    }
    for (const std::string& value : spec.allowed) tokens.insert(value);
  }
  std::ofstream out(path, std::ios::trunc);
  for (const std::string& t : tokens) {
    out << '"';
    for (char c : t) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out << '\\' << c;
      } else if (u < 0x20 || u >= 0x7f) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "\\x%02x", u);
        out << hex;
      } else {
        out << c;
      }
    }
    out << "\"\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR\n");
    return 2;
  }
  SetLogLevel(LogLevel::kWarn);
  const fs::path out = argv[1];
  TokenSeeds(Fresh(out / "fuzz_token_file"));
  SafetensorsSeeds(Fresh(out / "fuzz_safetensors"));
  ShardSeeds(Fresh(out / "fuzz_shard_file"));
  ManifestSeeds(Fresh(out / "fuzz_checkpoint_manifest"));
  SwapSeeds(Fresh(out / "fuzz_swap_header"));
  ConfigDict(out / "config.dict");
  return 0;
}
