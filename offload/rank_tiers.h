// The one owner, per rank, of what the offload tiers share: the I/O engine (one set of io_uring
// rings and completion threads, however many swap stores sit on it) and the pinned staging
// budget. The NVMe optimizer state (offloaded_adam.h over nvme_state_store.h), the NVMe
// parameters (nvme_param_store.h) and any probe or checkpoint stream of the same rank go through
// it, so a rank holds one engine and its pinned staging is counted in one place.
//
//   RankTiers tiers({.rank = rank, .aio = aio});
//   SLUICE_ASSIGN_OR_RETURN(auto store, tiers.OpenSwapStore(swap_options, "the optimizer state"));
//   ... tiers.staging_budget() ... tiers.Aio("...")
//
// The engine is created on first use (a run with its tiers in host memory makes none until its
// first checkpoint save, which writes through it too). Swap stores and everything holding a
// staging reservation borrow from the tiers: they must be destroyed before it (declare the tiers
// first).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "offload/aio_engine.h"
#include "offload/aio_options.h"
#include "offload/swap_store.h"
#include "runtime/status.h"

namespace sluice::offload {

// Pinned staging bytes reserved by the tiers of one rank, against an optional limit. Reserving
// counts; the caller allocates the memory itself (Device::AllocatePinnedHost), so the budget
// adds no allocation of its own. Thread-safe.
class PinnedStagingBudget {
 public:
  explicit PinnedStagingBudget(uint64_t limit_bytes = 0) : limit_(limit_bytes) {}

  // ResourceExhausted, naming `what`, the bytes held and the limit, when `bytes` more would pass
  // the limit (0: no limit).
  Status Reserve(uint64_t bytes, std::string_view what);
  void Release(uint64_t bytes);

  uint64_t limit() const { return limit_; }
  uint64_t reserved() const;
  uint64_t peak() const;

 private:
  const uint64_t limit_;
  mutable std::mutex mu_;
  uint64_t reserved_ = 0;
  uint64_t peak_ = 0;
};

// A reservation held for the life of a staging buffer; released when destroyed. Movable.
class StagingReservation {
 public:
  StagingReservation() = default;
  // Reserves from `budget` (null: an empty reservation, nothing counted).
  static Result<StagingReservation> Make(PinnedStagingBudget* budget, uint64_t bytes,
                                         std::string_view what);
  ~StagingReservation() { Reset(); }
  StagingReservation(StagingReservation&& other) noexcept { *this = std::move(other); }
  StagingReservation& operator=(StagingReservation&& other) noexcept;
  StagingReservation(const StagingReservation&) = delete;
  StagingReservation& operator=(const StagingReservation&) = delete;

  uint64_t bytes() const { return bytes_; }
  void Reset();

 private:
  PinnedStagingBudget* budget_ = nullptr;
  uint64_t bytes_ = 0;
};

struct RankTiersOptions {
  int rank = 0;
  // The one I/O engine's options (aio.*).
  AioOptions aio;
  // Pinned staging bytes the rank's tiers may reserve together; 0: no limit.
  uint64_t pinned_staging_limit = 0;
};

class RankTiers {
 public:
  explicit RankTiers(const RankTiersOptions& options);
  // Destroys the engine (finishing its I/O): every swap store opened here must be gone.
  ~RankTiers();
  RankTiers(const RankTiers&) = delete;
  RankTiers& operator=(const RankTiers&) = delete;

  int rank() const { return options_.rank; }
  const RankTiersOptions& options() const { return options_; }

  // The rank's I/O engine, created on the first call; an error names `what` wanted it (and the
  // aio.* settings) and leaves the next call to try again.
  Result<AioEngine*> Aio(std::string_view what);
  // The engine if one was created, else null.
  AioEngine* aio_if_created() const;
  // A swap store over the rank's engine (created first if need be). `what` names the store's
  // contents and its directory setting for errors ("the optimizer swap store in
  // zero_optimization.offload_optimizer.nvme_path"). Destroy it before the tiers.
  Result<std::unique_ptr<SwapStore>> OpenSwapStore(const SwapStoreOptions& options,
                                                   std::string_view what);

  PinnedStagingBudget& staging_budget() { return budget_; }
  const PinnedStagingBudget& staging_budget() const { return budget_; }

 private:
  const RankTiersOptions options_;
  PinnedStagingBudget budget_;
  mutable std::mutex mu_;
  std::unique_ptr<AioEngine> aio_;
};

}  // namespace sluice::offload
