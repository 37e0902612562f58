#include "runtime/comm/mpi/arrival_board.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <string_view>
#include <thread>

#include "runtime/comm/mpi/arrival_responder.h"
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

ArrivalBoard::Mark Decode(int64_t raw) {
  const auto value = static_cast<uint64_t>(raw);
  return ArrivalBoard::Mark{value >> 8, static_cast<CommOpKind>(value & 0xff), true};
}

int64_t Load(int64_t* slot) {
  return std::atomic_ref<int64_t>(*slot).load(std::memory_order_acquire);
}

// Takes the marks of a reply to query `round`; false for a stale reply (to an earlier round
// whose receive was cancelled before it came), which the caller receives past.
bool Absorb(const std::vector<int64_t>& reply, const MPI_Status& status, int64_t round,
            std::vector<ArrivalBoard::Mark>& marks, std::vector<bool>& known) {
  int count = 0;
  MPI_Get_count(&status, MPI_INT64_T, &count);
  if (count < 2 || reply[0] != round) return false;
  const int64_t n = reply[1];
  if (n < 0 || count != ArrivalReplyLength(static_cast<int>(n))) return true;  // not ours: drop
  for (int64_t i = 0; i < n; ++i) {
    const int64_t rank = reply[static_cast<size_t>(2 + 2 * i)];
    if (rank < 0 || rank >= static_cast<int64_t>(marks.size())) continue;
    marks[static_cast<size_t>(rank)] = Decode(reply[static_cast<size_t>(3 + 2 * i)]);
    known[static_cast<size_t>(rank)] = true;
  }
  return true;
}

bool AllKnown(const std::vector<bool>& known) {
  return std::all_of(known.begin(), known.end(), [](bool k) { return k; });
}

}  // namespace

ArrivalBoard::ArrivalBoard(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  slots_.assign(static_cast<size_t>(size_), nullptr);
}

std::unique_ptr<ArrivalBoard> ArrivalBoard::Create(MPI_Comm comm) {
  std::unique_ptr<ArrivalBoard> board(new ArrivalBoard(comm));
  if (Status status = board->AllocateNodeWindow(); !status.ok()) {
    board->unavailable_ = status.message();
    SLUICE_LOG_ONCE(kWarn, "comm",
                    "no shared-memory window for arrival tracking ({}): collective timeouts may "
                    "not name the missing ranks",
                    board->unavailable_);
    board->window_ = MPI_WIN_NULL;  // left allocated if it was: freeing is collective
    board->epoch_open_ = false;
    board->slots_.assign(static_cast<size_t>(board->size_), nullptr);
    board->own_fallback_ = std::make_unique<int64_t>(0);
    board->own_ = board->own_fallback_.get();
    board->slots_[static_cast<size_t>(board->rank_)] = board->own_;
  }
  if (Status status = board->StartAnswering(); !status.ok()) {
    board->unavailable_ = status.message();
    SLUICE_LOG_ONCE(kWarn, "comm",
                    "the other ranks cannot be asked which collective they entered ({}): "
                    "collective timeouts may not name them",
                    board->unavailable_);
  }
  std::lock_guard lock(Live().mutex);
  Live().boards.insert(board.get());
  return board;
}

Status ArrivalBoard::AllocateNodeWindow() {
  SLUICE_TRY_MPI(
      MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_comm_));
  int node_size = 0;
  SLUICE_TRY_MPI(MPI_Comm_size(node_comm_, &node_size));
  int64_t* own = nullptr;
  SLUICE_TRY_MPI(MPI_Win_allocate_shared(kSlotBytes, sizeof(int64_t), MPI_INFO_NULL, node_comm_,
                                         &own, &window_));
  SLUICE_TRY_MPI(MPI_Win_set_errhandler(window_, MPI_ERRORS_RETURN));
  *own = 0;
  // The node's ranks, as ranks of comm_.
  std::vector<int> node_ranks(static_cast<size_t>(node_size));
  std::vector<int> ranks(static_cast<size_t>(node_size));
  for (int r = 0; r < node_size; ++r) node_ranks[static_cast<size_t>(r)] = r;
  MPI_Group node_group = MPI_GROUP_NULL;
  MPI_Group group = MPI_GROUP_NULL;
  SLUICE_TRY_MPI(MPI_Comm_group(node_comm_, &node_group));
  SLUICE_TRY_MPI(MPI_Comm_group(comm_, &group));
  const int rc =
      MPI_Group_translate_ranks(node_group, node_size, node_ranks.data(), group, ranks.data());
  MPI_Group_free(&node_group);
  MPI_Group_free(&group);
  SLUICE_TRY_MPI(rc);
  for (int r = 0; r < node_size; ++r) {
    MPI_Aint bytes = 0;
    int unit = 0;
    int64_t* slot = nullptr;
    SLUICE_TRY_MPI(MPI_Win_shared_query(window_, r, &bytes, &unit, &slot));
    slots_[static_cast<size_t>(ranks[static_cast<size_t>(r)])] = slot;
  }
  own_ = own;
  SLUICE_TRY_MPI(MPI_Win_lock_all(MPI_MODE_NOCHECK, window_));
  epoch_open_ = true;
  SLUICE_TRY_MPI(MPI_Win_sync(window_));
  // Every slot of the node is zero before anyone can read it.
  SLUICE_TRY_MPI(MPI_Barrier(node_comm_));
  return OkStatus();
}

