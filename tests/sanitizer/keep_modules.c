// Preloaded into the ASan suite's processes (tests/sanitizer/asan-env.sh): dlclose does nothing,
// so the modules Open MPI loads (its MCA components) stay mapped until the process exits and
// LeakSanitizer can name them in its report. Without it, Open MPI's own leaks are reported as
// "<unknown module>", which no suppression can match, and nothing could tell them from Sluice's.
// Built without sanitizers: it is loaded before the ASan runtime.
#include <stddef.h>

int dlclose(void* handle) {
  (void)handle;
  return 0;
}
