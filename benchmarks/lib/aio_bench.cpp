#include "benchmarks/lib/aio_bench.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "benchmarks/lib/bench_record.h"
#include "engine/config/config.h"
#include "engine/config/config_snippet.h"
#include "offload/aio_engine.h"
#include "offload/aligned_buffer.h"
#include "offload/checksum.h"
#include "offload/io_probe.h"
#include "offload/swap_store.h"
#include "runtime/durable_file.h"
#include "runtime/foreign_call.h"

namespace sluice::bench {

using offload::AioEngine;
using offload::AioFileId;
using offload::AioOptions;
using offload::AlignedBuffer;
using offload::IoOp;

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kTargetVsFio = 1.2;          // the target, large transfers
constexpr double kTargetChecksumRatio = 0.9;  // checksums on vs off
constexpr const char* kDataFile = "sluice_aio_bench.dat";
constexpr const char* kSyncFile = "sluice_aio_bench.sync.dat";
constexpr const char* kFioFile = "sluice_aio_bench.fio.dat";

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

AioFigure Summarize(std::vector<double> samples) {
  AioFigure figure;
  figure.samples = samples;
  if (samples.empty()) return figure;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  figure.median = n % 2 == 1 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
  figure.min = samples.front();
  figure.max = samples.back();
  return figure;
}

double ProcessCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// Runs `warmup` untimed and `iterations` timed passes of `volume` bytes each.
Result<AioFigure> Measure(int warmup, int iterations, uint64_t volume,
                          const std::function<Result<double>()>& pass) {
  for (int i = 0; i < warmup; ++i) SLUICE_RETURN_IF_ERROR(pass());
  std::vector<double> gbps;
  for (int i = 0; i < iterations; ++i) {
    SLUICE_ASSIGN_OR_RETURN(double seconds, pass());
    gbps.push_back(static_cast<double>(volume) / seconds / 1e9);
  }
  return Summarize(std::move(gbps));
}

// One request of `transfer` bytes at a time, each waited for, covering [0, volume).
Result<double> EnginePass(AioEngine& engine, AioFileId file, IoOp op, char* buffer,
                          uint64_t transfer, uint64_t volume) {
  const auto start = Clock::now();
  for (uint64_t at = 0; at < volume; at += transfer) {
    const uint64_t n = std::min(transfer, volume - at);
    Status status = op == IoOp::kRead ? engine.Read(file, at, buffer, n).Wait()
                                      : engine.Write(file, at, buffer, n).Wait();
    if (!status.ok()) return status;
  }
  return Seconds(start);
}

Result<double> SyncPass(int fd, const std::string& path, IoOp op, char* buffer, uint64_t transfer,
                        uint64_t volume) {
  const auto start = Clock::now();
  for (uint64_t at = 0; at < volume; at += transfer) {
    const uint64_t n = std::min(transfer, volume - at);
    for (uint64_t done = 0; done < n;) {
      const auto offset = static_cast<off_t>(at + done);
      const ssize_t got = op == IoOp::kRead ? pread(fd, buffer + done, n - done, offset)
                                            : pwrite(fd, buffer + done, n - done, offset);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        return IoError("{} of {} at offset {} failed: {}", op == IoOp::kRead ? "pread" : "pwrite",
                       path, offset, got < 0 ? internal::ErrnoText(errno) : "no progress");
      }
      done += static_cast<uint64_t>(got);
    }
  }
  return Seconds(start);
}

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

// The mount entry (device, fs type, mount point) that holds `dir`.
nlohmann::json FilesystemOf(const std::string& dir) {
  std::error_code error;
  const std::string real = std::filesystem::weakly_canonical(dir, error).string();
  std::ifstream mounts("/proc/mounts");
  std::string device, point, type, rest;
  nlohmann::json best = {{"device", "unknown"}, {"type", "unknown"}, {"mount_point", ""}};
  size_t best_length = 0;
  while (mounts >> device >> point >> type && std::getline(mounts, rest)) {
    const bool prefix = real.rfind(point, 0) == 0 &&
                        (real.size() == point.size() || point == "/" || real[point.size()] == '/');
    if (prefix && point.size() >= best_length) {
      best_length = point.size();
      best = {{"device", device}, {"type", type}, {"mount_point", point}};
    }
  }
  struct statfs fs {};
  if (statfs(dir.c_str(), &fs) == 0) {
    best["free_bytes"] = static_cast<uint64_t>(fs.f_bavail) * fs.f_bsize;
  }
  Status direct = offload::ProbeODirect(dir);
  best["o_direct"] = direct.ok() ? nlohmann::json(true) : nlohmann::json(direct.message());
  return best;
}

