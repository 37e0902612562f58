#include "benchmarks/lib/comm_bench.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "benchmarks/lib/aio_bench.h"  // ParseByteSize
#include "benchmarks/lib/bench_record.h"
#include "kernels/ref/half.h"
#include "runtime/comm.h"
#include "runtime/comm/comm_factory.h"
#include "runtime/device.h"
#include "runtime/device/device_factory.h"

namespace sluice::bench {
namespace {

// Where a backend's buffers live: host memory for MPI, the GPU for NCCL.
class BenchMemory {
 public:
  virtual ~BenchMemory() = default;
  virtual Result<void*> Allocate(size_t bytes) = 0;  // freed with this object
  virtual Status Upload(void* dst, const void* host, size_t bytes) = 0;
  virtual Status Download(void* host, const void* src, size_t bytes) = 0;
};

class HostMemory final : public BenchMemory {
 public:
  Result<void*> Allocate(size_t bytes) override {
    blocks_.push_back(std::make_unique<std::byte[]>(std::max<size_t>(bytes, 1)));
    return static_cast<void*>(blocks_.back().get());
  }
  Status Upload(void* dst, const void* host, size_t bytes) override {
    std::memcpy(dst, host, bytes);
    return OkStatus();
  }
  Status Download(void* host, const void* src, size_t bytes) override {
    std::memcpy(host, src, bytes);
    return OkStatus();
  }

 private:
  std::vector<std::unique_ptr<std::byte[]>> blocks_;
};

class DeviceMemory final : public BenchMemory {
 public:
  DeviceMemory(std::unique_ptr<Device> device, std::unique_ptr<Stream> stream)
      : device_(std::move(device)), stream_(std::move(stream)) {}
  ~DeviceMemory() override {
    buffers_.clear();  // before the device
  }
  Result<void*> Allocate(size_t bytes) override {
    SLUICE_ASSIGN_OR_RETURN(DeviceBuffer buffer, device_->Allocate(std::max<size_t>(bytes, 1),
                                                                   MemoryCategory::kBuffers));
    buffers_.push_back(std::move(buffer));
    return buffers_.back().data();
  }
  Status Upload(void* dst, const void* host, size_t bytes) override {
    SLUICE_RETURN_IF_ERROR(device_->CopyAsync(dst, host, bytes, CopyKind::kH2D, *stream_));
    return stream_->Synchronize();
  }
  Status Download(void* host, const void* src, size_t bytes) override {
    SLUICE_RETURN_IF_ERROR(device_->CopyAsync(host, src, bytes, CopyKind::kD2H, *stream_));
    return stream_->Synchronize();
  }
  Device& device() { return *device_; }
  Stream& stream() { return *stream_; }

