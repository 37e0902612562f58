#include "engine/train/monitor_tensorboard.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <utility>

#include "runtime/foreign_call.h"

namespace sluice::train {
namespace {

constexpr std::array<uint32_t, 256> MakeCrc32cTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = MakeCrc32cTable();

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

void AppendLittleEndian(std::string* out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void AppendVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendKey(std::string* out, int field, int wire_type) {
  AppendVarint(out, static_cast<uint64_t>(field << 3 | wire_type));
}

void AppendBytes(std::string* out, int field, std::string_view bytes) {
  AppendKey(out, field, kLengthDelimited);
  AppendVarint(out, bytes.size());
  out->append(bytes);
}

// Event's wall_time and (proto3 leaves a zero out) step; the caller adds the rest.
std::string EventHead(double wall_time, int64_t step) {
  std::string event;
  AppendKey(&event, 1, kFixed64);
  AppendLittleEndian(&event, std::bit_cast<uint64_t>(wall_time), 8);
  if (step != 0) {
    AppendKey(&event, 2, kVarint);
    AppendVarint(&event, static_cast<uint64_t>(step));
  }
  return event;
}

std::string ScalarEvent(double wall_time, const MonitorEvent& scalar) {
  std::string value;
  AppendBytes(&value, 1, scalar.tag);
  AppendKey(&value, 2, kFixed32);
  AppendLittleEndian(&value, std::bit_cast<uint32_t>(static_cast<float>(scalar.value)), 4);
  std::string summary;
  AppendBytes(&summary, 1, value);
  std::string event = EventHead(wall_time, scalar.step);
  AppendBytes(&event, 5, summary);
  return event;
}

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

uint32_t Crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (char c : data) {
    crc = (crc >> 8) ^ kCrc32cTable[(crc ^ static_cast<uint8_t>(c)) & 0xFF];
  }
  return ~crc;
}

uint32_t MaskedCrc32c(std::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string TfRecord(std::string_view payload) {
  std::string record;
  record.reserve(payload.size() + 16);
  AppendLittleEndian(&record, payload.size(), 8);
  AppendLittleEndian(&record, MaskedCrc32c(record), 4);
  record.append(payload);
  AppendLittleEndian(&record, MaskedCrc32c(payload), 4);
  return record;
}

Result<std::unique_ptr<TensorBoardMonitor>> TensorBoardMonitor::Open(
    const std::string& dir, std::optional<int64_t> resumed_step) {
  SLUICE_RETURN_IF_ERROR(CreateDirectories(dir));
  const std::string base = (std::filesystem::path(dir) /
                            fmt::format("events.out.tfevents.{}.{}",
                                        static_cast<int64_t>(std::time(nullptr)), HostName()))
                               .string();
  std::string path = base;
  ScopedFd fd;
  // A resumed run started within the second its previous run started in would reuse its name.
  for (int suffix = 1;; ++suffix) {
    fd = ScopedFd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644));
    if (fd.valid() || errno != EEXIST || suffix > 1000) break;
    path = fmt::format("{}.{}", base, suffix);
  }
  if (!fd.valid()) {
    return IoError("cannot create the TensorBoard events file {}: {}", path,
                   internal::ErrnoText(errno));
  }
  const double now = WallTime();
  std::string version = EventHead(now, 0);
  AppendBytes(&version, 3, "brain.Event:2");
  std::string session_log;
  AppendKey(&session_log, 1, kVarint);
  AppendVarint(&session_log, 1);  // START
  std::string start = EventHead(now, resumed_step.has_value() ? *resumed_step + 1 : 0);
  AppendBytes(&start, 7, session_log);
  SLUICE_RETURN_IF_ERROR(AppendToFile(fd.get(), TfRecord(version) + TfRecord(start), path));
  return std::unique_ptr<TensorBoardMonitor>(new TensorBoardMonitor(std::move(fd), path));
}

Status TensorBoardMonitor::Write(std::span<const MonitorEvent> events) {
  const double now = WallTime();
  std::string records;
  for (const MonitorEvent& event : events) records += TfRecord(ScalarEvent(now, event));
  return AppendToFile(fd_.get(), records, path_);
}

}  // namespace sluice::train