nlohmann::json MachineJson(const std::vector<std::string>& dirs) {
  utsname uts{};
  uname(&uts);
  struct sysinfo info {};
  sysinfo(&info);
  Status uring = offload::ProbeIoUring();
  nlohmann::json filesystems = nlohmann::json::array();
  for (const std::string& dir : dirs) {
    nlohmann::json fs = FilesystemOf(dir);
    fs["dir"] = dir;
    filesystems.push_back(fs);
  }
  return {{"hostname", HostName()},
          {"kernel", uts.release},
          {"cpu", CpuModel()},
          {"logical_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
          {"memory_bytes", static_cast<uint64_t>(info.totalram) * info.mem_unit},
          {"transparent_hugepage", ReadSmallFile("/sys/kernel/mm/transparent_hugepage/enabled")},
          {"io_uring", uring.ok() ? nlohmann::json(true) : nlohmann::json(uring.message())},
          // Other work on the machine skews I/O figures; it is recorded, not controlled.
          {"loadavg_at_start", ReadSmallFile("/proc/loadavg")},
          {"filesystems", filesystems}};
}

std::string FindInPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = dir + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// Runs fio with JSON output and returns its bandwidth in GB/s for `rw` ("read" or "write").
Result<double> RunFio(const std::string& fio, const std::vector<std::string>& args,
                      const std::string& rw) {
  int pipe_fds[2];
  SLUICE_TRY_SYS(pipe2(pipe_fds, O_CLOEXEC));
  const pid_t pid = fork();
  if (pid < 0) return IoError("fork for fio failed: {}", internal::ErrnoText(errno));
  if (pid == 0) {
    dup2(pipe_fds[1], STDOUT_FILENO);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(fio.c_str()));
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    execv(fio.c_str(), argv.data());
    _exit(127);
  }
  close(pipe_fds[1]);
  std::string output;
  char chunk[65536];
  for (;;) {
    const ssize_t n = read(pipe_fds[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    output.append(chunk, static_cast<size_t>(n));
  }
  close(pipe_fds[0]);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return IoError("fio exited with status {}", WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1);
  }
  // fio may print notices before the JSON object.
  const size_t brace = output.find('{');
  nlohmann::json parsed = nlohmann::json::parse(
      brace == std::string::npos ? std::string() : output.substr(brace), nullptr, false);
  if (parsed.is_discarded() || !parsed.contains("jobs") || parsed["jobs"].empty()) {
    return IoError("could not parse fio's JSON output");
  }
  return parsed["jobs"][0][rw]["bw_bytes"].get<double>() / 1e9;
}

std::vector<std::string> FioArgs(const std::string& file, const std::string& rw, uint64_t size) {
  return {"--name=sluice_fio",   "--filename=" + file,
          "--direct=1",          "--ioengine=io_uring",
          "--rw=" + rw,          "--bs=1M",
          "--iodepth=32",        "--size=" + std::to_string(size),
          "--output-format=json"};
}

struct Contender {
  std::string name;
  std::function<Result<double>(IoOp)> pass;  // GB/s of one pass
};

// fio against engine configurations, interleaved round by round (rotating who goes first) so
// that the load of a shared machine hits all of them alike.
nlohmann::json HeadToHeadWithFio(const std::string& dir, uint64_t size, int warmup, int rounds,
                                 bool keep, const std::vector<Contender>& engines) {
  const std::string fio = FindInPath("fio");
  if (fio.empty()) {
    return {{"available", false},
            {"reason", "fio is not installed (apt-get install fio); no fio comparison"}};
  }
  const std::string file = dir + "/" + kFioFile;
  std::string command = "fio";
  for (const std::string& a : FioArgs(file, "read|write", size)) command += " " + a;
  std::vector<Contender> contenders = {{"fio", [&](IoOp op) {
                                          const char* rw = op == IoOp::kRead ? "read" : "write";
                                          return RunFio(fio, FioArgs(file, rw, size), rw);
                                        }}};
  contenders.insert(contenders.end(), engines.begin(), engines.end());
  std::fprintf(stderr, "aio: fio write (lays out its file) ...\n");
  Status status = RunFio(fio, FioArgs(file, "write", size), "write").status();
  const size_t k = contenders.size();
  std::vector<std::vector<double>> samples[2];  // [read][contender]
  samples[0].resize(k);
  samples[1].resize(k);
  for (int round = 0; round < warmup + rounds && status.ok(); ++round) {
    for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
      for (size_t turn = 0; turn < k && status.ok(); ++turn) {
        const size_t who = (turn + static_cast<size_t>(round)) % k;
        Result<double> gbps = contenders[who].pass(op);
        if (!gbps.ok()) {
          status = gbps.status();
          break;
        }
        if (round >= warmup) samples[op == IoOp::kRead][who].push_back(*gbps);
      }
    }
  }
  if (!keep) std::filesystem::remove(file);
  if (!status.ok()) {
    return {{"available", false}, {"reason", status.message()}, {"command", command}};
  }
  nlohmann::json result = {{"available", true}, {"command", command}, {"size_bytes", size}};
  nlohmann::json engine_results = nlohmann::json::array();
  for (size_t i = 0; i < k; ++i) {
    const AioFigure read = Summarize(samples[1][i]), write = Summarize(samples[0][i]);
    std::fprintf(stderr, "aio: %s: read %.3f / write %.3f GB/s\n", contenders[i].name.c_str(),
                 read.median, write.median);
    nlohmann::json entry = {{"read_gbps", read.median},
                            {"write_gbps", write.median},
                            {"samples_gbps", {{"read", read.samples}, {"write", write.samples}}}};
    if (i == 0) {
      result.update(entry);
    } else {
      entry["name"] = contenders[i].name;
      engine_results.push_back(entry);
    }
  }
  result["engines"] = engine_results;
  return result;
}

Result<std::vector<uint64_t>> ParseSizes(const std::vector<std::string>& texts, uint64_t all) {
  std::vector<uint64_t> sizes;
  for (const std::string& text : texts) {
    if (text == "all") {
      sizes.push_back(all);
      continue;
    }
    SLUICE_ASSIGN_OR_RETURN(uint64_t size, ParseByteSize(text));
    if (size == 0 || !offload::IsAligned(size)) {
      return InvalidArgumentError("size {} must be a positive multiple of 4096 (O_DIRECT)", text);
    }
    sizes.push_back(std::min(size, all));
  }
  return sizes;
}

// Reads the whole file back and compares it with the last write pass's content: the buffer's
// first `transfer` bytes, repeated.
Result<uint64_t> VerifyFile(AioEngine& engine, AioFileId file, const char* expected,
                            uint64_t transfer, uint64_t volume) {
  constexpr uint64_t kPiece = 64ull << 20;
  SLUICE_ASSIGN_OR_RETURN(AlignedBuffer scratch,
                          AlignedBuffer::Allocate(std::min(kPiece, volume), {.lock = false}));
  for (uint64_t at = 0; at < volume;) {
    const uint64_t phase = at % transfer;
    const uint64_t n = std::min({kPiece, transfer - phase, volume - at});
    SLUICE_RETURN_IF_ERROR(engine.Read(file, at, scratch.data(), n).Wait());
    if (std::memcmp(scratch.data(), expected + phase, n) != 0) {
      return DataLossError("the benchmark file differs from what was written in [{}, {})", at,
                           at + n);
    }
    at += n;
  }
  return volume;
}

