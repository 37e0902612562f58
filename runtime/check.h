// SLUICE_CHECK: invariants (programmer errors). A failure prints file, line, the condition and
// any streamed message, then aborts. Recoverable failures use Status instead (runtime/status.h).
#pragma once

#include <sstream>
#include <string_view>

namespace sluice::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, std::string_view condition);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

// Lets `cond ? (void)0 : Voidify() & CheckFailure(...) << msg` type-check as void.
struct Voidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace sluice::internal

#define SLUICE_CHECK(cond)                        \
  (cond) ? (void)0                                \
         : ::sluice::internal::Voidify() &        \
               ::sluice::internal::CheckFailure(__FILE__, __LINE__, #cond)

#define SLUICE_CHECK_OP(a, op, b)                                              \
  SLUICE_CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define SLUICE_CHECK_EQ(a, b) SLUICE_CHECK_OP(a, ==, b)
#define SLUICE_CHECK_NE(a, b) SLUICE_CHECK_OP(a, !=, b)
#define SLUICE_CHECK_LT(a, b) SLUICE_CHECK_OP(a, <, b)
#define SLUICE_CHECK_LE(a, b) SLUICE_CHECK_OP(a, <=, b)
#define SLUICE_CHECK_GT(a, b) SLUICE_CHECK_OP(a, >, b)
#define SLUICE_CHECK_GE(a, b) SLUICE_CHECK_OP(a, >=, b)

#ifdef NDEBUG
#define SLUICE_DCHECK(cond) SLUICE_CHECK(true || (cond))
#else
#define SLUICE_DCHECK(cond) SLUICE_CHECK(cond)
#endif
