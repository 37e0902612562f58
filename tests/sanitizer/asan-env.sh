#!/usr/bin/env bash
# Runs a command in the environment of the ASan suite (make test-asan):
#   tests/sanitizer/asan-env.sh BUILD_DIR COMMAND...
# - Open MPI's components stay loaded until exit (libsluice_keep_modules.so, keep_modules.c), and
#   its own leaks are suppressed by module (openmpi.lsan.supp; the tests sanitizer_openmpi_leaks_*
#   prove they are Open MPI's);
# - ASan leaves SIGSEGV and SIGBUS alone (handle_segv=0, handle_sigbus=0): Sluice installs its own
#   handlers (device memory protection, mapped token files), and their tests check that a fault
#   they do not own still kills the process with the signal, which ASan's handler would turn into
#   a report and exit(1). ASan's checks of memory accesses are unaffected.
set -euo pipefail
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_PRELOAD="$build/lib/libsluice_keep_modules.so${LD_PRELOAD:+:$LD_PRELOAD}"
# verify_asan_link_order=0: the preloaded library comes before the ASan runtime (it has no
# instrumented code and replaces no allocation function).
export ASAN_OPTIONS="verify_asan_link_order=0:handle_segv=0:handle_sigbus=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$here/openmpi.lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
exec "$@"
