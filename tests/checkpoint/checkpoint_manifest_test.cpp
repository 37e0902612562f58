// manifest.json is as protected as the shard data (docs/checkpoint_format.md, "manifest.json"):
// every field of it, edited, is refused naming the field; a duplicated key is refused naming it;
// a step directory renamed to another step and a shard file copied from another checkpoint are
// refused; a manifest reformatted by a tool still reads; a version 1 manifest (no checksums) is
// read, and a version 2 manifest relabelled version 1 is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

#include "engine/checkpoint/checkpoint_reader.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/manifest_checksum.h"
#include "runtime/durable_file.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace sluice::checkpoint {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using testing::SaveWorld;
using testing::SmallModel;
using testing::TempDir;

bool Contains(const Status& s, std::string_view text) {
  return s.message().find(text) != std::string::npos;
}

Json ReadJson(const fs::path& path) {
  Result<std::string> text = ReadWholeFile(path);
  SLUICE_CHECK(text.ok()) << text.status().ToString();
  return Json::parse(*text);
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A leaf of the manifest: its path (keys and array indices) and value.
using PathElement = std::variant<std::string, size_t>;
struct Leaf {
  std::vector<PathElement> path;
  Json value;
};

void CollectLeaves(const Json& value, std::vector<PathElement>* path, std::vector<Leaf>* out) {
  if (value.is_object() && !value.empty()) {
    for (auto it = value.begin(); it != value.end(); ++it) {
      path->push_back(it.key());
      CollectLeaves(it.value(), path, out);
      path->pop_back();
    }
  } else if (value.is_array() && !value.empty()) {
    for (size_t i = 0; i < value.size(); ++i) {
      path->push_back(i);
      CollectLeaves(value[i], path, out);
      path->pop_back();
    }
  } else {
    out->push_back({*path, value});
  }
}

Json& At(Json& root, const std::vector<PathElement>& path) {
  Json* node = &root;
  for (const PathElement& e : path) {
    node = std::holds_alternative<std::string>(e) ? &(*node)[std::get<std::string>(e)]
                                                  : &(*node)[std::get<size_t>(e)];
  }
  return *node;
}

// How the verifier names the field a leaf belongs to: its first three keys, an array being one
// field ("tensors", "world.ranks"; "config.settings.<key>").
std::string FieldName(const std::vector<PathElement>& path) {
  std::string name;
  for (size_t i = 0; i < path.size() && i < 3; ++i) {
    if (!std::holds_alternative<std::string>(path[i])) break;
    name += (name.empty() ? "" : ".") + std::get<std::string>(path[i]);
  }
  return name;
}

// A different value of the same JSON type.
Json Changed(const Json& value) {
  if (value.is_boolean()) return !value.get<bool>();
  if (value.is_number_unsigned()) return value.get<uint64_t>() + 1;
  if (value.is_number_integer()) return value.get<int64_t>() + 1;
  if (value.is_number_float()) return value.get<double>() * 2 + 1;
  if (value.is_string()) return value.get<std::string>() + "x";
  return 0;
}

class ManifestIntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SaveWorld(tmp_.path(), 3, 2, model_, 11).all_ok());
    dir_ = tmp_.path() / "step_3";
    manifest_path_ = dir_ / kManifestFileName;
    original_ = *ReadWholeFile(manifest_path_);
  }
  void Restore() { WriteText(manifest_path_, original_); }
  // Opens the checkpoint and reads a tensor of each group.
  Status OpenAndRead(const fs::path& dir) {
    auto ckpt = CheckpointReader::Open(dir);
    if (!ckpt.ok()) return ckpt.status();
    std::vector<float> out(model_[0].shape.numel());
    for (StateKind kind : {StateKind::kMasterWeights, StateKind::kExpAvg}) {
      SLUICE_RETURN_IF_ERROR((*ckpt)->ReadRange(kind, model_[0].name, 0,
                                                static_cast<int64_t>(out.size()), out.data()));
    }
    return OkStatus();
  }

  TempDir tmp_;
  std::vector<testing::TensorSpec> model_ = SmallModel();
  fs::path dir_;
  fs::path manifest_path_;
  std::string original_;
};

