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

}  // namespace

Result<std::vector<std::string>> BuildMpirunCommand(const LaunchRequest& request) {
  if (request.ranks < 1) {
    return InvalidArgumentError("-n {}: launch needs at least 1 rank", request.ranks);
  }
  if (request.command.empty()) {
    return InvalidArgumentError(
        "no command to launch: give the sluice command after --, e.g. sluice launch -n 2 -- "
        "train --config FILE");
  }
  const int cores = std::max(1, request.cores);
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
  bool omp_threads_given = false;
  for (const std::string& name : request.environment_names) {
    if (!PassedOn(name)) continue;
    if (name == "OMP_NUM_THREADS") omp_threads_given = true;
    argv.insert(argv.end(), {"-x", name});
  }
  if (!omp_threads_given) {
    argv.insert(argv.end(), {"-x", fmt::format("OMP_NUM_THREADS={}", cores_per_rank)});
  }
  argv.push_back(request.sluice);
  argv.insert(argv.end(), request.command.begin(), request.command.end());
  return argv;
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
