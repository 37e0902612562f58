// The world communicator shared by the tests of one MPI test binary (every rank runs the same
// tests in the same order, so their collectives match).
#pragma once

#include <memory>

#include "runtime/check.h"
#include "runtime/comm.h"
#include "runtime/comm/comm_factory.h"

namespace sluice::testing {

// A failing test on one rank leaves the others waiting in a collective: the timeout turns that
// into errors within seconds instead of a hang until ctest's limit.
inline constexpr double kTestTimeoutSeconds = 20.0;

inline Comm& TestWorld() {
  static std::unique_ptr<Comm> world = [] {
    Result<std::unique_ptr<Comm>> comm = CreateWorldComm({.timeout_seconds = kTestTimeoutSeconds});
    SLUICE_CHECK(comm.ok()) << comm.status().ToString();
    return std::move(comm).value();
  }();
  return *world;
}

}  // namespace sluice::testing
