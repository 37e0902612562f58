// Stop requests (runtime/stop_signal.h): the first SIGTERM, SIGINT or SIGUSR2 is only recorded,
// the second ends the process by the signal's default action; and the fault points a test can
// arm through SLUICE_FAULT_POINT (runtime/fault_point.h). Each case runs in a child process, so
// that the signal dispositions of the test binary stay as they are.
#include "runtime/stop_signal.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "runtime/fault_point.h"

namespace sluice {
namespace {

// Runs `body` in a child; returns its wait status.
int InChild(const std::function<int()>& body) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(body());
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

class StopSignalTest : public ::testing::TestWithParam<int> {};

TEST_P(StopSignalTest, TheFirstIsRecordedTheSecondEndsTheProcess) {
  const int signal = GetParam();
  const int status = InChild([signal] {
    InstallStopSignalHandlers();
    if (StopSignal() != 0) return 10;
    ::raise(signal);
    if (StopSignal() != signal) return 11;
    ::raise(signal);
    return 12;  // not reached: the second signal ends the process
  });
  ASSERT_TRUE(WIFSIGNALED(status)) << "exit code " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), signal);
}

INSTANTIATE_TEST_SUITE_P(Signals, StopSignalTest, ::testing::Values(SIGTERM, SIGINT, SIGUSR2));

TEST(StopSignalNameTest, NamesTheSignals) {
  EXPECT_EQ(StopSignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(StopSignalName(SIGINT), "SIGINT");
  EXPECT_EQ(StopSignalName(SIGUSR2).rfind("SIGUSR2", 0), 0u);
}

TEST(FaultPointTest, ActsOnTheNamedRankAndHitOnly) {
  const int status = InChild([] {
    ::setenv("SLUICE_FAULT_POINT", "test.point:1:3:kill", 1);
    FaultPoint("test.point", 0);   // another rank
    FaultPoint("other.point", 1);  // another point
    FaultPoint("test.point", 1);   // hit 1
    FaultPoint("test.point", 1);   // hit 2
    FaultPoint("test.point", 1);   // hit 3: killed here
    return 0;
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(FaultPointTest, AMalformedValueAbortsNamingTheVariable) {
  EXPECT_DEATH(
      {
        ::setenv("SLUICE_FAULT_POINT", "test.point:x:1:stop", 1);
        FaultPoint("test.point", 0);
      },
      "SLUICE_FAULT_POINT");
}

}  // namespace
}  // namespace sluice
