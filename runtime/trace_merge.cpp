#include "runtime/trace_merge.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/durable_file.h"

namespace sluice {
namespace {

// What every rank tells the others before the texts move.
enum Word : size_t { kTextBytes, kEvents, kDropped, kClockNs, kHostHash, kWords };

// Exact 64-bit words through a bf16 all-gather, which moves 16-bit words without interpreting
// them (as engine/zero/word_gather.h does; runtime cannot use engine code).
Result<std::vector<uint64_t>> AllGatherWords(Comm& world,
                                             const std::array<uint64_t, kWords>& mine) {
  const size_t world_size = static_cast<size_t>(world.size());
  std::vector<uint16_t> pieces(kWords * 4);
  for (size_t i = 0; i < kWords; ++i) {
    for (size_t k = 0; k < 4; ++k) pieces[i * 4 + k] = static_cast<uint16_t>(mine[i] >> (16 * k));
  }
  auto all = std::make_unique<uint16_t[]>(world_size * pieces.size());
  Status status =
      world.AllGather(pieces.data(), all.get(), world_size * pieces.size(), DType::kBF16);
  if (!status.ok()) {
    // A timed-out collective stays posted and may still write into its buffers (comm.h).
    (void)all.release();
    return std::move(status).WithContext("exchanging the trace sizes");
  }
  std::vector<uint64_t> words(world_size * kWords, 0);
  for (size_t i = 0; i < words.size(); ++i) {
    for (size_t k = 0; k < 4; ++k) words[i] |= static_cast<uint64_t>(all[i * 4 + k]) << (16 * k);
  }
  return words;
}

uint64_t HostHash() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return 0;
  return std::hash<std::string_view>()(std::string_view(name, std::strlen(name)));
}

// The text travels as 16-bit words (the comm moves f32, bf16 and f16 only), in pieces well
// below the backends' per-operation limit.
constexpr size_t kPieceElements = size_t{1} << 28;

Status SendText(Comm& world, const std::string& text) {
  std::string padded = text;
  if (padded.size() % 2 != 0) padded.push_back(' ');
  const size_t elements = padded.size() / 2;
  for (size_t at = 0; at < elements; at += kPieceElements) {
    const size_t count = std::min(kPieceElements, elements - at);
    SLUICE_RETURN_IF_ERROR(
        world.Send(padded.data() + 2 * at, count, DType::kBF16, /*peer=*/0, /*tag=*/0));
  }
  return OkStatus();
}

Result<std::string> RecvText(Comm& world, int rank, size_t bytes) {
  const size_t elements = (bytes + 1) / 2;
  // Leaked on failure: a timed-out receive stays posted and may still write into it.
  auto buffer = std::make_unique<char[]>(2 * elements + 1);
  for (size_t at = 0; at < elements; at += kPieceElements) {
    const size_t count = std::min(kPieceElements, elements - at);
    Status status = world.Recv(buffer.get() + 2 * at, count, DType::kBF16, rank, /*tag=*/0);
    if (!status.ok()) {
      (void)buffer.release();
      return std::move(status).WithContext(fmt::format("receiving rank {}'s trace", rank));
    }
  }
  return std::string(buffer.get(), bytes);
}

}  // namespace

Status GatherChromeTrace(Comm& world, const TraceRecorder& recorder, const std::string& path) {
  const int rank = world.rank();
  const size_t world_size = static_cast<size_t>(world.size());
  // Every rank reads its clock as it leaves the same barrier: the offsets between hosts.
  SLUICE_RETURN_IF_ERROR(world.Barrier());
  const int64_t clock_ns = TraceClockNs();
  // Rank 0's own events need no shift; the others learn theirs from the exchange below.
  std::array<uint64_t, kWords> mine{};
  mine[kEvents] = recorder.Snapshot().size();
  mine[kDropped] = recorder.dropped_events();
  mine[kClockNs] = static_cast<uint64_t>(clock_ns);
  mine[kHostHash] = HostHash();
  // The texts are built once the offsets are known; their sizes go in a second exchange.
  SLUICE_ASSIGN_OR_RETURN(std::vector<uint64_t> info, AllGatherWords(world, mine));
  auto word = [&info](size_t r, Word w) { return info[r * kWords + w]; };
  std::vector<int64_t> offsets(world_size, 0);
  for (size_t r = 0; r < world_size; ++r) {
    if (word(r, kHostHash) != word(0, kHostHash)) {
      offsets[r] =
          static_cast<int64_t>(word(0, kClockNs)) - static_cast<int64_t>(word(r, kClockNs));
    }
  }
  std::string text = recorder.ChromeTraceEvents(rank, offsets[static_cast<size_t>(rank)]);
  mine[kTextBytes] = text.size();
  SLUICE_ASSIGN_OR_RETURN(info, AllGatherWords(world, mine));

  if (rank != 0) return SendText(world, text);

  std::string out = fmt::format(
      "{{\"displayTimeUnit\":\"ms\",\"otherData\":{{\"ranks\":{},\"events\":[", world_size);
  for (size_t r = 0; r < world_size; ++r) {
    fmt::format_to(std::back_inserter(out), "{}{}", r == 0 ? "" : ",", word(r, kEvents));
  }
  out += "],\"dropped_events\":[";
  for (size_t r = 0; r < world_size; ++r) {
    fmt::format_to(std::back_inserter(out), "{}{}", r == 0 ? "" : ",", word(r, kDropped));
  }
  out += "],\"clock_offsets_ns\":[";
  for (size_t r = 0; r < world_size; ++r) {
    fmt::format_to(std::back_inserter(out), "{}{}", r == 0 ? "" : ",", offsets[r]);
  }
  out += "],\"clock\":\"CLOCK_MONOTONIC of rank 0's host\"},\"traceEvents\":[\n";
  out += text;
  for (size_t r = 1; r < world_size; ++r) {
    SLUICE_ASSIGN_OR_RETURN(std::string other,
                            RecvText(world, static_cast<int>(r), word(r, kTextBytes)));
    out += ",\n";
    out += other;
  }
  out += "\n]}\n";
  if (path.empty()) return OkStatus();
  Status written = WriteFileAtomically(path, out, Durability::kUnsynced);
  if (!written.ok()) return std::move(written).WithContext("writing the merged Chrome trace");
  return OkStatus();
}

}  // namespace sluice
