// The corpus of real DeepSpeed configs (tests/config/ds_corpus: files from public repositories,
// MANIFEST.tsv says where each came from) through the config library, as `sluice config check`
// runs it. Every file is either accepted or refused with a message that names the DeepSpeed
// feature Sluice lacks (or, for a file that is no DeepSpeed config, the key DeepSpeed would not
// take either); nothing crashes. EXPECTED.tsv stores each file's outcome, so that a change in
// what Sluice accepts shows here: a mismatch prints the line to store.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "tests/config/config_test_util.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(SLUICE_SOURCE_DIR) / "tests/config/ds_corpus";

// One line of EXPECTED.tsv: file, world size (DeepSpeed's batch rule needs the one the config was
// written for), "accepted" or the status code of the refusal, and the key the refusal names.
struct Expectation {
  std::string file;
  int world_size = 1;
  std::string outcome;  // "accepted", "unimplemented", "invalid_argument", ...
  std::string feature;  // the key the message names; empty when accepted
};

std::vector<std::vector<std::string>> ReadTsv(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    std::istringstream split(line);
    std::string field;
    while (std::getline(split, field, '\t')) fields.push_back(field);
    rows.push_back(std::move(fields));
  }
  return rows;
}

std::vector<Expectation> ReadExpectations() {
  std::vector<Expectation> out;
  for (const std::vector<std::string>& row : ReadTsv(kCorpus / "EXPECTED.tsv")) {
    EXPECT_GE(row.size(), 3u) << "EXPECTED.tsv: a short line for " << row[0];
    if (row.size() < 3) continue;
    out.push_back({row[0], std::stoi(row[1]), row[2], row.size() > 3 ? row[3] : ""});
  }
  return out;
}

std::string CodeName(const Status& status) {
  std::string name(StatusCodeName(status.code()));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return c == ' ' ? '_' : std::tolower(c); });
  return name;
}

ConfigSources SourcesFor(const Expectation& e) {
  ConfigSources sources = testing::IsolatedSources();
  sources.paths = {(kCorpus / e.file).string()};
  sources.world_size = e.world_size;
  return sources;
}

TEST(DeepSpeedCorpus, EveryFileHasProvenanceAndAnExpectation) {
  std::map<std::string, int> listed;  // 1: manifest, 2: expected, 3: both
  for (const std::vector<std::string>& row : ReadTsv(kCorpus / "MANIFEST.tsv")) {
    ASSERT_EQ(row.size(), 4u) << "MANIFEST.tsv: file, repository, path, commit: " << row[0];
    EXPECT_EQ(row[3].size(), 40u) << row[0] << ": the commit is a full hash";
    listed[row[0]] |= 1;
  }
  for (const Expectation& e : ReadExpectations()) listed[e.file] |= 2;
  int files = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(kCorpus)) {
    if (entry.path().extension() != ".json") continue;
    ++files;
    EXPECT_EQ(listed[entry.path().filename().string()], 3)
        << entry.path().filename() << " needs a line in MANIFEST.tsv and in EXPECTED.tsv";
  }
  for (const auto& [file, where] : listed) {
    EXPECT_TRUE(fs::exists(kCorpus / file)) << file << " is listed but not in the corpus";
  }
  EXPECT_GE(files, 100) << "the corpus shrank";
}

TEST(DeepSpeedCorpus, EachFileIsAcceptedOrRefusedNamingTheFeature) {
  int accepted = 0;
  int refused = 0;
  for (const Expectation& e : ReadExpectations()) {
    SCOPED_TRACE(e.file);
    Result<Config> config = LoadConfig(SourcesFor(e));
    const std::string outcome = config.ok() ? "accepted" : CodeName(config.status());
    if (config.ok()) {
      ++accepted;
      // The listing and the record are what config check prints: they must work on it too.
      EXPECT_FALSE(ConfigToText(*config).empty());
      EXPECT_NO_THROW(ConfigRecordJson(*config).dump());
    } else {
      ++refused;
      const std::string& message = config.status().message();
      EXPECT_FALSE(e.feature.empty()) << "a refusal stores the key it names";
      EXPECT_NE(message.find(e.feature), std::string::npos)
          << "the message does not name " << e.feature << ": " << message;
      // A key Sluice lacks is reported as such, never as a malformed file.
      if (outcome == "unimplemented") {
        EXPECT_NE(message.find("Sluice"), std::string::npos) << message;
      }
    }
    EXPECT_EQ(outcome, e.outcome) << (config.ok() ? "" : config.status().message())
                                  << "\n  to store: " << e.file << "\t" << e.world_size << "\t"
                                  << outcome;
  }
  // The balance of the corpus as stored: changing it is a decision, not a side effect.
  EXPECT_GT(accepted, 0);
  EXPECT_GT(refused, 0);
}

// --all reaches the same verdict, and lists the key of the single-error run among its problems.
TEST(DeepSpeedCorpus, CheckAllAgreesWithTheFirstError) {
  for (const Expectation& e : ReadExpectations()) {
    SCOPED_TRACE(e.file);
    Result<ConfigCheckReport> report = CheckConfigAll(SourcesFor(e));
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    if (e.outcome == "accepted") {
      EXPECT_TRUE(report->problems.empty()) << report->problems.front().ToString();
      EXPECT_TRUE(report->config.has_value());
      continue;
    }
    ASSERT_FALSE(report->problems.empty());
    EXPECT_FALSE(report->config.has_value());
    const bool named = std::any_of(
        report->problems.begin(), report->problems.end(),
        [&](const Status& s) { return s.message().find(e.feature) != std::string::npos; });
    EXPECT_TRUE(named) << "no problem names " << e.feature;
  }
}

}  // namespace
}  // namespace sluice
