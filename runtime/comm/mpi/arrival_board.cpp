#include "runtime/comm/mpi/arrival_board.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <mutex>
#include <set>

#include "runtime/comm/mpi/mpi_call.h"
#include "runtime/comm/mpi/mpi_runtime.h"
#include "runtime/logging.h"

namespace sluice::mpi {
namespace {

struct LiveBoards {
  std::mutex mutex;
  std::set<ArrivalBoard*> boards;
};

LiveBoards& Live() {
  static LiveBoards* live = new LiveBoards();  // never destroyed: used from the atexit hook
  return *live;
}

constexpr MPI_Aint kSlotBytes = 64;  // a cache line per rank: writers do not share lines

Result<bool> AllOnOneNode(MPI_Comm comm) {
  int size = 0;
  SLUICE_TRY_MPI(MPI_Comm_size(comm, &size));
  MPI_Comm node = MPI_COMM_NULL;
  SLUICE_TRY_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int node_size = 0;
  const int rc = MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
  SLUICE_TRY_MPI(rc);
  return node_size == size;
}

// Allocates the window and opens the epoch; fills `shared_slots` if it is node-shared.
Status AllocateWindow(MPI_Comm comm, MPI_Win* window, std::vector<int64_t*>* shared_slots) {
  SLUICE_ASSIGN_OR_RETURN(const bool shared, AllOnOneNode(comm));
  MPI_Info info;
  SLUICE_TRY_MPI(MPI_Info_create(&info));
  // Writers replace, readers fetch with MPI_NO_OP: lets the library use plain atomics.
  MPI_Info_set(info, "accumulate_ops", "same_op_no_op");
  MPI_Info_set(info, "same_size", "true");
  MPI_Info_set(info, "same_disp_unit", "true");
  int64_t* own = nullptr;
  const int rc =
      shared ? MPI_Win_allocate_shared(kSlotBytes, sizeof(int64_t), info, comm, &own, window)
             : MPI_Win_allocate(sizeof(int64_t), sizeof(int64_t), info, comm, &own, window);
  MPI_Info_free(&info);
  SLUICE_TRY_MPI(rc);
  SLUICE_TRY_MPI(MPI_Win_set_errhandler(*window, MPI_ERRORS_RETURN));
  *own = 0;
  if (shared) {
    int size = 0;
    SLUICE_TRY_MPI(MPI_Comm_size(comm, &size));
    for (int r = 0; r < size; ++r) {
      MPI_Aint bytes = 0;
      int unit = 0;
      int64_t* slot = nullptr;
      SLUICE_TRY_MPI(MPI_Win_shared_query(*window, r, &bytes, &unit, &slot));
      shared_slots->push_back(slot);
    }
  }
  SLUICE_TRY_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, *window));
  SLUICE_TRY_MPI(MPI_Win_sync(*window));
  return OkStatus();
}

}  // namespace

std::unique_ptr<ArrivalBoard> ArrivalBoard::Create(MPI_Comm comm) {
  MPI_Win window = MPI_WIN_NULL;
  std::vector<int64_t*> shared_slots;
  Status status = AllocateWindow(comm, &window, &shared_slots);
  std::string unavailable;
  if (!status.ok()) {
    unavailable = status.message();
    SLUICE_LOG_ONCE(kWarn, "comm",
                    "no RMA window for arrival tracking ({}): collective timeouts will not name "
                    "the missing ranks",
                    unavailable);
    window = MPI_WIN_NULL;
    shared_slots.clear();
  }
  return std::unique_ptr<ArrivalBoard>(
      new ArrivalBoard(comm, window, std::move(shared_slots), unavailable));
}

ArrivalBoard::ArrivalBoard(MPI_Comm comm, MPI_Win window, std::vector<int64_t*> shared_slots,
                           std::string unavailable)
    : comm_(comm),
      window_(window),
      shared_slots_(std::move(shared_slots)),
      unavailable_(std::move(unavailable)) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  epoch_open_ = window_ != MPI_WIN_NULL;
  std::lock_guard lock(Live().mutex);
  Live().boards.insert(this);
}

ArrivalBoard::~ArrivalBoard() {
  {
    std::lock_guard lock(Live().mutex);
    Live().boards.erase(this);
  }
  if (window_ == MPI_WIN_NULL || MpiFinalized()) return;
  CloseEpoch();
  MPI_Win_free(&window_);
}

