#include "kernels/ref/ops_common.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace sluice::kernels::internal {

void OpsFail(const char* op, const char* format, ...) {
  std::fprintf(stderr, "%s: invalid arguments: ", op);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

}  // namespace sluice::kernels::internal
