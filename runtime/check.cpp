#include "runtime/check.h"

#include <cstdio>
#include <cstdlib>

namespace sluice::internal {

CheckFailure::CheckFailure(const char* file, int line, std::string_view condition) {
  stream_ << file << ":" << line << ": CHECK failed: " << condition << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace sluice::internal
