// io_uring backend. Each lane owns one ring and one thread. Only that thread touches the ring's
// submission and completion queues, so completions (task work) land on it and callers never
// block on the ring: a caller appends chunks to the lane's pending queue and, if the thread is
// asleep, wakes it through an eventfd whose read is always armed in the ring. The thread sleeps
// in io_uring_wait_cqe, so an idle engine uses no CPU.
#include <liburing.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/aio_backend.h"
#include "offload/aio_errors.h"
#include "runtime/foreign_call.h"
#include "runtime/logging.h"

namespace sluice::offload::internal {
namespace {

constexpr uint64_t kWakeTag = 1;  // user_data of the eventfd read (chunks are 8-byte aligned)
constexpr int kBufferSlots = 64;
constexpr int kFileSlots = 256;

class UringLane {
 public:
  explicit UringLane(const AioOptions& options)
      : depth_(static_cast<unsigned>(options.queue_depth)),
        single_submit_(options.single_submit),
        overlap_events_(options.overlap_events) {}

  ~UringLane() {
    if (thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stopping_ = true;
      }
      Wake();
      thread_.join();
    }
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) close(event_fd_);
  }

  Status Init(bool want_buffers, bool want_files) {
    // One extra entry for the armed eventfd read; the CQ is twice the SQ, so it cannot overflow.
    SLUICE_TRY_URING(io_uring_queue_init(depth_ + 1, &ring_, 0));
    ring_ready_ = true;
    event_fd_ = eventfd(0, EFD_CLOEXEC);
    if (event_fd_ < 0) {
      return IoError("eventfd for the io_uring completion thread failed: {}", ErrnoText(errno));
    }
    if (want_buffers) {
      const int rc = io_uring_register_buffers_sparse(&ring_, kBufferSlots);
      buffers_ = rc == 0;
      if (!buffers_) {
        SLUICE_LOG_ONCE(kDebug, "aio", "io_uring registered-buffer table unavailable: {}",
                        ErrnoText(-rc));
      }
    }
    if (want_files) {
      const int rc = io_uring_register_files_sparse(&ring_, kFileSlots);
      files_ = rc == 0;
      if (!files_) {
        SLUICE_LOG_ONCE(kDebug, "aio", "io_uring registered-file table unavailable: {}",
                        ErrnoText(-rc));
      }
    }
    thread_ = std::thread([this] { Run(); });
    pthread_setname_np(thread_.native_handle(), "sluice-aio");
    return OkStatus();
  }

  io_uring* ring() { return &ring_; }
  bool buffers() const { return buffers_; }
  bool files() const { return files_; }

