// Thread-pool backend for machines where io_uring is unavailable (old kernels, seccomp
// profiles that block io_uring_setup): worker threads run pread/pwrite with the same chunking,
// short-transfer and error rules as the io_uring backend. Idle workers sleep on a condition
// variable.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "offload/aio_backend.h"

namespace sluice::offload::internal {
namespace {

constexpr int kMaxWorkers = 64;

class ThreadPoolBackend final : public IoBackend {
 public:
  explicit ThreadPoolBackend(const AioOptions& options) {
    const int workers = std::min(kMaxWorkers, options.queue_depth * options.intra_op_parallelism);
    for (int i = 0; i < workers; ++i) {
      workers_.emplace_back([this] { Run(); });
      pthread_setname_np(workers_.back().native_handle(), "sluice-aio-pool");
    }
  }

  ~ThreadPoolBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }

  std::string_view name() const override { return "threadpool"; }

  void Enqueue(std::span<IoChunk* const> chunks) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.insert(queue_.end(), chunks.begin(), chunks.end());
    }
    if (chunks.size() == 1) {
      cv_.notify_one();
    } else {
      cv_.notify_all();
    }
  }

 private:
  static int64_t Transfer(const IoChunk& chunk) {
    char* buffer = chunk.buffer + chunk.done;
    const uint64_t length = chunk.length - chunk.done;
    const auto offset = static_cast<off_t>(chunk.offset + chunk.done);
    const ssize_t n = chunk.direction == IoDirection::kRead
                          ? pread(chunk.part->fd, buffer, length, offset)
                          : pwrite(chunk.part->fd, buffer, length, offset);
    return n < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(n);
  }

  void Run() {
    for (;;) {
      IoChunk* chunk = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        // Queued chunks are finished before the pool stops.
        if (queue_.empty()) return;
        chunk = queue_.front();
        queue_.pop_front();
      }
      if (chunk->state->failed.load(std::memory_order_acquire)) {
        SkipChunk(*chunk);
        continue;
      }
      Status error;
      ChunkStep step;
      do {
        step = AccountTransfer(*chunk, Transfer(*chunk), &error);
      } while (step == ChunkStep::kResubmit);
      CompleteChunk(*chunk, step == ChunkStep::kDone ? OkStatus() : std::move(error));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<IoChunk*> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<IoBackend> MakeThreadPoolBackend(const AioOptions& options) {
  return std::make_unique<ThreadPoolBackend>(options);
}

}  // namespace sluice::offload::internal
