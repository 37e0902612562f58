#include "runtime/device/cpu/cpu_stream_queue.h"

#include <fmt/format.h>
#include <pthread.h>

#include <exception>
#include <optional>
#include <utility>

#include "runtime/device/cpu/memory_protection.h"
#include "runtime/trace.h"

namespace sluice {
namespace {

Status RunGuarded(const std::function<Status()>& work) {
  try {
    return work();
  } catch (const std::exception& e) {
    return InternalError("threw an exception: {}", e.what());
  } catch (...) {
    return InternalError("threw an exception that is not a std::exception");
  }
}

}  // namespace

CpuStreamQueue::CpuStreamQueue(std::string name, const std::string& thread_name, int device_pkey)
    : name_(std::move(name)), device_pkey_(device_pkey) {
  worker_ = std::thread([this] { Run(); });
  worker_id_ = worker_.get_id();
  pthread_setname_np(worker_.native_handle(), thread_name.substr(0, 15).c_str());
}

CpuStreamQueue::~CpuStreamQueue() { Shutdown(); }

bool CpuStreamQueue::Push(Task task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(task));
    ++enqueued_;
  }
  work_cv_.notify_one();
  return true;
}

bool CpuStreamQueue::Enqueue(std::string description, std::function<Status()> work) {
  return Push(Task{std::move(description), std::move(work), nullptr});
}

bool CpuStreamQueue::EnqueueBookkeeping(std::function<void(const Status& sticky)> fn) {
  return Push(Task{std::string(), nullptr, std::move(fn)});
}

namespace {
thread_local bool on_stream_worker = false;
}  // namespace

bool OnCpuStreamWorker() { return on_stream_worker; }

void CpuStreamQueue::Run() {
  on_stream_worker = true;
  // Device memory is reachable while the worker drains its queue, and by the threads its tasks
  // start (they inherit this thread's rights), so host code elsewhere faults as on a GPU. The
  // rights are dropped whenever the queue runs dry rather than after every task: between tasks
  // the worker runs only this loop, and a back-to-back stream of small tasks pays for one
  // grant instead of one per task (WRPKRU is not free).
  std::optional<ScopedDeviceAccess> access;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (queue_.empty()) access.reset();
    work_cv_.wait(lock, [this] { return !queue_.empty() || stopping_; });
    if (queue_.empty()) return;  // stopping, and everything ran
    Task task = std::move(queue_.front());
    queue_.pop_front();
    const uint64_t number = completed_ + 1;
    const Status sticky = sticky_;
    lock.unlock();
    Status failure;
    if (task.bookkeeping) {
      task.bookkeeping(sticky);
    } else if (sticky.ok()) {
      if (device_pkey_ >= 0 && !access.has_value()) access.emplace(device_pkey_);
      failure = RunGuarded(task.work);
    }
    if (!failure.ok()) {
      failure.WithContext(fmt::format("stream {}, task {} ({})", name_, number,
                                      task.description.empty() ? "unnamed" : task.description));
    }
    task = Task();  // release what the task captured before reporting it finished
    lock.lock();
    if (!failure.ok()) sticky_ = std::move(failure);
    ++completed_;
    done_cv_.notify_all();
  }
}

Status CpuStreamQueue::Synchronize() {
  if (OnWorkerThread()) {
    return FailedPreconditionError(
        "stream {}: Synchronize called from a task running on this stream (it would wait for "
        "itself); record an event and wait on it from another stream instead",
        name_);
  }
  std::optional<ScopedTraceEvent> host_wait;
  if (!on_stream_worker && TraceRecorder::Global().enabled()) {
    host_wait.emplace(kTraceLaneHostWait, fmt::format("synchronize {}", name_));
  }
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = enqueued_;
  done_cv_.wait(lock, [&] { return completed_ >= target; });
  return sticky_;
}

Result<bool> CpuStreamQueue::Query() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sticky_.ok()) return sticky_;
  return completed_ == enqueued_;
}

void CpuStreamQueue::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !worker_.joinable()) return;
    SLUICE_CHECK(!OnWorkerThread()) << "stream " << name_ << " destroyed by its own task";
    stopping_ = true;
  }
  work_cv_.notify_one();
  if (worker_.joinable()) worker_.join();
}

}  // namespace sluice