nlohmann::json RowJson(const AioSweepRow& row) {
  nlohmann::json j = {
      {"op", row.op},
      {"transfer_bytes", row.transfer},
      {"gbps", {{"median", row.gbps.median}, {"min", row.gbps.min}, {"max", row.gbps.max}}},
      {"samples_gbps", row.gbps.samples}};
  if (row.block_size != 0) {
    j["block_size"] = row.block_size;
    j["queue_depth"] = row.queue_depth;
    j["intra_op_parallelism"] = row.intra_op_parallelism;
  }
  return j;
}

const AioSweepRow* BestRow(const std::vector<AioSweepRow>& rows, const std::string& op,
                           uint64_t transfer) {
  const AioSweepRow* best = nullptr;
  for (const AioSweepRow& row : rows) {
    if (row.op != op || row.transfer != transfer) continue;
    if (best == nullptr || row.gbps.median > best->gbps.median) best = &row;
  }
  return best;
}

// The swap store with checksums off and on, interleaved pass by pass so drift hits both alike.
Result<nlohmann::json> MeasureChecksums(const AioBenchOptions& options, const AioOptions& aio,
                                        char* buffer, uint64_t extent_bytes) {
  SLUICE_ASSIGN_OR_RETURN(auto engine, AioEngine::Create(aio));
  engine->RegisterBuffer(buffer, extent_bytes);
  std::unique_ptr<offload::SwapStore> stores[2];
  for (int on = 0; on < 2; ++on) {
    offload::SwapStoreOptions store_options;
    store_options.paths = options.dirs;
    store_options.capacity_bytes = extent_bytes;
    store_options.verify_checksums = on == 1;
    store_options.file_name = on == 1 ? "sluice_aio_bench.on.swap" : "sluice_aio_bench.off.swap";
    SLUICE_ASSIGN_OR_RETURN(stores[on], offload::SwapStore::Create(*engine, store_options));
    SLUICE_RETURN_IF_ERROR(stores[on]->Allocate("bench", extent_bytes));
    SLUICE_RETURN_IF_ERROR(stores[on]->Write("bench", buffer, extent_bytes));  // lays it out
  }
  std::vector<double> samples[2][2];  // [on][read]
  std::vector<double> cpu_ms[2][2];   // process CPU time per operation, [on][read]
  std::vector<double> paired[2];      // per round, on/off throughput, [read]
  // Ratios of two noisy figures: at least 7 timed rounds, off and on back to back in each.
  const int rounds = std::max(options.iterations, 7);
  for (int i = 0; i < options.warmup + rounds; ++i) {
    double gbps[2][2];
    for (int on = 0; on < 2; ++on) {
      for (int read = 0; read < 2; ++read) {
        const double cpu_start = ProcessCpuSeconds();
        const auto start = Clock::now();
        SLUICE_RETURN_IF_ERROR(read == 1 ? stores[on]->Read("bench", buffer, extent_bytes)
                                         : stores[on]->Write("bench", buffer, extent_bytes));
        gbps[on][read] = extent_bytes / Seconds(start) / 1e9;
        if (i >= options.warmup) {
          cpu_ms[on][read].push_back(1e3 * (ProcessCpuSeconds() - cpu_start));
        }
      }
    }
    if (i < options.warmup) continue;
    for (int on = 0; on < 2; ++on) {
      for (int read = 0; read < 2; ++read) samples[on][read].push_back(gbps[on][read]);
    }
    for (int read = 0; read < 2; ++read) paired[read].push_back(gbps[1][read] / gbps[0][read]);
  }
  std::vector<double> hash;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    volatile uint64_t sink = offload::Checksum64(buffer, extent_bytes);
    (void)sink;
    hash.push_back(extent_bytes / Seconds(start) / 1e9);
  }
  std::vector<std::string> files;
  for (auto& store : stores) {
    files = store->file_paths();
    SLUICE_RETURN_IF_ERROR(store->Close());
    if (!options.keep_files) {
      for (const std::string& f : files) std::filesystem::remove(f);
    }
  }
  const AioFigure write_off = Summarize(samples[0][0]), write_on = Summarize(samples[1][0]);
  const AioFigure read_off = Summarize(samples[0][1]), read_on = Summarize(samples[1][1]);
  const double write_ratio = write_on.median / write_off.median;
  const double read_ratio = read_on.median / read_off.median;
  const AioFigure write_paired = Summarize(paired[0]), read_paired = Summarize(paired[1]);
  return nlohmann::json{
      {"extent_bytes", extent_bytes},
      {"block_size", aio.block_size},
      {"queue_depth", aio.queue_depth},
      {"checksum_chunk_bytes", offload::SwapStoreOptions().checksum_chunk_bytes},
      {"write_gbps", {{"off", write_off.median}, {"on", write_on.median}}},
      {"read_gbps", {{"off", read_off.median}, {"on", read_on.median}}},
      {"samples_gbps",
       {{"write_off", write_off.samples},
        {"write_on", write_on.samples},
        {"read_off", read_off.samples},
        {"read_on", read_on.samples}}},
      {"write_ratio", write_ratio},
      {"read_ratio", read_ratio},
      // The ratio within each round (off and on back to back), which drift affects less.
      {"paired_ratio",
       {{"write",
         {{"median", write_paired.median},
          {"min", write_paired.min},
          {"max", write_paired.max},
          {"samples", write_paired.samples}}},
        {"read",
         {{"median", read_paired.median},
          {"min", read_paired.min},
          {"max", read_paired.max},
          {"samples", read_paired.samples}}}}},
      // Median process CPU per 'extent_bytes' operation: the hashing's cost, beside the I/O's.
      {"cpu_ms_per_op",
       {{"write_off", Summarize(cpu_ms[0][0]).median},
        {"write_on", Summarize(cpu_ms[1][0]).median},
        {"read_off", Summarize(cpu_ms[0][1]).median},
        {"read_on", Summarize(cpu_ms[1][1]).median}}},
      {"xxh3_gbps_one_thread", Summarize(hash).median},
      {"target_ratio", kTargetChecksumRatio},
      {"met", write_ratio >= kTargetChecksumRatio && read_ratio >= kTargetChecksumRatio}};
}

}  // namespace

