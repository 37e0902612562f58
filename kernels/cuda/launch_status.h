// What every CUDA launcher returns: ok, or the call that failed with its library's error text.
// kernels/ is below runtime/, so this is not runtime's Status; the CUDA column of the ops table
// turns it into one (code kInternal, or kInvalidArgument for a rejected argument).
//
// A launcher checks its arguments (a null pointer with a non-zero size, a shape the kernel does
// not support) before it launches anything and answers them with InvalidArgument; after a launch
// it returns what cudaGetLastError says. Errors of the kernel's execution surface, as in CUDA,
// at the next synchronizing call on the stream.
#pragma once

#include <string>
#include <utility>

namespace sluice::kernels::cuda {

class LaunchStatus {
 public:
  enum class Code { kOk = 0, kInvalidArgument, kCudaError, kCublasError };

  LaunchStatus() = default;
  static LaunchStatus Ok() { return LaunchStatus(); }
  static LaunchStatus InvalidArgument(std::string message) {
    return LaunchStatus(Code::kInvalidArgument, std::move(message));
  }
  // An error: kOk is taken as kCudaError, so that a status with a message never reads as ok.
  static LaunchStatus Error(Code code, std::string message) {
    return LaunchStatus(code == Code::kOk ? Code::kCudaError : code, std::move(message));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string ToString() const { return ok() ? "ok" : message_; }

 private:
  LaunchStatus(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace sluice::kernels::cuda
