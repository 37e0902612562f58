// Hostile and malformed configs (issue 23 point 5): whatever the bytes, reading a config gives a
// config or an error that names the file and the place; never an abort, a crash or unbounded
// memory or time. Strings that are not UTF-8 (a Latin-1 file name) are carried as bytes and
// written to JSON records with U+FFFD.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "config_test_util.h"
#include "engine/train/summary.h"
#include "runtime/json_text.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

constexpr ConfigFormat kYamlFormat = ConfigFormat::kYaml;
constexpr ConfigFormat kJsonFormat = ConfigFormat::kJson;

// The error of parsing `text` as a file named `name`; fails the test if it parsed.
std::string ParseError(std::string_view text, ConfigFormat format, std::string_view name) {
  Result<ConfigNode> r = ParseConfigText(text, format, name);
  EXPECT_FALSE(r.ok()) << name << " parsed";
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  return r.status().message();
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool Contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "hostile_config_XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    if (!path_.empty()) fs::remove_all(path_);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// --- YAML aliases, nesting, documents ---------------------------------------------------------

TEST(HostileConfigTest, YamlAliasBombIsRefusedNamingTheAlias) {
  // Nine levels of nine aliases: under 600 bytes, 9^9 nodes once expanded.
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    text += fmt::format("a{}: &a{} [", i, i);
    for (int j = 0; j < 9; ++j) text += fmt::format("{}*a{}", j ? ", " : "", i - 1);
    text += "]\n";
  }
  ASSERT_LT(text.size(), 600u);
  std::string message = ParseError(text, kYamlFormat, "bomb.yaml");
  EXPECT_TRUE(StartsWith(message, "bomb.yaml:")) << message;
  EXPECT_TRUE(Contains(message, "alias")) << message;
}

TEST(HostileConfigTest, YamlAliasInsideItsOwnAnchorIsRefused) {
  std::string message = ParseError("a: &x [1, *x]\n", kYamlFormat, "loop.yaml");
  EXPECT_TRUE(StartsWith(message, "loop.yaml:1:11:")) << message;
  EXPECT_TRUE(Contains(message, "*x")) << message;
}

TEST(HostileConfigTest, YamlAliasesWithinBoundsStillWork) {
  Result<Config> c = testing::LoadYaml(
      "offload: &offload {device: cpu, pin_memory: false}\n"
      "zero_optimization:\n"
      "  stage: 3\n"
      "  offload_optimizer: *offload\n"
      "  offload_param: *offload\n"
      "train_micro_batch_size_per_gpu: 1\n");
  // `offload` is not a config key: the alias is read, then the unknown key is reported.
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "unknown key offload")) << c.status().message();

  c = testing::LoadYaml(
      "zero_optimization:\n"
      "  stage: 3\n"
      "  offload_optimizer: &offload {device: cpu, pin_memory: false}\n"
      "  offload_param: *offload\n"
      "train_micro_batch_size_per_gpu: 1\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->zero.offload_param.device, OffloadDevice::kCpu);
  EXPECT_FALSE(c->zero.offload_param.pin_memory);
}

TEST(HostileConfigTest, DeepYamlFlowNestingIsRefused) {
  std::string text = "a: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
  std::string message = ParseError(text, kYamlFormat, "deep.yaml");
  EXPECT_TRUE(StartsWith(message, "deep.yaml:1:")) << message;
  EXPECT_TRUE(Contains(message, "nested deeper than")) << message;
}

TEST(HostileConfigTest, DeepYamlBlockNestingIsRefused) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += std::string(i, ' ') + "k:\n";
  std::string message = ParseError(text, kYamlFormat, "deep.yaml");
  EXPECT_TRUE(StartsWith(message, "deep.yaml:")) << message;
  EXPECT_TRUE(Contains(message, "nested deeper than")) << message;
}

TEST(HostileConfigTest, DeepJsonNestingIsRefused) {
  std::string text = "{\"a\": " + std::string(200000, '[') + std::string(200000, ']') + "}";
  std::string message = ParseError(text, kJsonFormat, "deep.json");
  EXPECT_TRUE(StartsWith(message, "deep.json:1:")) << message;
  EXPECT_TRUE(Contains(message, "nested deeper than")) << message;
}

TEST(HostileConfigTest, ASecondYamlDocumentIsAnError) {
  std::string message =
      ParseError("train_batch_size: 4\n---\ntrain_batch_size: 8\n", kYamlFormat, "two.yaml");
  EXPECT_TRUE(StartsWith(message, "two.yaml:2:1:")) << message;
  EXPECT_TRUE(Contains(message, "one document")) << message;
}