Result<uint64_t> ParseByteSize(std::string_view text) {
  if (text.empty()) return InvalidArgumentError("empty size");
  uint64_t multiplier = 1;
  std::string_view digits = text;
  const char suffix = static_cast<char>(std::toupper(static_cast<unsigned char>(text.back())));
  if (suffix == 'K' || suffix == 'M' || suffix == 'G' || suffix == 'T') {
    multiplier = suffix == 'K'   ? 1ull << 10
                 : suffix == 'M' ? 1ull << 20
                 : suffix == 'G' ? 1ull << 30
                                 : 1ull << 40;
    digits.remove_suffix(1);
  }
  uint64_t value = 0;
  if (digits.empty()) return InvalidArgumentError("size '{}' has no number", text);
  for (char c : digits) {
    if (c < '0' || c > '9') {
      return InvalidArgumentError("size '{}' is not a number with an optional K, M, G or T", text);
    }
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  return value * multiplier;
}

std::string FormatBytes(uint64_t bytes) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + units[unit];
}

void AddAioBenchOptions(CLI::App& app, AioBenchOptions& options) {
  app.add_option("--dir", options.dirs,
                 "Directory for the swap files (repeat to stripe over several, like nvme_path)");
  app.add_option("--size", options.size, "File size; every pass moves all of it")
      ->capture_default_str();
  app.add_option("--block-sizes", options.block_sizes, "aio.block_size values to sweep")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--queue-depths", options.queue_depths, "aio.queue_depth values to sweep")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--transfer-sizes", options.transfer_sizes,
                 "Bytes per request ('all' = the file size)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--intra-op", options.intra_op_parallelism, "aio.intra_op_parallelism")
      ->capture_default_str();
  app.add_option("--iterations", options.iterations, "Timed passes per figure (median)")
      ->capture_default_str();
  app.add_option("--warmup", options.warmup, "Untimed passes first")->capture_default_str();
  app.add_option("--backend", options.backend, "auto, io_uring or threadpool")
      ->capture_default_str();
  app.add_option("--fio-size", options.fio_size, "fio --size (default: --size)");
  app.add_flag("!--no-fio", options.fio, "Skip the fio comparison");
  app.add_flag("!--no-sync", options.sync_baseline, "Skip the pread/pwrite baseline");
  app.add_flag("!--no-checksum", options.checksums, "Skip the checksum on/off figures");
  app.add_option("--checksum-size", options.checksum_size, "Extent size for the checksum figures")
      ->capture_default_str();
  app.add_flag("--keep-files", options.keep_files, "Leave the benchmark files in place");
  app.add_option("--json", options.json_path, "Write the JSON record here ('-': stdout)");
  app.add_option("--tune", options.tune_dir,
                 "Run a short sweep in DIR and print the best `aio` settings as a config layer");
  app.add_option("--output", options.tune_output,
                 "With --tune: write the YAML config layer here (e.g. aio_tuned.yaml, then "
                 "sluice train --config base.yaml --config aio_tuned.yaml)");
}

