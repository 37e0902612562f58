#include "engine/data/mapped_read_guard.h"

#include <fmt/format.h>

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/check.h"
#include "runtime/foreign_call.h"

namespace sluice::data::internal {
namespace {

// ---- What the handler reads: a thread-local pointer and a saved sigaction, nothing else. ----

struct GuardFrame {
  sigjmp_buf jump;
  uintptr_t begin = 0;  // the armed mapping, [begin, end)
  uintptr_t end = 0;
};

// Constant-initialized plain values: the handler reaches them without a TLS wrapper call, and a
// thread has touched them (arming its guard) before it can take a fault they matter for.
thread_local GuardFrame* t_guard = nullptr;
thread_local uintptr_t t_fault_address = 0;
struct sigaction g_previous_action;

// Faults that are not ours go where they would have gone without this handler.
void ChainToPreviousHandler(int sig, siginfo_t* info, void* context) {
  const struct sigaction& previous = g_previous_action;
  if ((previous.sa_flags & SA_SIGINFO) != 0) {
    if (previous.sa_sigaction != nullptr) previous.sa_sigaction(sig, info, context);
    return;
  }
  if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
    return;
  }
  // Default action: reinstall it. A real fault re-executes the instruction on return and dies
  // the usual way (core dump included); a SIGBUS sent with kill() is raised again.
  struct sigaction default_action;
  std::memset(&default_action, 0, sizeof(default_action));
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(sig, &default_action, nullptr);
  if (info == nullptr || info->si_code <= 0) raise(sig);
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  GuardFrame* guard = t_guard;
  // si_code > 0: raised by the kernel for this thread's own access, not sent with kill().
  if (guard != nullptr && info != nullptr && info->si_code > 0) {
    const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    if (address >= guard->begin && address < guard->end) {
      t_fault_address = address;
      t_guard = nullptr;  // disarmed: a second fault on the way out is not a guarded read's
      // Restores the signal mask saved by sigsetjmp, so SIGBUS is deliverable again. (The
      // protection-key register keeps the value the kernel gives handlers, which denies every
      // key but the default one: the same access a host thread has outside
      // runtime/device/cpu/memory_protection.h's scopes, which set their key explicitly.)
      siglongjmp(guard->jump, 1);
    }
  }
  ChainToPreviousHandler(sig, info, context);
}

Status InstallHandler() {
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_sigaction = OnSigbus;
  // SA_ONSTACK: a thread with an alternate signal stack keeps using it for chained faults.
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGBUS, &action, &g_previous_action) != 0) {
    return InternalError(
        "installing the SIGBUS handler that guards reads of mapped token files: {}",
        ::sluice::internal::ErrnoText(errno));
  }
  return OkStatus();
}

Status InstallHandlerOnce() {
  static const Status installed = InstallHandler();
  return installed;
}

Status FaultError(const MappedFile& file, std::string_view what, uint64_t offset) {
  Result<uint64_t> now = file.CurrentSize();
  if (now.ok() && *now >= file.size()) {
    // The pages are all there: the fault was the device failing to read one (EIO).
    return DataLossError(
        "reading token file '{}' ({}) faulted (SIGBUS) at byte offset {}, though it still holds "
        "{} bytes: the storage under it failed to read that page (see dmesg); check the disk or "
        "copy the file elsewhere, then resume from the last checkpoint (sluice train --resume "
        "latest)",
        file.path(), what, offset, *now);
  }
  const std::string size_now =
      now.ok() ? fmt::format("{} bytes now", *now)
               : fmt::format("a size that cannot be read now ({})", now.status().message());
  return DataLossError(
      "token file '{}' shrank while the run was reading it ({}): it held {} bytes when the run "
      "mapped it and has {}, so reading byte offset {} faulted (SIGBUS). A token file must not "
      "change while a run uses it: restore it (the same bytes: the sampler's order depends on "
      "its size) and resume from the last checkpoint (sluice train --resume latest)",
      file.path(), what, file.size(), size_now, offset);
}

}  // namespace

Status RunGuardedRead(const MappedFile& file, std::string_view what, void (*read)(void*),
                      void* arg) {
  SLUICE_RETURN_IF_ERROR(InstallHandlerOnce());
  SLUICE_CHECK(t_guard == nullptr) << "guarded reads of mapped files do not nest";
  GuardFrame guard;
  guard.begin = reinterpret_cast<uintptr_t>(file.bytes().data());
  guard.end = guard.begin + file.size();
  if (sigsetjmp(guard.jump, /*savemask=*/1) == 0) {
    t_guard = &guard;
    // The handler must see the guard armed before the first read, and armed until the last.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    read(arg);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_guard = nullptr;
    return OkStatus();
  }
  // Back from the handler: t_guard was cleared there.
  return FaultError(file, what, t_fault_address - guard.begin);
}

}  // namespace sluice::data::internal