void ArrivalBoard::CloseEpoch() {
  if (epoch_open_) MPI_Win_unlock_all(window_);
  epoch_open_ = false;
}

void ArrivalBoard::CloseAllEpochs() {
  std::lock_guard lock(Live().mutex);
  for (ArrivalBoard* board : Live().boards) board->CloseEpoch();
}

void ArrivalBoard::Abandon() {
  if (window_ != MPI_WIN_NULL && !MpiFinalized()) CloseEpoch();
  window_ = MPI_WIN_NULL;
  shared_slots_.clear();
  unavailable_ = "the arrival window was abandoned after an unrecoverable timeout";
}

void ArrivalBoard::Enter(uint64_t seq, CommOpKind kind) {
  if (window_ == MPI_WIN_NULL) return;
  const int64_t mark = static_cast<int64_t>((seq << 8) | static_cast<uint64_t>(kind));
  if (!shared_slots_.empty()) {
    std::atomic_ref<int64_t>(*shared_slots_[static_cast<size_t>(rank_)])
        .store(mark, std::memory_order_release);
    return;
  }
  int rc = MPI_Accumulate(&mark, 1, MPI_INT64_T, rank_, 0, 1, MPI_INT64_T, MPI_REPLACE, window_);
  if (rc == MPI_SUCCESS) rc = MPI_Win_flush(rank_, window_);
  if (rc != MPI_SUCCESS) {
    SLUICE_LOG(kWarn, "comm", "arrival tracking disabled: MPI_Accumulate failed: {}",
               MpiErrorText(rc));
    unavailable_ = "arrival tracking failed: " + MpiErrorText(rc);
    CloseEpoch();
    window_ = MPI_WIN_NULL;  // leaked on purpose: freeing is collective
    shared_slots_.clear();
  }
}

Result<std::vector<ArrivalBoard::Mark>> ArrivalBoard::ReadAll() {
  if (window_ == MPI_WIN_NULL) return UnavailableError("{}", unavailable_);
  std::vector<int64_t> raw(static_cast<size_t>(size_), 0);
  for (size_t r = 0; r < shared_slots_.size(); ++r) {
    raw[r] = std::atomic_ref<int64_t>(*shared_slots_[r]).load(std::memory_order_acquire);
  }
  for (int r = 0; shared_slots_.empty() && r < size_; ++r) {
    SLUICE_TRY_MPI(MPI_Fetch_and_op(nullptr, &raw[static_cast<size_t>(r)], MPI_INT64_T, r, 0,
                                    MPI_NO_OP, window_));
  }
  if (shared_slots_.empty()) SLUICE_TRY_MPI(MPI_Win_flush_all(window_));
  std::vector<Mark> marks(raw.size());
  for (size_t r = 0; r < raw.size(); ++r) {
    const auto value = static_cast<uint64_t>(raw[r]);
    marks[r].seq = value >> 8;
    marks[r].kind = static_cast<CommOpKind>(value & 0xff);
  }
  return marks;
}

std::string ArrivalBoard::DescribeLate(uint64_t seq) {
  Result<std::vector<Mark>> marks = ReadAll();
  if (!marks.ok()) {
    return fmt::format("the ranks that did not arrive are unknown ({})", marks.status().message());
  }
  std::vector<int> late;
  for (int r = 0; r < size_; ++r) {
    if ((*marks)[static_cast<size_t>(r)].seq < seq) late.push_back(r);
  }
  if (late.empty()) {
    return "every rank entered it, yet it did not complete (a rank stopped making progress, or "
           "the ranks disagree on its arguments)";
  }
  std::string text = fmt::format("ranks {} did not arrive", FormatRankList(late));
  const std::vector<int> world = WorldRanksOf(comm_, late);
  if (world != late) text += fmt::format(" (world ranks {})", FormatRankList(world));
  std::vector<std::string> where;
  for (size_t i = 0; i < late.size() && i < 4; ++i) {
    const Mark& mark = (*marks)[static_cast<size_t>(late[i])];
    where.push_back(mark.seq == 0 ? fmt::format("rank {} entered none yet", late[i])
                                  : fmt::format("rank {} last entered {} #{}", late[i],
                                                CommOpName(mark.kind), mark.seq));
  }
  return text + fmt::format("; {}", fmt::join(where, "; "));
}

}  // namespace sluice::mpi
