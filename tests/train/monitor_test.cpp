// The tensorboard and csv_monitor writers (engine/train/monitor*.h): the events file read back
// record by record with an independent reader (tfevents_reader.h: framing, CRCs, protobuf
// fields, and one record rebuilt byte for byte), the CSV files' exact text, what a fresh and a
// resumed run do with an earlier run's files, and the config sections that enable them.
#include "engine/train/monitor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "engine/config/config.h"
#include "engine/train/monitor_csv.h"
#include "engine/train/monitor_tensorboard.h"
#include "tests/train/tfevents_reader.h"
#include "tests/train/train_test_util.h"

namespace sluice::train {
namespace {

namespace fs = std::filesystem;
using test_util::ReadTfEvents;
using test_util::TfEvent;

// An empty directory of the test's own.
std::string FreshDir(const std::string& name) {
  const std::string dir = test_util::TempPath(name);
  fs::remove_all(dir);
  return dir;
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<fs::path> EventFiles(const std::string& dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(MonitorTest, Crc32cMatchesTheCastagnoliCheckValueAndABitwiseCrc) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the standard check value of CRC-32C
  EXPECT_EQ(Crc32c(""), 0u);
  std::string data;
  for (int i = 0; i < 1000; ++i) {
    data.push_back(static_cast<char>((i * 131 + 7) & 0xFF));
    ASSERT_EQ(Crc32c(data), test_util::BitwiseCrc32c(data)) << "length " << data.size();
  }
  EXPECT_EQ(MaskedCrc32c("123456789"), test_util::BitwiseMaskedCrc32c("123456789"));
}

TEST(MonitorTest, TfRecordFramesAPayload) {
  const std::string record = TfRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(record.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(test_util::LoadLittleEndian(std::string_view(record).substr(8, 4)),
            test_util::BitwiseMaskedCrc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(test_util::LoadLittleEndian(std::string_view(record).substr(15, 4)),
            test_util::BitwiseMaskedCrc32c("abc"));
}

TEST(MonitorTest, TensorBoardFileHoldsEveryScalar) {
  const std::string dir = FreshDir("tb") + "/job";  // made with its parents
  const double before = static_cast<double>(std::time(nullptr)) - 1;
  Result<std::unique_ptr<TensorBoardMonitor>> monitor = TensorBoardMonitor::Open(dir, std::nullopt);
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  const std::vector<MonitorEvent> first = {{"Train/Samples/train_loss", 5.25, 8},
                                           {"Train/Samples/lr", 3e-4, 8}};
  const std::vector<MonitorEvent> second = {{"Train/Samples/train_loss", 4.0625, 16},
                                            {"Train/Samples/lr", 6e-4, 16},
                                            {"Train/Samples/grad_norm", 1e300, 16}};
  ASSERT_TRUE((*monitor)->Write(first).ok());
  // What was written is in the file before the monitor closes (a killed run keeps it).
  EXPECT_EQ(ReadTfEvents((*monitor)->path()).size(), 2u + first.size());
  ASSERT_TRUE((*monitor)->Write(second).ok());
  const double after = static_cast<double>(std::time(nullptr)) + 1;

  const std::vector<fs::path> files = EventFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].string(), (*monitor)->path());
  // events.out.tfevents.<unix seconds>.<host name>
  const std::string name = files[0].filename().string();
  const std::string seconds = name.substr(20, name.find('.', 20) - 20);
  EXPECT_GE(std::stod(seconds), before);
  EXPECT_LE(std::stod(seconds), after);
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(name, "events.out.tfevents." + seconds + "." + host);

  const std::vector<TfEvent> events = ReadTfEvents(files[0].string());
  ASSERT_EQ(events.size(), 2u + first.size() + second.size());
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].scalars.empty());
  EXPECT_EQ(events[1].session_status, 1);  // START, at step 0: a fresh run
  EXPECT_EQ(events[1].step, 0);
  std::vector<MonitorEvent> all = first;
  all.insert(all.end(), second.begin(), second.end());
  for (size_t i = 0; i < all.size(); ++i) {
    const TfEvent& e = events[2 + i];
    ASSERT_EQ(e.scalars.size(), 1u);
    EXPECT_EQ(e.scalars[0].tag, all[i].tag);
    EXPECT_EQ(e.step, all[i].step);
    // simple_value is a float: 1e300 saturates to inf.
    EXPECT_EQ(std::bit_cast<uint32_t>(e.scalars[0].value),
              std::bit_cast<uint32_t>(static_cast<float>(all[i].value)))
        << all[i].tag;
    EXPECT_GE(e.wall_time, before);
    EXPECT_LE(e.wall_time, after);
    EXPECT_FALSE(e.file_version.has_value());
  }
  EXPECT_TRUE(std::isinf(events.back().scalars[0].value));