int ArrivalBoard::CountReadable() const {
  return static_cast<int>(
      std::count_if(slots_.begin(), slots_.end(), [](int64_t* slot) { return slot != nullptr; }));
}

Status ArrivalBoard::StartAnswering() {
  // Decided alike on every rank, since it duplicates comm_: some rank cannot read every slot
  // (the ranks span nodes, or a window is missing).
  int readable_here = CountReadable() == size_ ? 1 : 0;
  int readable_everywhere = 0;
  SLUICE_TRY_MPI(MPI_Allreduce(&readable_here, &readable_everywhere, 1, MPI_INT, MPI_MIN, comm_));
  if (readable_everywhere == 1) return OkStatus();
  SLUICE_TRY_MPI(MPI_Comm_dup(comm_, &query_comm_));
  SLUICE_TRY_MPI(MPI_Comm_set_errhandler(query_comm_, MPI_ERRORS_RETURN));
  std::vector<ArrivalSlot> readable;
  for (int r = 0; r < size_; ++r) {
    if (slots_[static_cast<size_t>(r)] != nullptr) {
      readable.push_back(ArrivalSlot{r, slots_[static_cast<size_t>(r)]});
    }
  }
  SLUICE_ASSIGN_OR_RETURN(responder_id_, ArrivalResponder::Add(query_comm_, std::move(readable)));
  return OkStatus();
}

ArrivalBoard::~ArrivalBoard() {
  {
    std::lock_guard lock(Live().mutex);
    Live().boards.erase(this);
  }
  if (abandoned_.load() || MpiFinalized()) return;
  if (responder_id_ != 0) ArrivalResponder::Remove(responder_id_);
  if (query_comm_ != MPI_COMM_NULL) MPI_Comm_free(&query_comm_);
  CloseEpoch();
  if (window_ != MPI_WIN_NULL) MPI_Win_free(&window_);
  if (node_comm_ != MPI_COMM_NULL) MPI_Comm_free(&node_comm_);
}

void ArrivalBoard::CloseEpoch() {
  if (epoch_open_) MPI_Win_unlock_all(window_);
  epoch_open_ = false;
}

void ArrivalBoard::PrepareForFinalize() {
  {
    std::lock_guard lock(Live().mutex);
    for (ArrivalBoard* board : Live().boards) board->CloseEpoch();
  }
  ArrivalResponder::StopAll();
}

void ArrivalBoard::Abandon() {
  if (!MpiFinalized()) CloseEpoch();
  // The responder may still read the slots for the other ranks: nothing is freed.
  own_fallback_.release();
  abandoned_.store(true);
}

void ArrivalBoard::Enter(uint64_t seq, CommOpKind kind) {
  const int64_t mark = static_cast<int64_t>((seq << 8) | static_cast<uint64_t>(kind));
  std::atomic_ref<int64_t>(*own_).store(mark, std::memory_order_release);
}

Result<std::vector<ArrivalBoard::Mark>> ArrivalBoard::ReadAll() {
  if (abandoned_.load()) {
    return UnavailableError("the arrival board was abandoned after an unrecoverable timeout");
  }
  std::lock_guard lock(read_mutex_);
  std::vector<Mark> marks(static_cast<size_t>(size_));
  std::vector<bool> known(static_cast<size_t>(size_), false);
  for (size_t r = 0; r < slots_.size(); ++r) {
    if (slots_[r] == nullptr) continue;
    marks[r] = Decode(Load(slots_[r]));
    known[r] = true;
  }
  if (AllKnown(known)) return marks;
  if (query_comm_ == MPI_COMM_NULL) return UnavailableError("{}", unavailable_);
  Ask(marks, known);
  for (size_t r = 0; r < marks.size(); ++r) marks[r].answered = known[r];
  return marks;
}