 private:
  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::vector<DeviceBuffer> buffers_;
};

// Inputs are small integers: their sums are exact in f32, bf16 (to 256) and f16 (to 2048).
float Value(int rank, uint64_t i) { return 1.0f + static_cast<float>((rank + i) % 3); }

std::vector<uint8_t> Encode(DType dtype, const std::vector<float>& values) {
  std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits =
          dtype == DType::kBF16 ? kernels::F32ToBf16(values[i]) : kernels::F32ToF16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

std::vector<float> Decode(DType dtype, const std::vector<uint8_t>& bytes) {
  std::vector<float> values(bytes.size() / DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(&values[i], bytes.data() + 4 * i, 4);
    } else {
      uint16_t bits = 0;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = dtype == DType::kBF16 ? kernels::Bf16ToF32(bits) : kernels::F16ToF32(bits);
    }
  }
  return values;
}

float RoundTo(DType dtype, float value) { return Decode(dtype, Encode(dtype, {value}))[0]; }

// Sums are exact; an average is divided and rounded once, which a backend may do otherwise
// (NCCL scales before adding): half a unit in the last place of the type.
bool Matches(DType dtype, ReduceOp op, float got, float expected) {
  if (op == ReduceOp::kSum) return got == expected;
  const float tolerance = dtype == DType::kF32 ? 1e-6f : dtype == DType::kBF16 ? 0x1p-8f : 0x1p-11f;
  return std::fabs(got - expected) <= tolerance * std::fabs(expected);
}

struct Case {
  std::string collective;
  uint64_t count = 0;  // elements of the whole buffer
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
};

struct Buffers {
  void* a = nullptr;  // all_reduce / broadcast data, all_gather shard, reduce_scatter input
  void* b = nullptr;  // all_gather output, reduce_scatter shard
};

Status RunOnce(Comm& comm, const Case& c, const Buffers& buffers) {
  if (c.collective == "all_reduce") return comm.AllReduce(buffers.a, c.count, c.dtype, c.op);
  if (c.collective == "all_gather") return comm.AllGather(buffers.a, buffers.b, c.count, c.dtype);
  if (c.collective == "reduce_scatter") {
    return comm.ReduceScatter(buffers.a, buffers.b, c.count, c.dtype, c.op);
  }
  return comm.Broadcast(buffers.a, c.count, c.dtype, c.root);
}

// This rank's wrong elements after one checked operation.
Result<int64_t> CheckOnce(Comm& comm, BenchMemory& memory, const Case& c, const Buffers& buffers) {
  const int n = comm.size();
  const int rank = comm.rank();
  const ShardSpan mine = comm.Shard(c.count);
  auto reduced = [&](uint64_t i) {
    float sum = 0;
    for (int r = 0; r < n; ++r) sum += Value(r, i);
    return c.op == ReduceOp::kAvg ? RoundTo(c.dtype, sum / static_cast<float>(n)) : sum;
  };
  std::vector<float> input;
  std::vector<float> expected;
  uint64_t output_count = c.count;
  void* output = buffers.a;
  if (c.collective == "all_reduce" || c.collective == "reduce_scatter") {
    input.resize(c.count);
    for (uint64_t i = 0; i < c.count; ++i) input[i] = Value(rank, i);
    const uint64_t begin = c.collective == "all_reduce" ? 0 : mine.offset;
    output_count = c.collective == "all_reduce" ? c.count : mine.count;
    for (uint64_t i = 0; i < output_count; ++i) expected.push_back(reduced(begin + i));
    if (c.collective == "reduce_scatter") output = buffers.b;
  } else if (c.collective == "all_gather") {
    for (uint64_t i = 0; i < mine.count; ++i) input.push_back(Value(rank, mine.offset + i));
    for (int r = 0; r < n; ++r) {
      const ShardSpan theirs = ShardRange(c.count, n, r);
      for (uint64_t i = 0; i < theirs.count; ++i) expected.push_back(Value(r, theirs.offset + i));
    }
    output = buffers.b;
  } else {  // broadcast: the others start from zeros
    input.assign(c.count, 0.0f);
    for (uint64_t i = 0; i < c.count; ++i) {
      if (rank == c.root) input[i] = Value(rank, i);
      expected.push_back(Value(c.root, i));
    }
  }
  const std::vector<uint8_t> encoded = Encode(c.dtype, input);
  SLUICE_RETURN_IF_ERROR(memory.Upload(buffers.a, encoded.data(), encoded.size()));
  SLUICE_RETURN_IF_ERROR(RunOnce(comm, c, buffers));
  std::vector<uint8_t> result(output_count * DTypeSize(c.dtype));
  SLUICE_RETURN_IF_ERROR(memory.Download(result.data(), output, result.size()));
  const std::vector<float> got = Decode(c.dtype, result);
  int64_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i)
    wrong += Matches(c.dtype, c.op, got[i], expected[i]) ? 0 : 1;
  return wrong;
}

// The sum over the ranks of `value`, through MPI's world (in f32, which the backends all
// reduce: exact for counts below 2^24, 7 digits for times).
Result<double> SumOverRanks(Comm& world, double value) {
  float single = static_cast<float>(value);
  SLUICE_RETURN_IF_ERROR(world.AllReduce(&single, 1, DType::kF32, ReduceOp::kSum));
  return static_cast<double>(single);
}

Result<DType> ParseBenchDType(const std::string& name) {
  if (name == "float") return DType::kF32;
  if (name == "bfloat16") return DType::kBF16;
  if (name == "half") return DType::kF16;
  Result<DType> parsed = ParseDType(name);
  if (!parsed.ok() || *parsed == DType::kF64) {
    return InvalidArgumentError("-d {}: the collectives take float, bfloat16 or half", name);
  }
  return parsed;
}

// nccl-tests' type names.
std::string TypeName(DType dtype) {
  return dtype == DType::kF32 ? "float" : dtype == DType::kBF16 ? "bfloat16" : "half";
}

bool Reduces(const std::string& collective) {
  return collective == "all_reduce" || collective == "reduce_scatter";
}

Result<std::vector<uint64_t>> SizeSweep(const CommBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(uint64_t low, ParseByteSize(options.min_bytes));
  SLUICE_ASSIGN_OR_RETURN(uint64_t high, ParseByteSize(options.max_bytes));
  if (low == 0 || high < low) {
    return InvalidArgumentError("-b {} -e {}: need 0 < minbytes <= maxbytes", options.min_bytes,
                                options.max_bytes);
  }
  if (options.step_factor < 2) {
    return InvalidArgumentError("-f {}: the step factor must be at least 2", options.step_factor);
  }
  std::vector<uint64_t> sizes;
  for (uint64_t size = low; size <= high; size *= static_cast<uint64_t>(options.step_factor)) {
    sizes.push_back(size);
    if (size > high / static_cast<uint64_t>(options.step_factor)) break;
  }
  return sizes;
}

// Elements for `bytes`: all_gather and reduce_scatter get a multiple of the ranks (at least one
// each), as nccl-tests does, so that every shard is alike.
uint64_t CountFor(uint64_t bytes, DType dtype, const std::string& collective, int ranks) {
  const uint64_t count = bytes / DTypeSize(dtype);
  if (collective == "all_reduce" || collective == "broadcast") return std::max<uint64_t>(count, 1);
  const uint64_t n = static_cast<uint64_t>(ranks);
  return std::max<uint64_t>(count / n, 1) * n;
}

// The rows of one backend; its buffers in `memory`, its collectives on `comm`.
Status BenchBackend(const CommBenchOptions& options, const std::string& backend, Comm& world,
                    Comm& comm, BenchMemory& memory, CommBenchReport* report) {
  SLUICE_ASSIGN_OR_RETURN(DType dtype, ParseBenchDType(options.dtype));
  const ReduceOp op = options.op == "avg" ? ReduceOp::kAvg : ReduceOp::kSum;
  SLUICE_ASSIGN_OR_RETURN(std::vector<uint64_t> sizes, SizeSweep(options));
  const int n = comm.size();
  uint64_t largest = 0;
  for (const std::string& collective : options.collectives) {
    largest = std::max(largest, CountFor(sizes.back(), dtype, collective, n) * DTypeSize(dtype));
  }
  Buffers buffers;
  SLUICE_ASSIGN_OR_RETURN(buffers.a, memory.Allocate(largest));
  SLUICE_ASSIGN_OR_RETURN(buffers.b, memory.Allocate(largest));
  for (const std::string& collective : options.collectives) {
    for (uint64_t size : sizes) {
      Case c{.collective = collective,
             .count = CountFor(size, dtype, collective, n),
             .dtype = dtype,
             .op = op,
             .root = options.root};
      CommBenchRow row{.backend = backend,
                       .collective = collective,
                       .bytes = c.count * DTypeSize(dtype),
                       .count = c.count,
                       .type = TypeName(dtype),
                       .redop = Reduces(collective) ? options.op : "none",
                       .root = collective == "broadcast" ? options.root : -1};
      if (options.check) {
        SLUICE_ASSIGN_OR_RETURN(int64_t wrong, CheckOnce(comm, memory, c, buffers));
        SLUICE_ASSIGN_OR_RETURN(double total, SumOverRanks(world, static_cast<double>(wrong)));
        row.wrong = static_cast<int64_t>(total);
      } else {
        row.wrong = -1;
      }
      for (int i = 0; i < options.warmup; ++i) SLUICE_RETURN_IF_ERROR(RunOnce(comm, c, buffers));
      SLUICE_RETURN_IF_ERROR(comm.Barrier());
      Status timed;
      const double seconds = ElapsedSeconds([&] {
        for (int i = 0; i < options.iterations && timed.ok(); ++i)
          timed = RunOnce(comm, c, buffers);
      });
      SLUICE_RETURN_IF_ERROR(timed);
      SLUICE_ASSIGN_OR_RETURN(double summed, SumOverRanks(world, seconds));
      row.time_us = summed / n / options.iterations * 1e6;
      row.algbw_gbps = static_cast<double>(row.bytes) / (row.time_us * 1e-6) / 1e9;
      row.busbw_gbps = row.algbw_gbps * BusBandwidthFactor(collective, n);
      report->rows.push_back(row);
    }
  }
  return OkStatus();
}

// NCCL needs a GPU on every rank: the device and its communicator, or why not (the same answer
// on every rank).
Status BenchNccl(const CommBenchOptions& options, Comm& world, CommBenchReport* report) {
  const int gpus = CudaDeviceCount();
  Result<std::unique_ptr<Device>> device =
      CreateDevice({.kind = DeviceKind::kCuda, .index = gpus > 0 ? world.rank() % gpus : 0});
  Status ready = device.status();
  std::unique_ptr<Stream> stream;
  if (ready.ok()) {
    Result<std::unique_ptr<Stream>> created = (*device)->CreateStream();
    ready = created.status();
    if (created.ok()) stream = std::move(created).value();
  }
  SLUICE_ASSIGN_OR_RETURN(double failed, SumOverRanks(world, ready.ok() ? 0.0 : 1.0));
  if (failed > 0) {
    report->skipped.push_back(
        {{"backend", "nccl"},
         {"reason",
          ready.ok() ? fmt::format("{} of {} ranks have no usable CUDA GPU", failed, world.size())
                     : ready.message()}});
    return OkStatus();
  }
  const int index = (*device)->index();
  DeviceMemory memory(std::move(device).value(), std::move(stream));
  SLUICE_ASSIGN_OR_RETURN(
      std::unique_ptr<Comm> nccl,
      CreateWorldComm(
          {.backend = CommBackend::kNccl, .stream = memory.stream().native(), .device = index}));
  return BenchBackend(options, "nccl", world, *nccl, memory, report);
}

}  // namespace