Result<AioBenchReport> RunAioBench(const AioBenchOptions& options) {
  if (options.dirs.empty()) {
    return InvalidArgumentError("give --dir DIR: the directory (swap filesystem) to measure");
  }
  if (options.iterations < 1 || options.warmup < 0) {
    return InvalidArgumentError("--iterations must be >= 1 and --warmup >= 0");
  }
  SLUICE_ASSIGN_OR_RETURN(const uint64_t file_bytes, ParseByteSize(options.size));
  if (file_bytes == 0 || !offload::IsAligned(file_bytes, 1 << 20)) {
    return InvalidArgumentError("--size must be a positive multiple of 1M, got {}", options.size);
  }
  SLUICE_ASSIGN_OR_RETURN(const std::vector<uint64_t> blocks,
                          ParseSizes(options.block_sizes, file_bytes));
  SLUICE_ASSIGN_OR_RETURN(const std::vector<uint64_t> transfers,
                          ParseSizes(options.transfer_sizes, file_bytes));
  SLUICE_ASSIGN_OR_RETURN(const offload::AioBackendKind backend,
                          offload::ParseAioBackend(options.backend));
  const uint64_t largest = *std::max_element(transfers.begin(), transfers.end());

  AioBenchReport report;
  report.machine = MachineJson(options.dirs);
  SLUICE_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::Allocate(largest));
  for (uint64_t i = 0; i < buffer.size(); i += 8) {
    const uint64_t word = i * 0x9E3779B97F4A7C15ull ^ (i >> 12);
    std::memcpy(buffer.as<char>() + i, &word, 8);
  }
  char* data = buffer.as<char>();

  std::vector<std::string> paths;
  for (const std::string& dir : options.dirs) paths.push_back(dir + "/" + kDataFile);
  offload::AioFileOptions file_options;
  file_options.paths = paths;
  file_options.stripe_size = 1 << 20;
  file_options.preallocate_bytes = file_bytes;

  // Lay the file out once (reads of preallocated but unwritten extents never touch the disk).
  AioOptions layout_options;
  layout_options.backend = backend;
  layout_options.queue_depth = 32;
  layout_options.block_size = 4 << 20;
  std::string backend_name, direct;
  {
    SLUICE_ASSIGN_OR_RETURN(auto engine, AioEngine::Create(layout_options));
    SLUICE_ASSIGN_OR_RETURN(AioFileId file, engine->Open(file_options));
    std::fprintf(stderr, "aio: laying out %s bytes in %zu file(s) ...\n",
                 FormatBytes(file_bytes).c_str(), paths.size());
    SLUICE_RETURN_IF_ERROR(EnginePass(*engine, file, IoOp::kWrite, data, largest, file_bytes));
    backend_name = std::string(engine->backend_name());
    direct = *engine->IsDirect(file) ? "O_DIRECT" : "buffered";
  }

  // The sweep.
  uint64_t last_transfer = largest;
  for (uint64_t block : blocks) {
    for (int depth : options.queue_depths) {
      AioOptions aio;
      aio.backend = backend;
      aio.block_size = block;
      aio.queue_depth = depth;
      aio.intra_op_parallelism = options.intra_op_parallelism;
      SLUICE_ASSIGN_OR_RETURN(auto engine, AioEngine::Create(aio));
      engine->RegisterBuffer(data, buffer.size());
      SLUICE_ASSIGN_OR_RETURN(AioFileId file, engine->Open(file_options));
      for (uint64_t transfer : transfers) {
        for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
          SLUICE_ASSIGN_OR_RETURN(
              AioFigure figure, Measure(options.warmup, options.iterations, file_bytes, [&]() {
                return EnginePass(*engine, file, op, data, transfer, file_bytes);
              }));
          AioSweepRow row{op == IoOp::kRead ? "read" : "write", block,    depth,
                          options.intra_op_parallelism,         transfer, figure};
          std::fprintf(stderr, "aio: %-5s block %-5s qd %-3d transfer %-5s %7.3f GB/s\n",
                       row.op.c_str(), FormatBytes(block).c_str(), depth,
                       FormatBytes(transfer).c_str(), figure.median);
          report.sweep.push_back(std::move(row));
        }
        last_transfer = transfer;
      }
    }
  }

  // Correctness: the file holds what the last write pass wrote.
  {
    SLUICE_ASSIGN_OR_RETURN(auto engine, AioEngine::Create(layout_options));
    SLUICE_ASSIGN_OR_RETURN(AioFileId file, engine->Open(file_options));
    Result<uint64_t> checked = VerifyFile(*engine, file, data, last_transfer, file_bytes);
    report.correctness = {{"verified", checked.ok()},
                          {"bytes_checked", checked.ok() ? *checked : 0},
                          {"error", checked.ok() ? "" : checked.status().message()}};
  }

  // Baseline: synchronous pread/pwrite, same buffer, same filesystem.
  if (options.sync_baseline) {
    const std::string sync_path = options.dirs.front() + "/" + kSyncFile;
    const int fd = open(sync_path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0) return IoError("opening {} failed: {}", sync_path, internal::ErrnoText(errno));
    Status status;
    if (fallocate(fd, 0, 0, static_cast<off_t>(file_bytes)) != 0) {
      status = IoError("fallocate {} failed: {}", sync_path, internal::ErrnoText(errno));
    }
    if (status.ok())
      status = SyncPass(fd, sync_path, IoOp::kWrite, data, largest, file_bytes).status();
    for (uint64_t transfer : transfers) {
      for (IoOp op : {IoOp::kWrite, IoOp::kRead}) {
        if (!status.ok()) break;
        auto figure = Measure(options.warmup, options.iterations, file_bytes, [&]() {
          return SyncPass(fd, sync_path, op, data, transfer, file_bytes);
        });
        if (!figure.ok()) {
          status = figure.status();
          break;
        }
        AioSweepRow row{op == IoOp::kRead ? "read" : "write", 0, 0, 0, transfer, *figure};
        std::fprintf(stderr, "aio: sync %-5s transfer %-5s %7.3f GB/s\n", row.op.c_str(),
                     FormatBytes(transfer).c_str(), figure->median);
        report.sync_baseline.push_back(std::move(row));
      }
    }
    close(fd);
    if (!options.keep_files) std::filesystem::remove(sync_path);
    SLUICE_RETURN_IF_ERROR(status);
  }

  // Head to head with fio on the same filesystem, each op with its best large-transfer config.
  const AioSweepRow* best_read = BestRow(report.sweep, "read", largest);
  const AioSweepRow* best_write = BestRow(report.sweep, "write", largest);
  uint64_t fio_bytes = file_bytes;
  if (!options.fio_size.empty()) {
    SLUICE_ASSIGN_OR_RETURN(fio_bytes, ParseByteSize(options.fio_size));
  }
  if (options.fio) {
    std::unique_ptr<AioEngine> engines[3];  // best write, best read, fio's settings
    AioFileId files[3] = {0, 0, 0};
    for (int i = 0; i < 3; ++i) {
      const AioSweepRow* best = i == 0 ? best_write : best_read;
      AioOptions aio;
      aio.backend = backend;
      aio.block_size = i == 2 ? 1 << 20 : best->block_size;
      aio.queue_depth = i == 2 ? 32 : best->queue_depth;
      aio.intra_op_parallelism = i == 2 ? 1 : options.intra_op_parallelism;
      SLUICE_ASSIGN_OR_RETURN(engines[i], AioEngine::Create(aio));
      if (i < 2) engines[i]->RegisterBuffer(data, buffer.size());
      SLUICE_ASSIGN_OR_RETURN(files[i], engines[i]->Open(file_options));
    }
    // fio's own buffers are ordinary 4 KiB pages; so is this one, to show what the engine's
    // settings and what its huge-page buffers contribute.
    SLUICE_ASSIGN_OR_RETURN(AlignedBuffer small_pages,
                            AlignedBuffer::Allocate(largest, {.lock = false, .huge_pages = false}));
    std::memcpy(small_pages.data(), data, largest);
    auto pass = [&](int i, IoOp op, char* from) -> Result<double> {
      SLUICE_ASSIGN_OR_RETURN(double seconds,
                              EnginePass(*engines[i], files[i], op, from, largest, file_bytes));
      return static_cast<double>(file_bytes) / seconds / 1e9;
    };
    report.fio = HeadToHeadWithFio(
        options.dirs.front(), fio_bytes, options.warmup, options.iterations, options.keep_files,
        {{"engine, best configuration, huge-page pinned buffer",
          [&](IoOp op) { return pass(op == IoOp::kRead ? 1 : 0, op, data); }},
         {"engine, fio's settings (block 1M, qd 32), 4 KiB-page buffer",
          [&](IoOp op) { return pass(2, op, small_pages.as<char>()); }}});
  } else {
    report.fio = {{"available", false}, {"reason", "--no-fio"}};
  }

  // Headline: the best large-transfer configuration against fio and the sync baseline.
  auto headline_for = [&](const AioSweepRow* row, const char* op) {
    nlohmann::json h = {{"transfer_bytes", largest},
                        {"block_size", row->block_size},
                        {"queue_depth", row->queue_depth},
                        {"sweep_gbps", row->gbps.median},
                        {"gbps", row->gbps.median}};
    if (const AioSweepRow* sync = BestRow(report.sync_baseline, op, largest)) {
      h["sync_gbps"] = sync->gbps.median;
      h["ratio_vs_sync"] = row->gbps.median / sync->gbps.median;
    }
    if (report.fio.value("available", false)) {
      // Against fio, the figures measured interleaved with it.
      const std::string key = std::string(op) + "_gbps";
      const double engine = report.fio["engines"][0][key].get<double>();
      const double fio = report.fio[key].get<double>();
      const double fio_settings = report.fio["engines"][1][key].get<double>();
      h["gbps"] = engine;
      h["fio_gbps"] = fio;
      h["ratio_vs_fio"] = engine / fio;
      h["met"] = engine >= kTargetVsFio * fio;
      h["fio_settings_small_pages_gbps"] = fio_settings;
      h["fio_settings_small_pages_ratio_vs_fio"] = fio_settings / fio;
    }
    return h;
  };
  report.headline = {{"read", headline_for(best_read, "read")},
                     {"write", headline_for(best_write, "write")},
                     {"target_ratio_vs_fio", kTargetVsFio}};

  // Checksums on vs off, with the `aio` defaults and with the best large-transfer configuration
  // (with everything in flight at once a device may complete a whole read together, leaving
  // nothing for the hashing to overlap with).
  if (options.checksums) {
    SLUICE_ASSIGN_OR_RETURN(uint64_t extent_bytes, ParseByteSize(options.checksum_size));
    extent_bytes = std::min(extent_bytes, largest);
    report.checksum = nlohmann::json::array();
    const AioOptions defaults;
    const std::pair<const char*, const AioSweepRow*> configs[] = {{"aio defaults", nullptr},
                                                                  {"best read", best_read}};
    for (const auto& [label, row] : configs) {
      AioOptions aio;
      aio.backend = backend;
      aio.block_size = row != nullptr ? row->block_size : defaults.block_size;
      aio.queue_depth = row != nullptr ? row->queue_depth : defaults.queue_depth;
      aio.intra_op_parallelism = options.intra_op_parallelism;
      std::fprintf(stderr, "aio: swap store, checksums off vs on (%s) ...\n", label);
      SLUICE_ASSIGN_OR_RETURN(nlohmann::json figures,
                              MeasureChecksums(options, aio, data, extent_bytes));
      figures["config"] = label;
      report.checksum.push_back(std::move(figures));
    }
  }

  if (!options.keep_files) {
    for (const std::string& path : paths) std::filesystem::remove(path);
  }
  report.machine["loadavg_at_end"] = ReadSmallFile("/proc/loadavg");
  std::vector<std::string> block_labels, transfer_labels;
  for (uint64_t b : blocks) block_labels.push_back(FormatBytes(b));
  for (uint64_t t : transfers) transfer_labels.push_back(FormatBytes(t));
  report.settings = {
      {"dirs", options.dirs},
      {"file_bytes", file_bytes},
      {"stripe_size", file_options.stripe_size},
      {"block_sizes", block_labels},
      {"queue_depths", options.queue_depths},
      {"transfer_sizes", transfer_labels},
      {"intra_op_parallelism", options.intra_op_parallelism},
      {"iterations", options.iterations},
      {"warmup", options.warmup},
      {"backend", backend_name},
      {"io_mode", direct},
      {"buffer_locked", buffer.locked()},
      {"gb", "1e9 bytes"},
      {"pass", "requests of transfer_bytes, one at a time (submit, wait), covering the file"},
      {"date_utc", UtcTimestamp()}};
  return report;
}