  void Enqueue(IoChunk* const* chunks, size_t count, size_t stride, size_t first) {
    bool wake = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = first; i < count; i += stride) pending_.push_back(chunks[i]);
      wake = sleeping_;
      sleeping_ = false;
    }
    if (wake) Wake();
  }

 private:
  void Wake() {
    const uint64_t one = 1;
    // The counter only has to become non-zero; EAGAIN (counter saturated) means it already is.
    ssize_t n;
    do {
      n = write(event_fd_, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
  }

  void ArmWakeRead() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    SLUICE_CHECK(sqe != nullptr) << "io_uring submission queue unexpectedly full";
    io_uring_prep_read(sqe, event_fd_, &wake_value_, sizeof(wake_value_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void Prep(IoChunk* chunk) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    SLUICE_CHECK(sqe != nullptr) << "io_uring submission queue unexpectedly full";
    char* buffer = chunk->buffer + chunk->done;
    const auto length = static_cast<unsigned>(chunk->length - chunk->done);
    const uint64_t offset = chunk->offset + chunk->done;
    const FilePart& part = *chunk->part;
    const int fd = part.fixed_index >= 0 ? part.fixed_index : part.fd;
    if (chunk->direction == IoDirection::kRead) {
      if (chunk->buffer_index >= 0) {
        io_uring_prep_read_fixed(sqe, fd, buffer, length, offset, chunk->buffer_index);
      } else {
        io_uring_prep_read(sqe, fd, buffer, length, offset);
      }
    } else {
      if (chunk->buffer_index >= 0) {
        io_uring_prep_write_fixed(sqe, fd, buffer, length, offset, chunk->buffer_index);
      } else {
        io_uring_prep_write(sqe, fd, buffer, length, offset);
      }
    }
    if (part.fixed_index >= 0) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, chunk);
    ++inflight_;
    if (single_submit_) Submit();
  }

  void Submit() {
    // A submission that fails as a whole (EINTR, EAGAIN, EBUSY) leaves the entries queued; they
    // are retried. Per-entry failures arrive as completions with -errno.
    for (int tries = 0; io_uring_sq_ready(&ring_) > 0; ++tries) {
      const int rc = io_uring_submit(&ring_);
      if (rc > 0) continue;
      SLUICE_CHECK((rc == 0 || rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) && tries < 100000)
          << "io_uring_submit failed: " << ErrnoText(-rc);
      std::this_thread::yield();
    }
  }

  // Moves pending chunks into the ring while it has room; chunks of failed requests are skipped.
  void Fill() {
    if (!overlap_events_ && inflight_ > 0) return;
    while (inflight_ < depth_) {
      IoChunk* chunk = nullptr;
      if (!retry_.empty()) {
        chunk = retry_.front();
        retry_.pop_front();
      } else {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending_.empty()) break;
        chunk = pending_.front();
        pending_.pop_front();
      }
      if (chunk->state->failed.load(std::memory_order_acquire)) {
        SkipChunk(*chunk);
        continue;
      }
      Prep(chunk);
    }
  }

  void Run() {
    ArmWakeRead();
    Submit();
    std::vector<std::pair<uint64_t, int>> reaped;
    std::vector<std::pair<IoChunk*, Status>> finished;
    for (;;) {
      Fill();
      Submit();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_ && inflight_ == 0 && pending_.empty() && retry_.empty()) break;
        const bool accepting = inflight_ < depth_ && (overlap_events_ || inflight_ == 0);
        // Chunks that arrived after Fill() looked: take them instead of sleeping.
        if (accepting && !pending_.empty()) continue;
        // Callers only need to wake us when we have room for their chunks.
        sleeping_ = accepting;
      }
      io_uring_cqe* cqe = nullptr;
      const int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR) continue;
      SLUICE_CHECK(rc == 0) << "io_uring_wait_cqe failed: " << ErrnoText(-rc);
      {
        std::lock_guard<std::mutex> lock(mu_);
        sleeping_ = false;
      }
      reaped.clear();
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        reaped.emplace_back(io_uring_cqe_get_data64(cqe), cqe->res);
        ++seen;
      }
      io_uring_cq_advance(&ring_, seen);
      finished.clear();
      for (const auto& [tag, result] : reaped) {
        if (tag == kWakeTag) {
          ArmWakeRead();
          continue;
        }
        --inflight_;
        auto* chunk = reinterpret_cast<IoChunk*>(tag);
        Status error;
        switch (AccountTransfer(*chunk, result, &error)) {
          case ChunkStep::kDone:
            finished.emplace_back(chunk, OkStatus());
            break;
          case ChunkStep::kResubmit:
            retry_.push_back(chunk);
            break;
          case ChunkStep::kFailed:
            finished.emplace_back(chunk, std::move(error));
            break;
        }
      }
      // Refill the ring before completing: a chunk's observer may work on its data (hash it),
      // and the device should not sit idle meanwhile.
      Fill();
      Submit();
      CompleteChunks(finished);
    }
  }

  io_uring ring_{};
  bool ring_ready_ = false;
  int event_fd_ = -1;
  uint64_t wake_value_ = 0;
  bool buffers_ = false;
  bool files_ = false;
  const unsigned depth_;
  const bool single_submit_;
  const bool overlap_events_;
  unsigned inflight_ = 0;       // lane thread only
  std::deque<IoChunk*> retry_;  // lane thread only: remainders of short transfers
  std::mutex mu_;               // guards pending_, sleeping_, stopping_
  std::deque<IoChunk*> pending_;
  bool sleeping_ = false;
  bool stopping_ = false;
  std::thread thread_;
};

