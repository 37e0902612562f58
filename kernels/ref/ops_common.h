// Precondition failures of the op kernels. Kernels sit below runtime/ and its CHECK, so a
// violated precondition (a token id outside the vocabulary, query heads that do not group over
// the key/value heads) is reported here the same way: the op, what is wrong, then abort. Callers
// that take these values from data or configs validate them first (FirstInvalidToken,
// FirstInvalidTarget, AttentionDimsError) and return a Status instead.
#pragma once

namespace sluice::kernels::internal {

[[noreturn]] void OpsFail(const char* op, const char* format, ...)
    __attribute__((format(printf, 2, 3)));

}  // namespace sluice::kernels::internal