std::string FormatAioBenchTable(const AioBenchReport& report) {
  std::string out;
  const auto& s = report.settings;
  out += fmt::format("aio benchmark: {} x {} file(s), {} {}, median of {} passes (GB = 1e9 B)\n\n",
                     FormatBytes(s["file_bytes"].get<uint64_t>()), s["dirs"].size(),
                     s["backend"].get<std::string>(), s["io_mode"].get<std::string>(),
                     s["iterations"].get<int>());
  out += "| op | block | qd | transfer | GB/s | min | max |\n|---|---|---|---|---|---|---|\n";
  for (const AioSweepRow& row : report.sweep) {
    out += fmt::format("| {} | {} | {} | {} | {:.3f} | {:.3f} | {:.3f} |\n", row.op,
                       FormatBytes(row.block_size), row.queue_depth, FormatBytes(row.transfer),
                       row.gbps.median, row.gbps.min, row.gbps.max);
  }
  if (!report.sync_baseline.empty()) {
    out += "\nbaseline: synchronous pread/pwrite, O_DIRECT, same buffer\n\n";
    out += "| op | transfer | GB/s | min | max |\n|---|---|---|---|---|\n";
    for (const AioSweepRow& row : report.sync_baseline) {
      out += fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.3f} |\n", row.op,
                         FormatBytes(row.transfer), row.gbps.median, row.gbps.min, row.gbps.max);
    }
  }
  out += "\n";
  if (report.fio.value("available", false)) {
    out += fmt::format(
        "fio (io_uring, direct, bs=1M, iodepth=32, size {}), interleaved with the "
        "engine's best configuration: fio read {:.3f} / write {:.3f} GB/s\n",
        FormatBytes(report.fio["size_bytes"].get<uint64_t>()),
        report.fio["read_gbps"].get<double>(), report.fio["write_gbps"].get<double>());
  } else {
    out += fmt::format("fio: not measured ({})\n", report.fio.value("reason", "?"));
  }
  for (const char* op : {"read", "write"}) {
    const auto& h = report.headline[op];
    out += fmt::format("{} (transfer {}, best: block {}, qd {}): {:.3f} GB/s in the sweep", op,
                       FormatBytes(h["transfer_bytes"].get<uint64_t>()),
                       FormatBytes(h["block_size"].get<uint64_t>()), h["queue_depth"].get<int>(),
                       h["sweep_gbps"].get<double>());
    if (h.contains("ratio_vs_sync")) {
      out += fmt::format(" = {:.2f}x sync", h["ratio_vs_sync"].get<double>());
    }
    if (h.contains("ratio_vs_fio")) {
      out += fmt::format(
          "; {:.3f} GB/s beside fio = {:.2f}x fio (target {:.1f}x: {}); with "
          "fio's settings and 4 KiB pages {:.3f} GB/s = {:.2f}x fio",
          h["gbps"].get<double>(), h["ratio_vs_fio"].get<double>(), kTargetVsFio,
          h["met"].get<bool>() ? "met" : "NOT met",
          h["fio_settings_small_pages_gbps"].get<double>(),
          h["fio_settings_small_pages_ratio_vs_fio"].get<double>());
    }
    out += "\n";
  }
  for (const auto& c : report.checksum) {
    out += fmt::format(
        "checksums ({} extent, {}: block {}, qd {}, chunk {}): write {:.3f} -> {:.3f} GB/s "
        "({:.0f}%; per round {:.0f}%, {:.0f}-{:.0f}), read {:.3f} -> {:.3f} GB/s ({:.0f}%; per "
        "round {:.0f}%, {:.0f}-{:.0f}), XXH3 {:.1f} GB/s on one thread, CPU per op: write "
        "{:.1f} -> {:.1f} ms, read {:.1f} -> {:.1f} ms (target {:.0f}%: {})\n",
        FormatBytes(c["extent_bytes"].get<uint64_t>()), c["config"].get<std::string>(),
        FormatBytes(c["block_size"].get<uint64_t>()), c["queue_depth"].get<int>(),
        FormatBytes(c["checksum_chunk_bytes"].get<uint64_t>()),
        c["write_gbps"]["off"].get<double>(), c["write_gbps"]["on"].get<double>(),
        100 * c["write_ratio"].get<double>(),
        100 * c["paired_ratio"]["write"]["median"].get<double>(),
        100 * c["paired_ratio"]["write"]["min"].get<double>(),
        100 * c["paired_ratio"]["write"]["max"].get<double>(), c["read_gbps"]["off"].get<double>(),
        c["read_gbps"]["on"].get<double>(), 100 * c["read_ratio"].get<double>(),
        100 * c["paired_ratio"]["read"]["median"].get<double>(),
        100 * c["paired_ratio"]["read"]["min"].get<double>(),
        100 * c["paired_ratio"]["read"]["max"].get<double>(),
        c["xxh3_gbps_one_thread"].get<double>(), c["cpu_ms_per_op"]["write_off"].get<double>(),
        c["cpu_ms_per_op"]["write_on"].get<double>(), c["cpu_ms_per_op"]["read_off"].get<double>(),
        c["cpu_ms_per_op"]["read_on"].get<double>(), 100 * kTargetChecksumRatio,
        c["met"].get<bool>() ? "met" : "NOT met");
  }
  out += fmt::format("correctness: {}\n",
                     report.correctness["verified"].get<bool>()
                         ? fmt::format("{} bytes read back and compared, all equal",
                                       report.correctness["bytes_checked"].get<uint64_t>())
                         : report.correctness["error"].get<std::string>());
  return out;
}