  // The first scalar's Event, built here from the protobuf encoding rules.
  const TfEvent& e = events[2];
  std::string value =
      "\x0a\x18"
      "Train/Samples/train_loss"
      "\x15";
  const uint32_t bits = std::bit_cast<uint32_t>(5.25f);
  for (int i = 0; i < 4; ++i) value.push_back(static_cast<char>(bits >> (8 * i)));
  const std::string summary = std::string("\x0a") + static_cast<char>(value.size()) + value;
  std::string expected = "\x09";
  const uint64_t time_bits = std::bit_cast<uint64_t>(e.wall_time);
  for (int i = 0; i < 8; ++i) expected.push_back(static_cast<char>(time_bits >> (8 * i)));
  expected += std::string("\x10\x08\x2a") + static_cast<char>(summary.size()) + summary;
  EXPECT_EQ(e.payload, expected);
}

TEST(MonitorTest, TensorBoardResumeStartsANewFileThatRestartsAfterTheCheckpoint) {
  const std::string dir = FreshDir("tb_resume");
  Result<std::unique_ptr<TensorBoardMonitor>> fresh = TensorBoardMonitor::Open(dir, std::nullopt);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  const std::vector<MonitorEvent> steps = {{"loss", 3.0, 8}, {"loss", 2.0, 16}, {"loss", 1.0, 24}};
  ASSERT_TRUE((*fresh)->Write(steps).ok());
  // Resumed from the checkpoint at sample 16 (possibly within the same second: a new name).
  Result<std::unique_ptr<TensorBoardMonitor>> resumed = TensorBoardMonitor::Open(dir, 16);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_NE((*resumed)->path(), (*fresh)->path());
  ASSERT_TRUE((*resumed)->Write(std::span(&steps[2], 1)).ok());
  ASSERT_EQ(EventFiles(dir).size(), 2u);

  const std::vector<TfEvent> events = ReadTfEvents((*resumed)->path());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  // TensorBoard keeps the earlier files' events of steps below a START's step: 8 and 16.
  EXPECT_EQ(events[1].session_status, 1);
  EXPECT_EQ(events[1].step, 17);
  EXPECT_EQ(events[2].step, 24);
  EXPECT_EQ(ReadTfEvents((*fresh)->path()).size(), 2u + steps.size());
}

TEST(MonitorTest, CsvFilesHaveDeepSpeedsNamesHeaderAndRows) {
  const std::string dir = FreshDir("csv") + "/job";
  Result<std::unique_ptr<CsvMonitor>> monitor = CsvMonitor::Open(dir, std::nullopt);
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  ASSERT_TRUE((*monitor)
                  ->Write(std::vector<MonitorEvent>{{"Train/Samples/train_loss", 5.5, 8},
                                                    {"Train/Samples/lr", 1e-05, 8}})
                  .ok());
  // Rows reach the file as they are written.
  EXPECT_EQ(ReadText(dir + "/Train_Samples_train_loss.csv"), "step,train_loss\n8,5.5\n");
  ASSERT_TRUE((*monitor)
                  ->Write(std::vector<MonitorEvent>{{"Train/Samples/train_loss", 4.0, 16},
                                                    {"Train/Samples/lr", 2e-05, 16},
                                                    {"Eval loss", 0.1, 16}})
                  .ok());
  EXPECT_EQ(ReadText(dir + "/Train_Samples_train_loss.csv"), "step,train_loss\n8,5.5\n16,4.0\n");
  EXPECT_EQ(ReadText(dir + "/Train_Samples_lr.csv"), "step,lr\n8,1e-05\n16,2e-05\n");
  EXPECT_EQ(ReadText(dir + "/Eval_loss.csv"), "step,Eval loss\n16,0.1\n");
}

TEST(MonitorTest, CsvValuesAreWrittenAsPythonWritesFloats) {
  EXPECT_EQ(CsvMonitor::FormatValue(2.0), "2.0");
  EXPECT_EQ(CsvMonitor::FormatValue(65536.0), "65536.0");
  EXPECT_EQ(CsvMonitor::FormatValue(0.1), "0.1");
  EXPECT_EQ(CsvMonitor::FormatValue(1e-05), "1e-05");
  EXPECT_EQ(CsvMonitor::FormatValue(1e16), "1e+16");
  EXPECT_EQ(CsvMonitor::FormatValue(5.4321987654321), "5.4321987654321");
  EXPECT_EQ(CsvMonitor::FormatValue(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(CsvMonitor::FormatValue(-std::numeric_limits<double>::infinity()), "-inf");
  EXPECT_EQ(CsvMonitor::FormatValue(std::nan("")), "nan");
  // Every double survives the text.
  for (double v : {1.0 / 3.0, 2.718281828459045, 1e-300, 123456789.123}) {
    EXPECT_EQ(std::stod(CsvMonitor::FormatValue(v)), v);
  }
}

TEST(MonitorTest, CsvResumeDropsRowsPastTheCheckpointAndAppends) {
  const std::string dir = FreshDir("csv_resume");
  fs::create_directories(dir);
  // An earlier run that went on past the checkpoint at sample 16 and was killed mid-row.
  test_util::WriteFile(dir + "/Train_Samples_train_loss.csv",
                       "step,train_loss\n8,3.0\n16,2.0\n24,1.5\n32,1.");
  test_util::WriteFile(dir + "/Train_Samples_val_loss.csv", "step,val_loss\n0,5.0\n24,1.75\n");
  test_util::WriteFile(dir + "/other.csv", "a,b\n100,2\n");  // not a monitor file
  Result<std::unique_ptr<CsvMonitor>> monitor = CsvMonitor::Open(dir, 16);
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  // Files this run does not write again are cut too.
  EXPECT_EQ(ReadText(dir + "/Train_Samples_val_loss.csv"), "step,val_loss\n0,5.0\n");
  EXPECT_EQ(ReadText(dir + "/Train_Samples_train_loss.csv"), "step,train_loss\n8,3.0\n16,2.0\n");
  ASSERT_TRUE(
      (*monitor)->Write(std::vector<MonitorEvent>{{"Train/Samples/train_loss", 1.25, 24}}).ok());
  EXPECT_EQ(ReadText(dir + "/Train_Samples_train_loss.csv"),
            "step,train_loss\n8,3.0\n16,2.0\n24,1.25\n");
  EXPECT_EQ(ReadText(dir + "/other.csv"), "a,b\n100,2\n");
}

TEST(MonitorTest, CsvFreshRunReplacesAnEarlierRunsFiles) {
  const std::string dir = FreshDir("csv_fresh");
  fs::create_directories(dir);
  test_util::WriteFile(dir + "/Train_Samples_train_loss.csv", "step,train_loss\n8,3.0\n");
  test_util::WriteFile(dir + "/Train_Samples_loss_scale.csv", "step,loss_scale\n8,65536.0\n");
  test_util::WriteFile(dir + "/other.csv", "a,b\n1,2\n");
  Result<std::unique_ptr<CsvMonitor>> monitor = CsvMonitor::Open(dir, std::nullopt);
  ASSERT_TRUE(monitor.ok()) << monitor.status().ToString();
  EXPECT_FALSE(fs::exists(dir + "/Train_Samples_loss_scale.csv"));
  ASSERT_TRUE(
      (*monitor)->Write(std::vector<MonitorEvent>{{"Train/Samples/train_loss", 2.5, 4}}).ok());
  EXPECT_EQ(ReadText(dir + "/Train_Samples_train_loss.csv"), "step,train_loss\n4,2.5\n");
  EXPECT_EQ(ReadText(dir + "/other.csv"), "a,b\n1,2\n");
}

TEST(MonitorTest, StepEventsAreDeepSpeedsThenSluicesScalars) {
  StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.lr = 1e-3;
  m.loss_scale = 1024.0;
  m.grad_norm = 0.75;
  m.tokens_per_s = 5000.0;
  auto tags = [](const std::vector<MonitorEvent>& events, int64_t samples) {
    std::vector<std::string> names;
    for (const MonitorEvent& e : events) {
      EXPECT_EQ(e.step, samples) << e.tag;
      names.push_back(e.tag);
    }
    return names;
  };
  const std::vector<MonitorEvent> f32 = StepMonitorEvents(m, 96, /*fp16=*/false);
  EXPECT_EQ(tags(f32, 96),
            (std::vector<std::string>{"Train/Samples/train_loss", "Train/Samples/lr",
                                      "Train/Samples/grad_norm", "Train/Samples/tokens_per_s"}));
  EXPECT_EQ(f32[0].value, 2.5);
  EXPECT_EQ(f32[1].value, 1e-3);
  EXPECT_EQ(f32[2].value, 0.75);
  EXPECT_EQ(f32[3].value, 5000.0);
  m.val_loss = 2.75;
  const std::vector<MonitorEvent> f16 = StepMonitorEvents(m, 96, /*fp16=*/true);
  EXPECT_EQ(tags(f16, 96),
            (std::vector<std::string>{"Train/Samples/train_loss", "Train/Samples/lr",
                                      "Train/Samples/loss_scale", "Train/Samples/grad_norm",
                                      "Train/Samples/tokens_per_s", "Train/Samples/val_loss"}));
  EXPECT_EQ(f16[2].value, 1024.0);
  EXPECT_EQ(f16[5].value, 2.75);
}

Result<Config> LoadYaml(const std::string& yaml) {
  ConfigSources sources;
  sources.env.emplace();
  return LoadConfigFromText(yaml, ConfigFormat::kYaml, sources);
}

TEST(MonitorTest, ConfigReadsDeepSpeedsMonitorSectionsWithItsDefaults) {
  Result<Config> defaults = LoadYaml("train_batch_size: 8\n");
  ASSERT_TRUE(defaults.ok()) << defaults.status().ToString();
  for (const MonitorConfig* m : {&defaults->tensorboard, &defaults->csv_monitor}) {
    EXPECT_FALSE(m->enabled);
    EXPECT_EQ(m->output_path, "");
    EXPECT_EQ(m->job_name, "DeepSpeedJobName");
    EXPECT_EQ(MonitorDirectory(*m), "DeepSpeedJobName");  // in the working directory
  }
  Result<Config> c = LoadYaml(
      "train_batch_size: 8\n"
      "tensorboard: {enabled: true, output_path: /tmp/tb/, job_name: bert}\n"
      "csv_monitor: {enabled: true, output_path: logs}\n");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->tensorboard.enabled);
  EXPECT_EQ(MonitorDirectory(c->tensorboard), "/tmp/tb/bert");
  EXPECT_TRUE(c->csv_monitor.enabled);
  EXPECT_EQ(MonitorDirectory(c->csv_monitor), "logs/DeepSpeedJobName");
  EXPECT_EQ(SamplesAfter(*c, 3), 24);

  Result<Config> typo = LoadYaml("train_batch_size: 8\ntensorboard: {enabled: true, outpath: x}\n");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("tensorboard.outpath"), std::string::npos)
      << typo.status().ToString();
}

TEST(MonitorTest, NetworkMonitorsAreRefusedSayingWhy) {
  for (const char* section : {"wandb", "comet"}) {
    Result<Config> off = LoadYaml(std::string("train_batch_size: 8\n") + section +
                                  ": {enabled: false, project: x}\n");
    EXPECT_TRUE(off.ok()) << off.status().ToString();
    Result<Config> on =
        LoadYaml(std::string("train_batch_size: 8\n") + section + ": {enabled: true}\n");
    ASSERT_FALSE(on.ok()) << section;
    EXPECT_EQ(on.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(on.status().message().find("network service"), std::string::npos)
        << on.status().ToString();
    EXPECT_NE(on.status().message().find("csv_monitor"), std::string::npos)
        << on.status().ToString();
  }
}

TEST(MonitorTest, AFolderThatCannotBeMadeNamesTheKeyAndThePath) {
  const std::string dir = FreshDir("blocked");
  fs::create_directories(dir);
  const std::string file = test_util::WriteFile(dir + "/a_file", "not a folder");
  for (const char* section : {"tensorboard", "csv_monitor"}) {
    Result<Config> c = LoadYaml(std::string("train_batch_size: 8\n") + section +
                                ": {enabled: true, output_path: " + file + ", job_name: j}\n");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Result<MonitorFanOut> monitors = OpenMonitors(*c, std::nullopt);
    ASSERT_FALSE(monitors.ok()) << section;
    EXPECT_EQ(monitors.status().code(), StatusCode::kIoError);
    const std::string message = monitors.status().ToString();
    EXPECT_NE(message.find(std::string(section) + ".output_path"), std::string::npos) << message;
    EXPECT_NE(message.find(file + "/j"), std::string::npos) << message;
  }
}

TEST(MonitorTest, NoMonitorEnabledOpensNothing) {
  Result<Config> c = LoadYaml("train_batch_size: 8\n");
  ASSERT_TRUE(c.ok());
  Result<MonitorFanOut> monitors = OpenMonitors(*c, std::nullopt);
  ASSERT_TRUE(monitors.ok()) << monitors.status().ToString();
  EXPECT_TRUE(monitors->empty());
  EXPECT_FALSE(fs::exists("DeepSpeedJobName"));
}

}  // namespace
}  // namespace sluice::train
