// Exact exchange of 64-bit words (hashes, counts, the bits of doubles) between ranks, for the
// engine's agreement checks and for sums that must come out identical on every rank.
//
// Each word travels as four 16-bit pieces in a DType::kBF16 all-gather, which moves raw 16-bit
// words and never interprets them (an fp32 all-gather could not promise that for NaN patterns).
// Host buffers: the MPI backend.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/comm.h"
#include "runtime/status.h"

namespace sluice::zero {

// Every rank passes the same number of words; the result holds rank r's words at [r * n, r * n
// + n). Collective.
Result<std::vector<uint64_t>> AllGatherWords(Comm& comm, std::span<const uint64_t> mine);

// Sum of one double per rank, added in rank order so every rank gets the same bits; with one
// rank it is the value itself. Collective.
Result<double> SumInRankOrder(Comm& comm, double mine);
// The same for each element of `values`, in place (every rank passes as many).
Status SumInRankOrder(Comm& comm, std::span<double> values);

}  // namespace sluice::zero