TEST_F(ManifestIntegrityTest, TheSavedManifestIsSealedAndBindsEveryShardFile) {
  const Json manifest = ReadJson(manifest_path_);
  EXPECT_EQ(manifest["format_version"], 2);
  ASSERT_TRUE(manifest["checksum"].is_string());
  EXPECT_TRUE(ParseChecksum(manifest["checksum"].get<std::string>()).has_value());
  EXPECT_TRUE(manifest["field_checksums"].contains("step"));
  EXPECT_TRUE(manifest["field_checksums"].contains("states.rng.seed"));
  for (const Json& rank : manifest["world"]["ranks"]) {
    for (const char* group : {"weights", "optimizer"}) {
      EXPECT_TRUE(ParseChecksum(rank["files"][group]["checksum"].get<std::string>()).has_value())
          << rank.dump();
    }
  }
  ASSERT_TRUE(OpenAndRead(dir_).ok());
  // Written back as read: the same checksum.
  Result<Manifest> read = ReadManifest(dir_);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(ManifestToJson(*read)["checksum"], manifest["checksum"]);
}

// The check the issue asks for: every field, edited, is refused with an error naming it.
TEST_F(ManifestIntegrityTest, EveryEditedFieldIsRefusedNamingIt) {
  const Json manifest = ReadJson(manifest_path_);
  std::vector<PathElement> path;
  std::vector<Leaf> leaves;
  CollectLeaves(manifest, &path, &leaves);
  ASSERT_GT(leaves.size(), 40u);
  for (const Leaf& leaf : leaves) {
    Json edited = manifest;
    At(edited, leaf.path) = Changed(leaf.value);
    WriteText(manifest_path_, edited.dump(2));
    std::string field = FieldName(leaf.path);
    // The checksums themselves: the edit is named as an edit of them.
    if (field.starts_with("field_checksums")) field = "field_checksums";
    Status s = OpenAndRead(dir_);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << field << ": " << s.ToString();
    EXPECT_TRUE(Contains(s, "field '" + field + "'")) << field << ": " << s.ToString();
    EXPECT_TRUE(Contains(s, manifest_path_.string())) << s.ToString();
  }
  Restore();
  EXPECT_TRUE(OpenAndRead(dir_).ok());
}

TEST_F(ManifestIntegrityTest, AddedAndRemovedFieldsAreNamed) {
  Json edited = ReadJson(manifest_path_);
  edited["states"]["resumed"] = true;
  edited["states"].erase("rng");
  WriteText(manifest_path_, edited.dump(2));
  Status s = OpenAndRead(dir_);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "field 'states.resumed' added")) << s.ToString();
  EXPECT_TRUE(Contains(s, "field 'states.rng.seed' removed")) << s.ToString();
}

TEST_F(ManifestIntegrityTest, ADuplicatedKeyIsRefusedNamingIt) {
  // At the top, and inside an object nested in an array.
  std::string text = original_;
  text.replace(text.find('{'), 1, "{\"step\": 3,");
  WriteText(manifest_path_, text);
  Status s = OpenAndRead(dir_);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "field 'step' appears twice")) << s.ToString();

  text = original_;
  const size_t ranks = text.find("\"rank\": 1");
  ASSERT_NE(ranks, std::string::npos);
  text.insert(ranks, "\"rank\": 1, ");
  WriteText(manifest_path_, text);
  s = OpenAndRead(dir_);
  EXPECT_TRUE(Contains(s, "field 'world.ranks[1].rank' appears twice")) << s.ToString();
}

TEST_F(ManifestIntegrityTest, DeepNestingIsRefusedBeforeItIsParsed) {
  std::string text = original_;
  text.replace(text.find('{'), 1,
               "{\"deep\": " + std::string(100000, '[') + std::string(100000, ']') + ",");
  WriteText(manifest_path_, text);
  Status s = OpenAndRead(dir_);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "nested 100001 deep")) << s.ToString();
}