double BusBandwidthFactor(const std::string& collective, int ranks) {
  const double n = ranks;
  if (collective == "all_reduce") return 2.0 * (n - 1) / n;
  if (collective == "all_gather" || collective == "reduce_scatter") return (n - 1) / n;
  return 1.0;
}

void AddCommBenchOptions(CLI::App& app, CommBenchOptions& options) {
  app.add_option("-b,--minbytes", options.min_bytes, "Smallest size (bytes, K, M, G)");
  app.add_option("-e,--maxbytes", options.max_bytes, "Largest size (bytes, K, M, G)");
  app.add_option("-f,--stepfactor", options.step_factor, "Multiply the size by this each step");
  app.add_option("-n,--iters", options.iterations, "Timed iterations per size")
      ->check(CLI::PositiveNumber);
  app.add_option("-w,--warmup_iters", options.warmup, "Untimed iterations per size first")
      ->check(CLI::NonNegativeNumber);
  app.add_option("-c,--check", options.check,
                 "Check each result against the exact expected one (#wrong): 1 or 0");
  app.add_option("-d,--datatype", options.dtype, "float, bfloat16 or half");
  app.add_option("-o,--op", options.op, "Reduction: sum or avg")
      ->check(CLI::IsMember({"sum", "avg"}));
  app.add_option("-r,--root", options.root, "Broadcast root")->check(CLI::NonNegativeNumber);
  app.add_option("--collectives", options.collectives,
                 "all_reduce, all_gather, reduce_scatter, broadcast")
      ->check(CLI::IsMember({"all_reduce", "all_gather", "reduce_scatter", "broadcast"}))
      ->delimiter(',');
  app.add_option("--backends", options.backends,
                 "mpi, nccl (nccl is skipped with the reason where a rank has no GPU)")
      ->check(CLI::IsMember({"mpi", "nccl"}))
      ->delimiter(',');
  app.add_option("--json", options.json_path, "Write the JSON record here ('-': stdout)");
}

