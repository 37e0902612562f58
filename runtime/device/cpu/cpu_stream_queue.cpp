#include "runtime/device/cpu/cpu_stream_queue.h"

#include <pthread.h>

#include <exception>
#include <utility>

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

CpuStreamQueue::CpuStreamQueue(std::string name, const std::string& thread_name)
    : name_(std::move(name)) {
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

void CpuStreamQueue::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
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