void ArrivalBoard::Ask(std::vector<Mark>& marks, std::vector<bool>& known) {
  const int64_t round = ++round_;
  // Freed once every query has gone out; MPI may still read it otherwise.
  auto* query = new int64_t(round);
  struct Pending {
    int rank = 0;
    MPI_Request receive = MPI_REQUEST_NULL;
    std::vector<int64_t> reply;
  };
  const int capacity = ArrivalReplyLength(size_);
  std::vector<Pending> pending;
  std::vector<MPI_Request> sends;
  for (int r = 0; r < size_; ++r) {
    if (known[static_cast<size_t>(r)]) continue;
    Pending& p = pending.emplace_back();
    p.rank = r;
    p.reply.resize(static_cast<size_t>(capacity));
    if (MPI_Irecv(p.reply.data(), capacity, MPI_INT64_T, r, kArrivalReplyTag, query_comm_,
                  &p.receive) != MPI_SUCCESS) {
      p.receive = MPI_REQUEST_NULL;
      continue;
    }
    MPI_Request send = MPI_REQUEST_NULL;
    if (MPI_Isend(query, 1, MPI_INT64_T, r, kArrivalQueryTag, query_comm_, &send) == MPI_SUCCESS) {
      sends.push_back(send);
    }
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(kQueryGraceSeconds);
  auto open = [&] {
    return std::any_of(pending.begin(), pending.end(),
                       [](const Pending& p) { return p.receive != MPI_REQUEST_NULL; });
  };
  while (open() && !AllKnown(known) && std::chrono::steady_clock::now() < deadline) {
    for (Pending& p : pending) {
      if (p.receive == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Status status;
      if (MPI_Test(&p.receive, &done, &status) != MPI_SUCCESS) {
        p.receive = MPI_REQUEST_NULL;
        continue;
      }
      if (!done || Absorb(p.reply, status, round, marks, known)) continue;
      if (MPI_Irecv(p.reply.data(), capacity, MPI_INT64_T, p.rank, kArrivalReplyTag, query_comm_,
                    &p.receive) != MPI_SUCCESS) {
        p.receive = MPI_REQUEST_NULL;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (Pending& p : pending) {
    if (p.receive == MPI_REQUEST_NULL) continue;
    MPI_Status status;
    MPI_Cancel(&p.receive);
    if (MPI_Wait(&p.receive, &status) != MPI_SUCCESS) continue;
    int cancelled = 0;
    MPI_Test_cancelled(&status, &cancelled);
    if (!cancelled) Absorb(p.reply, status, round, marks, known);  // it came meanwhile
  }
  bool all_sent = true;
  for (MPI_Request& send : sends) {
    int done = 0;
    if (MPI_Test(&send, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) continue;
    MPI_Request_free(&send);  // a rank that is gone: the send may never complete
    all_sent = false;
  }
  if (all_sent) delete query;
}

std::string ArrivalBoard::DescribeLate(uint64_t seq) {
  Result<std::vector<Mark>> marks = ReadAll();
  if (!marks.ok()) {
    return fmt::format("the ranks that did not arrive are unknown ({})", marks.status().message());
  }
  std::vector<int> late;
  std::vector<int> silent;
  for (int r = 0; r < size_; ++r) {
    const Mark& mark = (*marks)[static_cast<size_t>(r)];
    if (!mark.answered) {
      silent.push_back(r);
    } else if (mark.seq < seq) {
      late.push_back(r);
    }
  }
  if (late.empty() && silent.empty()) {
    return "every rank entered it, yet it did not complete (a rank stopped making progress, or "
           "the ranks disagree on its arguments)";
  }
  // "ranks 3 did not arrive (world ranks 5)": world ranks for a sub-communicator.
  auto ranks_that = [this](const std::vector<int>& ranks, std::string_view what) {
    std::string text = fmt::format("ranks {} {}", FormatRankList(ranks), what);
    const std::vector<int> world = WorldRanksOf(comm_, ranks);
    if (world != ranks) text += fmt::format(" (world ranks {})", FormatRankList(world));
    return text;
  };
  std::vector<std::string> parts;
  if (!late.empty()) {
    std::vector<std::string> where;
    for (size_t i = 0; i < late.size() && i < 4; ++i) {
      const Mark& mark = (*marks)[static_cast<size_t>(late[i])];
      where.push_back(mark.seq == 0 ? fmt::format("rank {} entered none yet", late[i])
                                    : fmt::format("rank {} last entered {} #{}", late[i],
                                                  CommOpName(mark.kind), mark.seq));
    }
    parts.push_back(
        fmt::format("{}; {}", ranks_that(late, "did not arrive"), fmt::join(where, "; ")));
  }
  if (!silent.empty()) {
    parts.push_back(fmt::format(
        "{}: stopped, dead or unreachable (a running rank answers even while it computes)",
        ranks_that(silent, fmt::format("did not answer the arrival query within {:.1f} s",
                                       kQueryGraceSeconds))));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

}  // namespace sluice::mpi