TEST_F(ManifestIntegrityTest, AReformattedManifestStillReads) {
  // Another indentation and the top-level keys in reverse order: the same content.
  const Json manifest = ReadJson(manifest_path_);
  Json reordered = Json::object();
  std::vector<std::string> keys;
  for (auto it = manifest.begin(); it != manifest.end(); ++it) keys.push_back(it.key());
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) reordered[*it] = manifest[*it];
  WriteText(manifest_path_, reordered.dump(4));
  Status s = OpenAndRead(dir_);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST_F(ManifestIntegrityTest, AStepDirectoryRenamedToAnotherStepIsRefused) {
  fs::rename(dir_, tmp_.path() / "step_4");
  Status s = OpenAndRead(tmp_.path() / "step_4");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "field 'step' is 3 but the checkpoint's directory is step_4"))
      << s.ToString();
  // A copy under a name that is not a step's is fine.
  fs::rename(tmp_.path() / "step_4", tmp_.path() / "kept");
  EXPECT_TRUE(OpenAndRead(tmp_.path() / "kept").ok());
}

TEST_F(ManifestIntegrityTest, AShardFileCopiedFromAnotherCheckpointIsRefused) {
  // Step 6 of the same model and world: files of the same sizes, other values.
  ASSERT_TRUE(SaveWorld(tmp_.path(), 6, 2, model_, 12).all_ok());
  const fs::path step6 = tmp_.path() / "step_6";
  const fs::path file = step6 / "weights.rank00001.bin";
  ASSERT_EQ(fs::file_size(file), fs::file_size(dir_ / "weights.rank00001.bin"));
  fs::copy_file(dir_ / "weights.rank00001.bin", file, fs::copy_options::overwrite_existing);
  Status s = OpenAndRead(step6);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, file.string())) << s.ToString();
  EXPECT_TRUE(Contains(s, "world.ranks[1].files.weights.checksum")) << s.ToString();
  EXPECT_TRUE(Contains(s, "not the file this checkpoint was saved with")) << s.ToString();
}

// Version 1 manifests (before checksums) are read; relabelling a version 2 one as version 1 to
// skip its checks is refused.
TEST_F(ManifestIntegrityTest, VersionOneIsReadAndARelabelledVersionTwoIsNot) {
  Json relabelled = ReadJson(manifest_path_);
  relabelled["format_version"] = 1;
  WriteText(manifest_path_, relabelled.dump(2));
  Status s = OpenAndRead(dir_);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s, "field 'format_version'")) << s.ToString();
  EXPECT_TRUE(Contains(s, "the version was changed")) << s.ToString();

  Json legacy = relabelled;
  legacy.erase("checksum");
  legacy.erase("field_checksums");
  for (Json& rank : legacy["world"]["ranks"]) {
    for (auto& [group, file] : rank["files"].items()) file.erase("checksum");
  }
  WriteText(manifest_path_, legacy.dump(2));
  s = OpenAndRead(dir_);
  EXPECT_TRUE(s.ok()) << s.ToString();
  Result<Manifest> read = ReadManifest(dir_);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(read->version, kLegacyManifestVersion);
  // Written back as version 1 too, without checksums.
  EXPECT_FALSE(ManifestToJson(*read).contains("checksum"));
}

TEST(ManifestChecksumTest, CanonicalTextSortsKeysAndIgnoresLayout) {
  const Json a = Json::parse(R"({"b": [1, {"y": 2.5, "x": "é"}], "a": null})");
  const Json b = Json::parse(R"({"a":null,"b":[1,{"x":"é","y":2.5}]})");
  EXPECT_EQ(CanonicalJson(a), CanonicalJson(b));
  EXPECT_EQ(CanonicalJson(a), R"({"a":null,"b":[1,{"x":"é","y":2.5}]})");
  EXPECT_NE(CanonicalJson(a),
            CanonicalJson(Json::parse(R"({"a":null,"b":[{"x":"é","y":2.5},1]})")));
  EXPECT_EQ(ParseChecksum(FormatChecksum(0x0123456789abcdefull)), 0x0123456789abcdefull);
  EXPECT_FALSE(ParseChecksum("xxh3:0123").has_value());
  EXPECT_FALSE(ParseChecksum("crc:0123456789abcdef").has_value());
}

}  // namespace
}  // namespace sluice::checkpoint
