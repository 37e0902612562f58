#include "engine/zero/word_gather.h"

#include <bit>
#include <memory>

namespace sluice::zero {

Result<std::vector<uint64_t>> AllGatherWords(Comm& comm, std::span<const uint64_t> mine) {
  constexpr size_t kPieces = 4;
  const size_t n = mine.size();
  const size_t world = static_cast<size_t>(comm.size());
  auto pieces = std::make_unique<uint16_t[]>(n * kPieces);
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < kPieces; ++k) {
      pieces[i * kPieces + k] = static_cast<uint16_t>(mine[i] >> (16 * k));
    }
  }
  auto all = std::make_unique<uint16_t[]>(world * n * kPieces);
  if (n > 0) {
    Status status = comm.AllGather(pieces.get(), all.get(), world * n * kPieces, DType::kBF16);
    if (!status.ok()) {
      // A timed-out collective stays posted and may still write into its buffers
      // (runtime/comm.h): they must outlive it, so they are leaked on purpose.
      (void)pieces.release();
      (void)all.release();
      return status;
    }
  }
  std::vector<uint64_t> words(world * n, 0);
  for (size_t i = 0; i < words.size(); ++i) {
    for (size_t k = 0; k < kPieces; ++k) {
      words[i] |= static_cast<uint64_t>(all[i * kPieces + k]) << (16 * k);
    }
  }
  return words;
}

Result<double> SumInRankOrder(Comm& comm, double mine) {
  SLUICE_RETURN_IF_ERROR(SumInRankOrder(comm, std::span<double>(&mine, 1)));
  return mine;
}

Status SumInRankOrder(Comm& comm, std::span<double> values) {
  std::vector<uint64_t> mine(values.size());
  for (size_t i = 0; i < values.size(); ++i) mine[i] = std::bit_cast<uint64_t>(values[i]);
  SLUICE_ASSIGN_OR_RETURN(std::vector<uint64_t> all, AllGatherWords(comm, mine));
  // From +0, rank 0 first: every rank adds the same bits.
  for (size_t i = 0; i < values.size(); ++i) {
    double sum = 0.0;
    for (size_t at = i; at < all.size(); at += values.size()) sum += std::bit_cast<double>(all[at]);
    values[i] = sum;
  }
  return OkStatus();
}

}  // namespace sluice::zero
