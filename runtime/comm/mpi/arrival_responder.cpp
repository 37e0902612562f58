#include "runtime/comm/mpi/arrival_responder.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/device_access.h"
#include "runtime/logging.h"

namespace sluice::mpi {
namespace {

// How often the thread looks for queries: the most a query waits, and 100 MPI_Test calls a
// second per board when nobody asks.
constexpr auto kPollInterval = std::chrono::milliseconds(10);

struct Reply {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<int64_t> buffer;
};

struct Registration {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<ArrivalSlot> slots;
  int64_t query = 0;
  MPI_Request receive = MPI_REQUEST_NULL;
  std::list<Reply> replies;  // sends in flight, with the buffers they read
};

struct Responder {
  std::mutex mutex;
  std::condition_variable wake;
  std::map<int, std::unique_ptr<Registration>> registrations;
  int next_id = 1;
  std::thread thread;
  bool stop = false;
  bool finalize_hook = false;
};

Responder& Instance() {
  static Responder* responder = new Responder();  // never destroyed: used from MPI_Finalize
  return *responder;
}

void Post(Registration& r) {
  const int rc =
      MPI_Irecv(&r.query, 1, MPI_INT64_T, MPI_ANY_SOURCE, kArrivalQueryTag, r.comm, &r.receive);
  if (rc != MPI_SUCCESS) {
    r.receive = MPI_REQUEST_NULL;
    SLUICE_LOG_ONCE(kWarn, "comm",
                    "arrival queries from other nodes go unanswered: MPI_Irecv failed: {}",
                    MpiErrorText(rc));
  }
}

// Cancels the posted receive and gives up the replies in flight; their buffers are leaked, as
// MPI may still read them.
void Retire(Registration& r) {
  if (r.receive != MPI_REQUEST_NULL) {
    MPI_Cancel(&r.receive);
    MPI_Wait(&r.receive, MPI_STATUS_IGNORE);
  }
  for (Reply& reply : r.replies) {
    int done = 0;
    MPI_Test(&reply.request, &done, MPI_STATUS_IGNORE);
    if (done) continue;
    MPI_Request_free(&reply.request);
    static_cast<void>(new std::vector<int64_t>(std::move(reply.buffer)));
  }
  r.replies.clear();
}

// Answers every query that has arrived for `r` and forgets the replies that went out.
void Serve(Registration& r) {
  for (auto it = r.replies.begin(); it != r.replies.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? r.replies.erase(it) : std::next(it);
  }
  while (r.receive != MPI_REQUEST_NULL) {
    int arrived = 0;
    MPI_Status status;
    const int rc = MPI_Test(&r.receive, &arrived, &status);
    if (rc != MPI_SUCCESS) {
      r.receive = MPI_REQUEST_NULL;
      SLUICE_LOG_ONCE(kWarn, "comm", "arrival queries go unanswered: MPI_Test failed: {}",
                      MpiErrorText(rc));
      return;
    }
    if (!arrived) return;
    Reply& reply = r.replies.emplace_back();
    reply.buffer.reserve(static_cast<size_t>(ArrivalReplyLength(static_cast<int>(r.slots.size()))));
    reply.buffer.push_back(r.query);
    reply.buffer.push_back(static_cast<int64_t>(r.slots.size()));
    for (const ArrivalSlot& slot : r.slots) {
      reply.buffer.push_back(slot.rank);
      reply.buffer.push_back(std::atomic_ref<int64_t>(*slot.mark).load(std::memory_order_acquire));
    }
    if (MPI_Isend(reply.buffer.data(), static_cast<int>(reply.buffer.size()), MPI_INT64_T,
                  status.MPI_SOURCE, kArrivalReplyTag, r.comm, &reply.request) != MPI_SUCCESS) {
      r.replies.pop_back();
    }
    Post(r);
  }
}

void Run() {
  Responder& responder = Instance();
  std::unique_lock lock(responder.mutex);
  while (!responder.stop) {
    for (auto& [id, registration] : responder.registrations) {
      // Its MPI calls progress the comm streams' transfers into device memory too.
      ScopedDeviceAccess access;
      Serve(*registration);
    }
    responder.wake.wait_for(lock, kPollInterval, [&] { return responder.stop; });
  }
}

int StopAtFinalize(MPI_Comm, int, void*, void*) {
  ArrivalResponder::StopAll();
  return MPI_SUCCESS;
}

// MPI_Finalize deletes MPI_COMM_SELF's attributes before anything else: the thread stops there
// whoever finalizes.
Status InstallFinalizeHook() {
  int keyval = MPI_KEYVAL_INVALID;
  SLUICE_TRY_MPI(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &StopAtFinalize, &keyval, nullptr));
  SLUICE_TRY_MPI(MPI_Comm_set_attr(MPI_COMM_SELF, keyval, nullptr));
  return OkStatus();
}

}  // namespace

Result<int> ArrivalResponder::Add(MPI_Comm query_comm, std::vector<ArrivalSlot> slots) {
  Responder& responder = Instance();
  std::lock_guard lock(responder.mutex);
  if (responder.stop) return FailedPreconditionError("the arrival responder was stopped");
  if (!responder.finalize_hook) {
    SLUICE_RETURN_IF_ERROR(InstallFinalizeHook());
    responder.finalize_hook = true;
  }
  auto registration = std::make_unique<Registration>();
  registration->comm = query_comm;
  registration->slots = std::move(slots);
  Post(*registration);
  if (registration->receive == MPI_REQUEST_NULL) {
    return UnavailableError("cannot post the receive for arrival queries");
  }
  const int id = responder.next_id++;
  responder.registrations.emplace(id, std::move(registration));
  if (!responder.thread.joinable()) {
    responder.thread = std::thread(&Run);
    pthread_setname_np(responder.thread.native_handle(), "sluice-arrival");
  }
  return id;
}

void ArrivalResponder::Remove(int id) {
  Responder& responder = Instance();
  std::lock_guard lock(responder.mutex);
  auto it = responder.registrations.find(id);
  if (it == responder.registrations.end()) return;
  Retire(*it->second);
  responder.registrations.erase(it);
}

void ArrivalResponder::StopAll() {
  Responder& responder = Instance();
  {
    std::lock_guard lock(responder.mutex);
    if (responder.stop) return;
    responder.stop = true;
  }
  responder.wake.notify_all();
  if (responder.thread.joinable()) responder.thread.join();
  std::lock_guard lock(responder.mutex);
  for (auto& [id, registration] : responder.registrations) Retire(*registration);
  responder.registrations.clear();
}

}  // namespace sluice::mpi