nlohmann::json AioBenchJson(const AioBenchReport& report) {
  nlohmann::json sweep = nlohmann::json::array();
  for (const AioSweepRow& row : report.sweep) sweep.push_back(RowJson(row));
  nlohmann::json sync = nlohmann::json::array();
  for (const AioSweepRow& row : report.sync_baseline) sync.push_back(RowJson(row));
  return {{"benchmark", "aio"},
          {"schema_version", 1},
          {"machine", report.machine},
          {"settings", report.settings},
          {"sweep", sweep},
          {"sync_baseline", sync},
          {"fio", report.fio},
          {"checksum", report.checksum},
          {"correctness", report.correctness},
          {"headline", report.headline}};
}

Result<AioTuneResult> TuneAio(const std::string& dir, uint64_t file_bytes) {
  // The sweep's scratch folder, as `nvme_path` is for training: made if missing.
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (made) {
    return InvalidArgumentError("bench aio --tune {}: cannot create the folder: {}", dir,
                                made.message());
  }
  const uint64_t transfer = std::min<uint64_t>(file_bytes, 256ull << 20);
  SLUICE_ASSIGN_OR_RETURN(AlignedBuffer buffer, AlignedBuffer::Allocate(transfer));
  std::memset(buffer.data(), 0x5a, buffer.size());
  offload::AioFileOptions file_options;
  file_options.paths = {dir + "/sluice_aio_tune.dat"};
  file_options.preallocate_bytes = file_bytes;
  AioTuneResult result;
  double best_score = -1;
  bool laid_out = false;
  for (uint64_t block : {1ull << 20, 4ull << 20, 8ull << 20}) {
    for (int depth : {8, 32}) {
      for (int intra : {1, 2}) {
        AioOptions aio;
        aio.block_size = block;
        aio.queue_depth = depth;
        aio.intra_op_parallelism = intra;
        SLUICE_ASSIGN_OR_RETURN(auto engine, AioEngine::Create(aio));
        engine->RegisterBuffer(buffer.data(), buffer.size());
        SLUICE_ASSIGN_OR_RETURN(AioFileId file, engine->Open(file_options));
        auto pass = [&](IoOp op) {
          return EnginePass(*engine, file, op, buffer.as<char>(), transfer, file_bytes);
        };
        if (!laid_out) {
          SLUICE_RETURN_IF_ERROR(pass(IoOp::kWrite));
          laid_out = true;
        }
        SLUICE_ASSIGN_OR_RETURN(AioFigure write,
                                Measure(0, 1, file_bytes, [&] { return pass(IoOp::kWrite); }));
        SLUICE_ASSIGN_OR_RETURN(AioFigure read,
                                Measure(0, 1, file_bytes, [&] { return pass(IoOp::kRead); }));
        result.tried.push_back({"write", block, depth, intra, transfer, write});
        result.tried.push_back({"read", block, depth, intra, transfer, read});
        std::fprintf(stderr,
                     "aio tune: block %-3s qd %-2d intra-op %d: write %.3f, read %.3f GB/s\n",
                     FormatBytes(block).c_str(), depth, intra, write.median, read.median);
        if (write.median + read.median > best_score) {
          best_score = write.median + read.median;
          result.best = aio;
          result.read_gbps = read.median;
          result.write_gbps = write.median;
        }
      }
    }
  }
  std::filesystem::remove(file_options.paths.front());
  return result;
}

