// Reads of a memory-mapped token file that survive the file shrinking under the mapping.
//
// Token files are mapped, not copied (datasets are large). When such a file is truncated while a
// run reads it (a copy restarted over it, a full disk, `> file`), touching one of its lost pages
// raises SIGBUS, whose default action kills the job without a word. A read made through
// GuardMappedRead instead returns DataLoss naming the file, its mapped size and its size now, and
// what to do.
//
// How: one process-wide SIGBUS handler, installed on first use. A guarded read arms a
// thread-local jump target covering the file's mapping (sigsetjmp); a SIGBUS that this thread
// takes at an address inside that mapping while the guard is armed jumps back to it (siglongjmp)
// and the read fails. Every other SIGBUS (another thread, another address, no guard armed) goes
// to the handler that was there before, or to the default action, as if this one did not exist.
//
//   SLUICE_RETURN_IF_ERROR(GuardMappedRead(file, "assembling a training batch", [&] {
//     view.CopyToInt32(begin, count, out);
//   }));
#pragma once

#include <string_view>
#include <type_traits>

#include "engine/data/mapped_file.h"
#include "runtime/status.h"

namespace sluice::data {

namespace internal {
Status RunGuardedRead(const MappedFile& file, std::string_view what, void (*read)(void*),
                      void* arg);
}  // namespace internal

// Runs `read()` with the guard armed for `file`, and returns OK, or DataLoss when the read
// faulted because the file shrank ("{what}" says what was being read, for the message).
//
// A fault leaves `read` midway without unwinding, so `read` must not hold objects with
// destructors (strings, vectors being grown, locks) across its reads of the mapping, and must
// leave its output in a state the caller may discard: it copies plain values out, nothing more.
// Guards do not nest.
template <typename Read>
Status GuardMappedRead(const MappedFile& file, std::string_view what, Read&& read) {
  using Fn = std::remove_reference_t<Read>;
  return internal::RunGuardedRead(
      file, what, [](void* arg) { (*static_cast<Fn*>(arg))(); },
      const_cast<void*>(static_cast<const void*>(&read)));
}

}  // namespace sluice::data
