#include "cli/launch_command.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>

extern char** environ;

namespace sluice::cli {
namespace {

bool PassedOn(std::string_view name) {
  return name.starts_with("SLUICE_") || name.starts_with("OMP_");
}

// The words after the placement: the caller's variables, OpenMP's share, the launcher
// arguments, the binary and the command.
void AppendRankCommand(const LaunchRequest& request, int cores_per_rank,
                       std::vector<std::string>* argv) {
  bool omp_threads_given = false;
  for (const std::string& name : request.environment_names) {
    if (!PassedOn(name)) continue;
    if (name == "OMP_NUM_THREADS") omp_threads_given = true;
    argv->insert(argv->end(), {"-x", name});
  }
  if (!omp_threads_given) {
    argv->insert(argv->end(), {"-x", fmt::format("OMP_NUM_THREADS={}", cores_per_rank)});
  }
  argv->insert(argv->end(), request.launcher_args.begin(), request.launcher_args.end());
  argv->push_back(request.sluice);
  argv->insert(argv->end(), request.command.begin(), request.command.end());
}

// hostfile.h's TotalSlots, here so that the tests that build this file need no other.
int SlotCount(const std::vector<HostSlots>& hosts) {
  int total = 0;
  for (const HostSlots& h : hosts) total += static_cast<int>(h.slots.size());
  return total;
}

int MaxSlots(const std::vector<HostSlots>& hosts) {
  int most = 1;
  for (const HostSlots& h : hosts) most = std::max(most, static_cast<int>(h.slots.size()));
  return most;
}

// "worker-1:4,worker-2:4"
std::string HostList(const std::vector<HostSlots>& hosts) {
  std::vector<std::string> items;
  for (const HostSlots& h : hosts) items.push_back(fmt::format("{}:{}", h.host, h.slots.size()));
  return fmt::format("{}", fmt::join(items, ","));
}

Result<std::vector<std::string>> BuildHostsCommand(const LaunchRequest& request) {
  const int slots = SlotCount(request.hosts);
  const int ranks = request.ranks > 0 ? request.ranks : slots;
  const bool crowded = ranks > slots;
  if (crowded && request.oversubscribe != Oversubscribe::kYes) {
    return InvalidArgumentError(
        "-n {}: the hosts have {} slots ({}): list more slots in the hostfile, launch fewer "
        "ranks, or pass --oversubscribe yes",
        ranks, slots, HostList(request.hosts));
  }
  std::vector<std::string> argv = {request.mpirun, "-np", std::to_string(ranks), "--host",
                                   HostList(request.hosts)};
  if (request.root) argv.push_back("--allow-run-as-root");
  if (crowded) argv.push_back("--oversubscribe");
  argv.insert(argv.end(), {"--map-by", "slot"});
  argv.insert(argv.end(), {"--bind-to", request.binding == Binding::kCore ? "core" : "none"});
  // Ranks of one host share memory; hosts talk over TCP.
  argv.insert(argv.end(), {"--mca", "btl", "self,vader,tcp"});
  argv.insert(argv.end(), {"--stdin", "none"});
  return argv;
}

}  // namespace

Result<std::vector<std::string>> BuildMpirunCommand(const LaunchRequest& request) {
  if (request.ranks < 1 && request.hosts.empty()) {
    return InvalidArgumentError("-n {}: launch needs at least 1 rank", request.ranks);
  }
  if (request.command.empty()) {
    return InvalidArgumentError(
        "no command to launch: give the sluice command after --, e.g. sluice launch -n 2 -- "
        "train --config FILE");
  }
  const int cores = std::max(1, request.cores);
  if (!request.hosts.empty()) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> argv, BuildHostsCommand(request));
    AppendRankCommand(request, std::max(1, cores / MaxSlots(request.hosts)), &argv);
    return argv;
  }
  const bool crowded = request.ranks > cores;
  if (crowded && request.oversubscribe == Oversubscribe::kNo) {
    return InvalidArgumentError(
        "{} ranks on {} usable cores needs oversubscription: use --oversubscribe yes (or auto), "
        "or fewer ranks",
        request.ranks, cores);
  }
  const bool oversubscribe = request.oversubscribe == Oversubscribe::kYes ||
                             (request.oversubscribe == Oversubscribe::kAuto && crowded);
  const bool bind =
      request.binding == Binding::kCore || (request.binding == Binding::kAuto && !crowded);
  const int cores_per_rank = std::max(1, cores / request.ranks);

  std::vector<std::string> argv = {request.mpirun, "-np", std::to_string(request.ranks)};
  if (request.root) argv.push_back("--allow-run-as-root");
  if (oversubscribe) argv.push_back("--oversubscribe");
  if (bind) {
    argv.insert(argv.end(),
                {"--map-by", fmt::format("slot:PE={}", cores_per_rank), "--bind-to", "core"});
  } else {
    argv.insert(argv.end(), {"--bind-to", "none"});
  }
  // One node: shared memory between ranks, no network transports to probe.
  argv.insert(argv.end(), {"--mca", "btl", "self,vader"});
  // mpirun runs in a background process group (launch_supervisor.h): reading the terminal for
  // rank 0's stdin there would stop it.
  argv.insert(argv.end(), {"--stdin", "none"});
  AppendRankCommand(request, cores_per_rank, &argv);
  return argv;
}