// The snippet must load as a config layer with exactly the values chosen; one that did not would
// only fail later, in `sluice train`.
Status CheckSnippetLoads(const std::string& snippet, const AioConfig& chosen) {
  ConfigSources sources;
  sources.env = std::vector<std::pair<std::string, std::string>>{};
  sources.available_host_memory = int64_t{16} << 30;  // the machine does not matter here
  // A snippet is a layer, not a whole config: the batch size comes from the base.
  sources.set_overrides = {"train_micro_batch_size_per_gpu=1"};
  SLUICE_ASSIGN_OR_RETURN(Config config,
                          LoadConfigFromText(snippet, ConfigFormat::kYaml, sources, "<snippet>"));
  if (config.aio.block_size != chosen.block_size || config.aio.queue_depth != chosen.queue_depth ||
      config.aio.intra_op_parallelism != chosen.intra_op_parallelism) {
    return InternalError("the aio snippet reads back as {}/{}/{}, not {}/{}/{}",
                         config.aio.block_size, config.aio.queue_depth,
                         config.aio.intra_op_parallelism, chosen.block_size, chosen.queue_depth,
                         chosen.intra_op_parallelism);
  }
  return OkStatus();
}

Status RunAioTune(const AioBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(const uint64_t bytes, ParseByteSize(options.size));
  SLUICE_ASSIGN_OR_RETURN(AioTuneResult tuned, TuneAio(options.tune_dir, bytes));
  AioConfig chosen = Config().aio;
  chosen.block_size = static_cast<int64_t>(tuned.best.block_size);
  chosen.queue_depth = tuned.best.queue_depth;
  chosen.intra_op_parallelism = tuned.best.intra_op_parallelism;
  const std::string& path = options.tune_output;
  const std::string name = path.empty() ? std::string("aio_tuned.yaml")
                                        : std::filesystem::path(path).filename().string();
  const std::vector<std::string> provenance = {
      fmt::format("`aio` settings chosen by `sluice bench aio --tune {}` on {}", options.tune_dir,
                  HostName()),
      fmt::format("(a {} file; {} configurations tried): read {:.3f} GB/s, write {:.3f} GB/s",
                  FormatBytes(bytes), tuned.tried.size() / 2, tuned.read_gbps, tuned.write_gbps)};
  const std::string snippet = AioTunedSnippetYaml(chosen, provenance, name);
  SLUICE_RETURN_IF_ERROR(CheckSnippetLoads(snippet, chosen));
  std::fputs(snippet.c_str(), stdout);
  if (!path.empty()) {
    SLUICE_RETURN_IF_ERROR(WriteFileAtomically(path, snippet, Durability::kUnsynced));
    std::fprintf(stderr,
                 "aio tune: wrote %s; use it as a layer: sluice train --config base.yaml "
                 "--config %s\n",
                 path.c_str(), path.c_str());
  }
  return OkStatus();
}

Status RunAioBenchCommand(const AioBenchOptions& options) {
  if (!options.tune_dir.empty()) return RunAioTune(options);
  SLUICE_ASSIGN_OR_RETURN(AioBenchReport report, RunAioBench(options));
  SLUICE_RETURN_IF_ERROR(PrintTableAndWriteRecord(FormatAioBenchTable(report), AioBenchJson(report),
                                                  options.json_path));
  if (!report.correctness["verified"].get<bool>()) {
    return DataLossError("aio benchmark correctness check failed: {}",
                         report.correctness["error"].get<std::string>());
  }
  return OkStatus();
}

}  // namespace sluice::bench
