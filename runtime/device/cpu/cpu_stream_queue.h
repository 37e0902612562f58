// The engine of a CPU stream: one worker thread running a FIFO of tasks. Work tasks are skipped
// once a task has failed (the error is sticky); bookkeeping tasks (event records, stream-ordered
// frees) always run so that events complete and memory comes back. No exception leaves the
// worker: a throwing task becomes the sticky error.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "runtime/status.h"

namespace sluice {

// True on the worker thread of any CpuStreamQueue (device-side code, not a host thread).
bool OnCpuStreamWorker();

class CpuStreamQueue {
 public:
  // `name` prefixes errors ("cpu:0/stream3"); `thread_name` (at most 15 characters) names the
  // worker thread for debuggers and profilers. With `device_pkey` >= 0 the worker grants itself
  // access to device memory protected with that key while it has tasks to run
  // (runtime/device/cpu/memory_protection.h).
  CpuStreamQueue(std::string name, const std::string& thread_name, int device_pkey = -1);
  ~CpuStreamQueue();  // Shutdown()
  CpuStreamQueue(const CpuStreamQueue&) = delete;
  CpuStreamQueue& operator=(const CpuStreamQueue&) = delete;

  // Both return false, enqueuing nothing, once the queue is shut down.
  // `description` names the task in a sticky error: "task 17 (CopyAsync D2H 4.00 KiB)".
  bool Enqueue(std::string description, std::function<Status()> work);
  // `fn` gets the queue's sticky status as of when it runs.
  bool EnqueueBookkeeping(std::function<void(const Status& sticky)> fn);

  // Waits for every task enqueued before the call; the sticky status.
  Status Synchronize();
  // True when every enqueued task has finished; the sticky error if there is one.
  Result<bool> Query() const;
  // Runs what is queued, then stops the worker; later Enqueue calls return false.
  void Shutdown();

  bool OnWorkerThread() const { return std::this_thread::get_id() == worker_id_; }
  std::thread::id worker_id() const { return worker_id_; }
  const std::string& name() const { return name_; }

 private:
  struct Task {
    std::string description;
    std::function<Status()> work;                    // a work task, or
    std::function<void(const Status&)> bookkeeping;  // a bookkeeping task
  };

  bool Push(Task task);
  void Run();

  const std::string name_;
  const int device_pkey_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;          // a task was queued, or shutdown
  mutable std::condition_variable done_cv_;  // a task finished
  std::deque<Task> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
  Status sticky_;
  std::thread worker_;
  std::thread::id worker_id_;
};

}  // namespace sluice
