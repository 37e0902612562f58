// Where this process's CPU time goes, thread by thread: the user + system time of every live
// thread, read from /proc/self/task/<tid>/stat, and its name (comm). Threads a thread starts
// inherit its name, so an OpenMP team started by a stream worker is counted with that worker.
// Used by `sluice bench step` to show which threads take the cores while a step runs.
//
//   const ThreadCpuSample before = SampleThreadCpu();
//   ... work ...
//   for (const ThreadCpuUse& use : CpuByThreadName(before, SampleThreadCpu())) ...
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace sluice {

struct ThreadCpu {
  pid_t tid = 0;
  std::string name;
  double cpu_s = 0;  // user + system since the thread started
};

using ThreadCpuSample = std::vector<ThreadCpu>;

// Every thread of this process now (a thread that ends while it is read is left out).
ThreadCpuSample SampleThreadCpu();

struct ThreadCpuUse {
  std::string name;  // "sluice-c0s3": device cpu:0's stream 3 (with the OpenMP team it started)
  int threads = 0;   // threads of that name that ran between the samples
  double cpu_s = 0;
};

// The CPU time the threads of each name used between `before` and `after`, largest first. A thread
// born after `before` counts from zero; one that ended before `after` is lost (sample around work
// whose threads outlive it).
std::vector<ThreadCpuUse> CpuByThreadName(const ThreadCpuSample& before,
                                          const ThreadCpuSample& after);

}  // namespace sluice
