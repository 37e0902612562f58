#include "runtime/thread_cpu.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>

namespace sluice {
namespace {

bool ReadLine(const std::string& path, std::string* line) {
  std::ifstream in(path);
  return static_cast<bool>(std::getline(in, *line));
}

// utime + stime (fields 14 and 15 of stat), counted after the ")" that ends the name, which
// may itself hold spaces or parentheses.
bool CpuTicks(const std::string& stat, long long* ticks) {
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  long long utime = 0, stime = 0;
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) utime = std::atoll(field.c_str());
    if (index == 15) stime = std::atoll(field.c_str());
  }
  if (!fields) return false;
  *ticks = utime + stime;
  return true;
}

}  // namespace

ThreadCpuSample SampleThreadCpu() {
  ThreadCpuSample sample;
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return sample;
  static const double kTicksPerSecond = static_cast<double>(::sysconf(_SC_CLK_TCK));
  while (const dirent* entry = ::readdir(tasks)) {
    if (!std::isdigit(static_cast<unsigned char>(entry->d_name[0]))) continue;
    const std::string dir = std::string("/proc/self/task/") + entry->d_name;
    std::string name, stat;
    long long ticks = 0;
    if (!ReadLine(dir + "/comm", &name) || !ReadLine(dir + "/stat", &stat) ||
        !CpuTicks(stat, &ticks)) {
      continue;  // ended meanwhile
    }
    sample.push_back({static_cast<pid_t>(std::atoi(entry->d_name)), name,
                      static_cast<double>(ticks) / kTicksPerSecond});
  }
  ::closedir(tasks);
  return sample;
}

std::vector<ThreadCpuUse> CpuByThreadName(const ThreadCpuSample& before,
                                          const ThreadCpuSample& after) {
  std::unordered_map<pid_t, double> start;
  for (const ThreadCpu& thread : before) start[thread.tid] = thread.cpu_s;
  std::map<std::string, ThreadCpuUse> by_name;
  for (const ThreadCpu& thread : after) {
    const auto it = start.find(thread.tid);
    const double used = thread.cpu_s - (it == start.end() ? 0.0 : it->second);
    if (used <= 0) continue;
    ThreadCpuUse& use = by_name[thread.name];
    use.name = thread.name;
    ++use.threads;
    use.cpu_s += used;
  }
  std::vector<ThreadCpuUse> uses;
  for (auto& [name, use] : by_name) uses.push_back(std::move(use));
  std::stable_sort(uses.begin(), uses.end(),
                   [](const ThreadCpuUse& a, const ThreadCpuUse& b) { return a.cpu_s > b.cpu_s; });
  return uses;
}

}  // namespace sluice