TEST(HostileConfigTest, ContentAfterTheYamlDocumentEndIsAnError) {
  // Even when what follows would not parse: it is refused before it is read.
  std::string message =
      ParseError("train_batch_size: 4\n...\ngarbage: [\n", kYamlFormat, "end.yaml");
  EXPECT_TRUE(StartsWith(message, "end.yaml:3:1:")) << message;
  EXPECT_TRUE(Contains(message, "one document")) << message;
}

TEST(HostileConfigTest, DocumentMarkersAroundOneDocumentAreFine) {
  Result<ConfigNode> r =
      ParseConfigText("---\ntrain_batch_size: 4\n...\n# a comment\n", kYamlFormat, "one.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->kind, ConfigNode::Kind::kMap);
  EXPECT_EQ(r->entries.size(), 1u);
}

TEST(HostileConfigTest, YamlKeysAndValuesKeepTheirPositions) {
  Result<ConfigNode> r = ParseConfigText(
      "# c\nzero_optimization:\n  stage: 3\n  list: [1, {k: v}]\n", kYamlFormat, "p.yaml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ConfigNode::Entry& zero = r->entries.at(0);
  EXPECT_EQ(zero.key_pos.line, 2);
  EXPECT_EQ(zero.key_pos.column, 1);
  const ConfigNode::Entry& stage = zero.value.entries.at(0);
  EXPECT_EQ(stage.key, "stage");
  EXPECT_EQ(stage.key_pos.line, 3);
  EXPECT_EQ(stage.key_pos.column, 3);
  EXPECT_EQ(stage.value.pos.column, 10);
  const ConfigNode& list = zero.value.entries.at(1).value;
  ASSERT_EQ(list.items.size(), 2u);
  EXPECT_EQ(list.items[1].entries.at(0).key_pos.column, 14);
}

// --- Size and time ------------------------------------------------------------------------------

TEST(HostileConfigTest, JsonKeyPositionsAreFoundInLinearTime) {
  // 100,000 keys, the last one a duplicate: rescanning the text per key took minutes.
  std::string text = "{\n";
  constexpr int kKeys = 100000;
  for (int i = 0; i < kKeys; ++i) text += " \"k" + std::to_string(i) + "\": " + "1,\n";
  text += " \"k77\": 2\n}";
  auto start = std::chrono::steady_clock::now();
  std::string message = ParseError(text, kJsonFormat, "keys.json");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(message, "keys.json:" + std::to_string(kKeys + 2) +
                         ":2: duplicate key k77 (DeepSpeed rejects duplicate keys too)");
  // Linear is well under a second even on a loaded machine; quadratic was over a minute.
  EXPECT_LT(seconds, 10.0);
}

TEST(HostileConfigTest, OversizedTextIsRefused) {
  std::string text(size_t{17} << 20, ' ');
  std::string message = ParseError(text, kYamlFormat, "big.yaml");
  EXPECT_TRUE(StartsWith(message, "big.yaml: ")) << message;
  EXPECT_TRUE(Contains(message, "larger than")) << message;
}

TEST(HostileConfigTest, OversizedFileIsRefusedBeforeItIsRead) {
  TempDir dir;
  const std::string path = (dir.path() / "huge.yaml").string();
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, off_t{64} << 30), 0);  // sparse: 64 GiB of nothing
  ::close(fd);
  Result<ConfigNode> r = ReadConfigFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(StartsWith(r.status().message(), path + ": ")) << r.status().message();
  EXPECT_TRUE(Contains(r.status().message(), "larger than")) << r.status().message();
}

// --- Bytes that are not UTF-8 -------------------------------------------------------------------

const std::string kLatin1Name = "caf\xe9.bin";  // "café.bin" in Latin-1

TEST(HostileConfigTest, Latin1InAJsonFileIsReportedAtTheByte) {
  std::string message =
      ParseError("{\"train_batch_size\": 4,\n \"data\": {\"train_path\": \"" + kLatin1Name + "\"}}",
                 kJsonFormat, "latin1.json");
  EXPECT_TRUE(StartsWith(message, "latin1.json:2:29: ")) << message;
  EXPECT_TRUE(Contains(message, "0xE9")) << message;
  EXPECT_TRUE(Contains(message, "UTF-8")) << message;
}

TEST(HostileConfigTest, Latin1PathInAYamlFileIsCarriedAsBytes) {
  for (std::string value : {kLatin1Name, "\"" + kLatin1Name + "\"", "'" + kLatin1Name + "'"}) {
    Result<Config> c = testing::LoadYaml(
        "train_micro_batch_size_per_gpu: 1\ndata:\n  train_path: " + value + "\n");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->data.train_path.value_or(""), kLatin1Name);
    std::string record;
    ASSERT_NO_THROW(record = ConfigRecordJson(*c).dump(2));
    EXPECT_TRUE(Contains(record, "caf\xEF\xBF\xBD.bin")) << record;  // U+FFFD
    EXPECT_NO_THROW(ConfigToText(*c));
  }
}

