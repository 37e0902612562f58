#include "offload/rank_tiers.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "runtime/logging.h"

namespace sluice::offload {

Status PinnedStagingBudget::Reserve(uint64_t bytes, std::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (limit_ != 0 && reserved_ + bytes > limit_) {
    return ResourceExhaustedError(
        "{} needs {} bytes of pinned staging, but this rank's tiers already hold {} of their "
        "limit of {}: lower that staging's buffer count or size, or raise the limit",
        what, bytes, reserved_, limit_);
  }
  reserved_ += bytes;
  peak_ = std::max(peak_, reserved_);
  return OkStatus();
}

void PinnedStagingBudget::Release(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ -= std::min(bytes, reserved_);
}

uint64_t PinnedStagingBudget::reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

uint64_t PinnedStagingBudget::peak() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

Result<StagingReservation> StagingReservation::Make(PinnedStagingBudget* budget, uint64_t bytes,
                                                    std::string_view what) {
  StagingReservation reservation;
  if (budget == nullptr || bytes == 0) return reservation;
  SLUICE_RETURN_IF_ERROR(budget->Reserve(bytes, what));
  reservation.budget_ = budget;
  reservation.bytes_ = bytes;
  return reservation;
}

StagingReservation& StagingReservation::operator=(StagingReservation&& other) noexcept {
  if (this != &other) {
    Reset();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void StagingReservation::Reset() {
  if (budget_ != nullptr) budget_->Release(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

RankTiers::RankTiers(const RankTiersOptions& options)
    : options_(options), budget_(options.pinned_staging_limit) {}

RankTiers::~RankTiers() = default;

Result<AioEngine*> RankTiers::Aio(std::string_view what) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aio_ == nullptr) {
    Result<std::unique_ptr<AioEngine>> created = AioEngine::Create(options_.aio);
    if (!created.ok()) {
      return Status(created.status())
          .WithContext(
              fmt::format("creating rank {}'s I/O engine (aio.*) for {}", options_.rank, what));
    }
    aio_ = std::move(created).value();
    SLUICE_LOG(kDebug, "offload", "rank {}: one I/O engine on {} for every NVMe tier",
               options_.rank, aio_->backend_name());
  }
  return aio_.get();
}

AioEngine* RankTiers::aio_if_created() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aio_.get();
}

Result<std::unique_ptr<SwapStore>> RankTiers::OpenSwapStore(const SwapStoreOptions& options,
                                                            std::string_view what) {
  SLUICE_ASSIGN_OR_RETURN(AioEngine * aio, Aio(what));
  Result<std::unique_ptr<SwapStore>> created = SwapStore::Create(*aio, options);
  if (!created.ok()) return Status(created.status()).WithContext(fmt::format("creating {}", what));
  return created;
}

}  // namespace sluice::offload
