#include "runtime/thread_cpu.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace sluice {
namespace {

double ThreadCpuSeconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

const ThreadCpuUse* Find(const std::vector<ThreadCpuUse>& uses, const std::string& name) {
  const auto it = std::find_if(uses.begin(), uses.end(),
                               [&name](const ThreadCpuUse& use) { return use.name == name; });
  return it == uses.end() ? nullptr : &*it;
}

// A thread that burns 0.3 s of its own CPU time is charged about that under its name; one that
// sleeps meanwhile is not listed.
TEST(ThreadCpuTest, ChargesTheThreadThatBurnsAndNotTheOneThatSleeps) {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, burned = false, sampled = false;
  std::thread sleeper([&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return sampled; });
  });
  std::thread burner([&] {
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return started; });
    }
    const double until = ThreadCpuSeconds() + 0.3;
    volatile double sink = 0;
    while (ThreadCpuSeconds() < until) sink = sink + 1.0;
    std::unique_lock lock(mu);
    burned = true;
    cv.notify_all();
    cv.wait(lock, [&] { return sampled; });  // alive at the second sample
  });
  pthread_setname_np(sleeper.native_handle(), "test-sleeper");
  pthread_setname_np(burner.native_handle(), "test-burner");

  const ThreadCpuSample before = SampleThreadCpu();
  EXPECT_GE(before.size(), 3u);
  std::vector<ThreadCpuUse> uses;
  {
    std::unique_lock lock(mu);
    started = true;
    cv.notify_all();
    cv.wait(lock, [&] { return burned; });
    uses = CpuByThreadName(before, SampleThreadCpu());
    sampled = true;
    cv.notify_all();
  }
  burner.join();
  sleeper.join();

  const ThreadCpuUse* burner_use = Find(uses, "test-burner");
  ASSERT_NE(burner_use, nullptr);
  EXPECT_EQ(burner_use->threads, 1);
  // /proc counts in clock ticks (10 ms at USER_HZ 100).
  EXPECT_GE(burner_use->cpu_s, 0.27);
  EXPECT_LE(burner_use->cpu_s, 0.5);
  EXPECT_EQ(Find(uses, "test-sleeper"), nullptr);
  EXPECT_TRUE(std::is_sorted(
      uses.begin(), uses.end(),
      [](const ThreadCpuUse& a, const ThreadCpuUse& b) { return a.cpu_s > b.cpu_s; }));
}

}  // namespace
}  // namespace sluice