Result<CommBenchReport> RunCommBench(const CommBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(std::unique_ptr<Comm> world, CreateWorldComm());
  if (options.root >= world->size()) {
    return InvalidArgumentError("-r {}: the root must be a rank below {}", options.root,
                                world->size());
  }
  SLUICE_RETURN_IF_ERROR(ParseBenchDType(options.dtype).status());
  SLUICE_RETURN_IF_ERROR(SizeSweep(options).status());
  CommBenchReport report;
  report.ranks = world->size();
  report.rank = world->rank();
  report.machine = MachineJson();
  report.settings = {{"minbytes", options.min_bytes},
                     {"maxbytes", options.max_bytes},
                     {"stepfactor", options.step_factor},
                     {"iters", options.iterations},
                     {"warmup_iters", options.warmup},
                     {"check", options.check},
                     {"datatype", options.dtype},
                     {"op", options.op},
                     {"root", options.root},
                     {"collectives", options.collectives},
                     {"backends", options.backends},
                     {"ranks", world->size()}};
  for (const std::string& backend : options.backends) {
    if (backend == "mpi") {
      HostMemory memory;
      SLUICE_RETURN_IF_ERROR(BenchBackend(options, "mpi", *world, *world, memory, &report));
    } else {
      SLUICE_RETURN_IF_ERROR(BenchNccl(options, *world, &report));
    }
  }
  return report;
}