class UringBackend final : public IoBackend {
 public:
  Status Init(const AioOptions& options) {
    for (int i = 0; i < options.intra_op_parallelism; ++i) {
      auto lane = std::make_unique<UringLane>(options);
      SLUICE_RETURN_IF_ERROR(lane->Init(options.register_buffers, options.register_files));
      lanes_.push_back(std::move(lane));
    }
    buffers_ = options.register_buffers;
    files_ = options.register_files;
    for (auto& lane : lanes_) {
      buffers_ = buffers_ && lane->buffers();
      files_ = files_ && lane->files();
    }
    return OkStatus();
  }

  ~UringBackend() override { lanes_.clear(); }

  std::string_view name() const override { return "io_uring"; }

  void Enqueue(std::span<IoChunk* const> chunks) override {
    // Consecutive chunks go to different rings so one large request uses all of them.
    const size_t n = lanes_.size();
    const size_t start = next_lane_.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < n && i < chunks.size(); ++i) {
      lanes_[(start + i) % n]->Enqueue(chunks.data(), chunks.size(), n, i);
    }
  }

  int buffer_slots() const override { return buffers_ ? kBufferSlots : 0; }

  Status RegisterBuffers(int first_slot, std::span<const iovec> pieces) override {
    std::vector<__u64> tags(pieces.size(), 0);
    for (size_t i = 0; i < lanes_.size(); ++i) {
      const int rc = io_uring_register_buffers_update_tag(
          lanes_[i]->ring(), static_cast<unsigned>(first_slot), pieces.data(), tags.data(),
          static_cast<unsigned>(pieces.size()));
      if (rc < 0) {
        for (size_t j = 0; j < i; ++j) Clear(*lanes_[j], first_slot, pieces.size());
        return ErrnoStatus(-rc, "io_uring buffer registration failed: {}", ErrnoText(-rc));
      }
    }
    return OkStatus();
  }

  void UnregisterBuffers(int first_slot, int count) override {
    for (auto& lane : lanes_) Clear(*lane, first_slot, static_cast<size_t>(count));
  }

  int file_slots() const override { return files_ ? kFileSlots : 0; }

  Status RegisterFile(int slot, int fd) override {
    for (size_t i = 0; i < lanes_.size(); ++i) {
      const int rc =
          io_uring_register_files_update(lanes_[i]->ring(), static_cast<unsigned>(slot), &fd, 1);
      if (rc < 0) {
        for (size_t j = 0; j < i; ++j) ClearFile(*lanes_[j], slot);
        return ErrnoStatus(-rc, "io_uring file registration failed: {}", ErrnoText(-rc));
      }
    }
    return OkStatus();
  }

  void UnregisterFile(int slot) override {
    for (auto& lane : lanes_) ClearFile(*lane, slot);
  }

 private:
  static void Clear(UringLane& lane, int first_slot, size_t count) {
    std::vector<iovec> empty(count, iovec{nullptr, 0});
    std::vector<__u64> tags(count, 0);
    (void)io_uring_register_buffers_update_tag(lane.ring(), static_cast<unsigned>(first_slot),
                                               empty.data(), tags.data(),
                                               static_cast<unsigned>(count));
  }
  static void ClearFile(UringLane& lane, int slot) {
    int none = -1;
    (void)io_uring_register_files_update(lane.ring(), static_cast<unsigned>(slot), &none, 1);
  }

  std::vector<std::unique_ptr<UringLane>> lanes_;
  std::atomic<size_t> next_lane_{0};
  bool buffers_ = false;
  bool files_ = false;
};

}  // namespace

Result<std::unique_ptr<IoBackend>> MakeUringBackend(const AioOptions& options) {
  auto backend = std::make_unique<UringBackend>();
  Status status = backend->Init(options);
  if (!status.ok()) {
    return UnavailableError("io_uring cannot be used: {}", status.message());
  }
  return std::unique_ptr<IoBackend>(std::move(backend));
}

}  // namespace sluice::offload::internal