std::string DescribeMpirunPlan(const LaunchRequest& request) {
  const int cores = std::max(1, request.cores);
  if (request.hosts.empty()) {
    return fmt::format("{} rank{} on this node ({} usable cores)", request.ranks,
                       request.ranks == 1 ? "" : "s", cores);
  }
  std::vector<std::string> hosts;
  for (const HostSlots& h : request.hosts) {
    hosts.push_back(
        fmt::format("{} ({}: slots {})", h.host, h.slots.size(), fmt::join(h.slots, ",")));
  }
  const int ranks = request.ranks > 0 ? request.ranks : SlotCount(request.hosts);
  return fmt::format("{} rank{} on {} host{}, in slot order: {}", ranks, ranks == 1 ? "" : "s",
                     request.hosts.size(), request.hosts.size() == 1 ? "" : "s",
                     fmt::join(hosts, ", "));
}

Result<std::string> FindExecutable(std::string_view name, std::string_view search_path) {
  std::vector<std::string> searched;
  size_t begin = 0;
  while (begin <= search_path.size()) {
    size_t end = search_path.find(':', begin);
    if (end == std::string_view::npos) end = search_path.size();
    // An empty PATH entry means the current directory.
    const std::string dir =
        end > begin ? std::string(search_path.substr(begin, end - begin)) : std::string(".");
    const std::string candidate = dir + "/" + std::string(name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    searched.push_back(dir);
    begin = end + 1;
  }
  return NotFoundError("{} is not in any directory of PATH ({})", name, fmt::join(searched, ":"));
}

Result<std::string> FindMpirun() {
  if (const char* given = std::getenv("SLUICE_MPIRUN"); given != nullptr && *given != '\0') {
    if (::access(given, X_OK) != 0) {
      return NotFoundError("SLUICE_MPIRUN={} is not an executable file", given);
    }
    return std::string(given);
  }
  const char* path = std::getenv("PATH");
  Result<std::string> found = FindExecutable("mpirun", path == nullptr ? "" : path);
  if (!found.ok()) {
    return NotFoundError(
        "{}: sluice launch runs Open MPI's mpirun; install it (Debian/Ubuntu: apt-get install "
        "openmpi-bin) or point SLUICE_MPIRUN at it",
        found.status().message());
  }
  return found;
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

std::vector<std::string> EnvironmentNames() {
  std::vector<std::string> names;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    std::string_view text(*entry);
    const size_t eq = text.find('=');
    if (eq != std::string_view::npos && eq > 0) names.emplace_back(text.substr(0, eq));
  }
  return names;
}

std::string ShellJoin(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& word : words) {
    if (!out.empty()) out += ' ';
    const bool plain = !word.empty() && word.find_first_not_of(
                                            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTU"
                                            "VWXYZ0123456789-_./=:,+@%") == std::string::npos;
    if (plain) {
      out += word;
      continue;
    }
    out += '\'';
    for (char c : word) {
      if (c == '\'') {
        out += "'\\''";
      } else {
        out += c;
      }
    }
    out += '\'';
  }
  return out;
}

}  // namespace sluice::cli