TEST(HostileConfigTest, Latin1RunDirFromTheCommandLineIsCarriedAsBytes) {
  ConfigSources sources = testing::IsolatedSources();
  sources.set_overrides = {"train_micro_batch_size_per_gpu=1", "run.dir=runs/" + kLatin1Name,
                           "data.train_path=" + kLatin1Name};
  Result<Config> c = LoadConfig(sources);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->run.dir, "runs/" + kLatin1Name);
  EXPECT_EQ(c->data.train_path.value_or(""), kLatin1Name);
  EXPECT_NO_THROW(ConfigRecordJson(*c).dump(2));

  train::TrainSummary summary;
  summary.run_dir = c->run.dir;
  std::string json;
  ASSERT_NO_THROW(json = train::SummaryToJson(summary).dump(2));
  EXPECT_TRUE(Contains(json, "runs/caf\xEF\xBF\xBD.bin")) << json;
}

TEST(HostileConfigTest, Latin1ConfigFileNameIsCarriedAsBytes) {
  TempDir dir;
  const std::string path = (dir.path() / ("caf\xe9.yaml")).string();
  std::ofstream(path) << "train_micro_batch_size_per_gpu: 1\n";
  ConfigSources sources = testing::IsolatedSources();
  sources.paths = {path};
  Result<Config> c = LoadConfig(sources);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->source_file, path);
  EXPECT_NO_THROW(ConfigRecordJson(*c).dump(2));
}

TEST(JsonTextTest, InvalidUtf8IsFoundAndReplacedByMaximalSubpart) {
  const std::string kReplacement = "\xEF\xBF\xBD";
  EXPECT_EQ(FindInvalidUtf8("plain, \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"), std::string::npos);
  EXPECT_EQ(FindInvalidUtf8(kLatin1Name), 3u);
  struct Case {
    std::string in, out;
  };
  for (const Case& c : std::vector<Case>{
           {kLatin1Name, "caf" + kReplacement + ".bin"},
           {"\xC0\x80", kReplacement + kReplacement},                     // overlong
           {"\xED\xA0\x80", kReplacement + kReplacement + kReplacement},  // surrogate
           {"\xF4\x90\x80\x80", kReplacement + kReplacement + kReplacement + kReplacement},
           {"\xE2\x82", kReplacement},         // truncated at the end
           {"\xE2\x82x", kReplacement + "x"},  // truncated before a character
           {"\x80x", kReplacement + "x"},      // a lone continuation byte
       }) {
    EXPECT_EQ(ToValidUtf8(c.in), c.out);
  }
}

TEST(JsonTextTest, ReplacementMatchesNlohmannsOwn) {
  // nlohmann's error_handler_t::replace is what JsonText uses; the records made valid up front
  // must read the same.
  const char kBytes[] = {'a',    '"',    '\x7F', '\x80', '\xBF', '\xC0', '\xC2',
                         '\xDF', '\xE0', '\xE1', '\xED', '\xEF', '\xF0', '\xF4',
                         '\xF5', '\xFF', '\x9F', '\xA0', '\x8F', '\x90'};
  std::mt19937 rng(5);
  for (int i = 0; i < 20000; ++i) {
    std::string text(rng() % 8, ' ');
    for (char& c : text) c = kBytes[rng() % sizeof(kBytes)];
    ASSERT_EQ(nlohmann::json(ToValidUtf8(text)).dump(), JsonText(nlohmann::json(text)))
        << ::testing::PrintToString(text);
  }
}

TEST(JsonTextTest, RecordsAreMadeValidInValuesAndKeys) {
  nlohmann::ordered_json record = {
      {"run_dir", "runs/" + kLatin1Name}, {"caf\xe9", {1, "\xff", {{"ok", "fine"}}}}, {"n", 3}};
  EXPECT_THROW(record.dump(), nlohmann::json::type_error);
  ReplaceInvalidUtf8(&record);
  EXPECT_EQ(
      record.dump(),
      "{\"run_dir\":\"runs/caf\xEF\xBF\xBD.bin\",\"caf\xEF\xBF\xBD\":[1,\"\xEF\xBF\xBD\",{\"ok\":"
      "\"fine\"}],\"n\":3}");
}