std::string FormatCommBenchTable(const CommBenchReport& report) {
  std::string text = fmt::format("# sluice bench comm: {} rank{}, {}\n", report.ranks,
                                 report.ranks == 1 ? "" : "s",
                                 report.machine.value("hostname", std::string("this host")));
  for (const nlohmann::json& skip : report.skipped) {
    text += fmt::format("# {}: skipped: {}\n", skip["backend"].get<std::string>(),
                        skip["reason"].get<std::string>());
  }
  std::string current;
  double busbw_sum = 0;
  int rows_in_table = 0;
  auto close_table = [&] {
    if (rows_in_table > 0) {
      text += fmt::format("# Avg bus bandwidth    : {:.3f} GB/s\n", busbw_sum / rows_in_table);
    }
    busbw_sum = 0;
    rows_in_table = 0;
  };
  for (const CommBenchRow& row : report.rows) {
    const std::string table = row.backend + "/" + row.collective;
    if (table != current) {
      close_table();
      current = table;
      const bool in_place = row.collective == "all_reduce" || row.collective == "broadcast";
      text += fmt::format("#\n# {} over {} ({})\n", row.collective, row.backend,
                          in_place ? "in place" : "out of place");
      text += fmt::format("# {:>10} {:>12} {:>9} {:>6} {:>5} {:>10} {:>8} {:>8} {:>7}\n", "size",
                          "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong");
      text += fmt::format("# {:>10} {:>12} {:>9} {:>6} {:>5} {:>10} {:>8} {:>8} {:>7}\n", "(B)",
                          "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    text += fmt::format("  {:>10} {:>12} {:>9} {:>6} {:>5} {:>10.2f} {:>8.3f} {:>8.3f} {:>7}\n",
                        row.bytes, row.count, row.type, row.redop, row.root, row.time_us,
                        row.algbw_gbps, row.busbw_gbps,
                        row.wrong < 0 ? std::string("N/A") : std::to_string(row.wrong));
    busbw_sum += row.busbw_gbps;
    ++rows_in_table;
  }
  close_table();
  return text;
}

nlohmann::json CommBenchJson(const CommBenchReport& report) {
  nlohmann::json results = nlohmann::json::array();
  for (const CommBenchRow& row : report.rows) {
    results.push_back({{"backend", row.backend},
                       {"collective", row.collective},
                       {"size_bytes", row.bytes},
                       {"count", row.count},
                       {"type", row.type},
                       {"redop", row.redop},
                       {"root", row.root},
                       {"time_us", row.time_us},
                       {"algbw_gbps", row.algbw_gbps},
                       {"busbw_gbps", row.busbw_gbps},
                       {"busbw_factor", BusBandwidthFactor(row.collective, report.ranks)},
                       {"wrong", row.wrong}});
  }
  return {{"benchmark", "comm"},       {"schema_version", 1},         {"date", UtcTimestamp()},
          {"machine", report.machine}, {"settings", report.settings}, {"ranks", report.ranks},
          {"results", results},        {"skipped", report.skipped}};
}

Status RunCommBenchCommand(const CommBenchOptions& options) {
  SLUICE_ASSIGN_OR_RETURN(CommBenchReport report, RunCommBench(options));
  if (report.rank == 0) {
    SLUICE_RETURN_IF_ERROR(PrintTableAndWriteRecord(FormatCommBenchTable(report),
                                                    CommBenchJson(report), options.json_path));
  }
  // #wrong is summed over the ranks: every rank fails alike.
  for (const CommBenchRow& row : report.rows) {
    if (row.wrong > 0) {
      return DataLossError("{} over {} of {} bytes: {} elements differ from the expected result",
                           row.collective, row.backend, row.bytes, row.wrong);
    }
  }
  return OkStatus();
}

}  // namespace sluice::bench