// The issue's fuzzer in small: byte flips, insertions and truncations of every shipped config.
// Each mutant loads or fails with an error; the record and listing of what loads are written.
TEST(HostileConfigTest, MutatedShippedConfigsNeverThrow) {
  const std::vector<std::string> kInserts = {
      "\xe9",    "\xff", "\x80", "\xc3", "\xed\xa0\x80",       "&a ", "*a", "[", "{", "\n---\n",
      "\n...\n", ": ",   "\"",   "\t",   "9999999999999999999"};
  std::mt19937 rng(23);
  int mutants = 0, loaded = 0;
  for (const fs::directory_entry& entry :
       fs::directory_iterator(fs::path(SLUICE_SOURCE_DIR) / "configs")) {
    std::string ext = entry.path().extension().string();
    if (ext != ".yaml" && ext != ".yml" && ext != ".json") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string original((std::istreambuf_iterator<char>(in)), {});
    ASSERT_FALSE(original.empty()) << entry.path();
    const ConfigFormat format = ext == ".json" ? kJsonFormat : kYamlFormat;
    for (int i = 0; i < 250; ++i) {
      std::string text = original;
      for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) {
        size_t at = rng() % text.size();
        switch (rng() % 3) {
          case 0:
            text[at] = static_cast<char>(rng() % 256);
            break;
          case 1:
            text.insert(at, kInserts[rng() % kInserts.size()]);
            break;
          default:
            text.resize(std::max<size_t>(at, 1));
            break;
        }
      }
      ++mutants;
      const std::string name = entry.path().filename().string() + "#" + std::to_string(i);
      try {
        Result<Config> c = LoadConfigFromText(text, format, testing::IsolatedSources(), name);
        if (!c.ok()) {
          EXPECT_TRUE(StartsWith(c.status().message(), name) ||
                      Contains(c.status().message(), name))
              << c.status().ToString();
          continue;
        }
        ++loaded;
        ConfigRecordJson(*c).dump(2);
        ConfigToText(*c);
      } catch (const std::exception& e) {
        ADD_FAILURE() << name << " threw " << e.what();
      }
    }
  }
  EXPECT_GE(mutants, 1000);
  EXPECT_GT(loaded, 0);
}

// --- Numbers ------------------------------------------------------------------------------------

TEST(HostileConfigTest, IntegersNarrowedToIntAreRangeChecked) {
  for (const char* text :
       {"device:\n  threads: 4294967297\n", "device:\n  index: 4294967296\n",
        "fp16:\n  hysteresis: 4294967298\n",
        "zero_optimization:\n  offload_param:\n    buffer_count: 4294967297\n",
        "zero_optimization:\n  offload_optimizer:\n    buffer_count: 4294967297\n"}) {
    Result<Config> c = testing::LoadYaml(std::string("train_micro_batch_size_per_gpu: 1\n") + text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_TRUE(StartsWith(c.status().message(), "<config>:")) << c.status().message();
    EXPECT_TRUE(Contains(c.status().message(), "is out of range")) << c.status().message();
  }
}

TEST(HostileConfigTest, IntegerBeyond64BitsIsOutOfRange) {
  Result<Config> c = testing::LoadYaml("train_batch_size: 99999999999999999999\n");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(StartsWith(c.status().message(), "<config>:1:1: train_batch_size: "))
      << c.status().message();
  EXPECT_TRUE(Contains(c.status().message(), "out of range")) << c.status().message();
}

TEST(HostileConfigTest, BatchProductThatOverflowsIsAnError) {
  Result<Config> c = testing::LoadYaml(
      "train_micro_batch_size_per_gpu: 4611686018427387904\ngradient_accumulation_steps: 4\n");
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Contains(c.status().message(), "overflows")) << c.status().message();
}

// Model sizes are bounded far past any real model, so that the products of the size rules
// (d_model^2 bucket sizes), the estimator and the model builder cannot overflow, and the
// estimator's replay of the coordinator (quadratic in the layers) cannot run for hours.
TEST(HostileConfigTest, ModelSizesPastTheirBoundsAreOutOfRange) {
  for (const char* model :
       {"{d_model: 4294967296, n_head: 1}", "{n_layer: 9223372036854775807}",
        "{seq_len: 4611686018427387904}", "{vocab_size: 4294967296}", "{n_head: 1048576}"}) {
    Result<Config> c = testing::LoadYaml(
        std::string("train_micro_batch_size_per_gpu: 1\nzero_optimization: {stage: 3}\nmodel: ") +
        model + "\n");
    ASSERT_FALSE(c.ok()) << model;
    EXPECT_TRUE(Contains(c.status().message(), "is out of range")) << c.status().message();
  }
}

}  // namespace
}  // namespace sluice
