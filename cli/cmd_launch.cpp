// `sluice launch [-n N] [--hostfile FILE [--include H@H:0,1 | --exclude H:1]]
// [--launcher auto|mpirun|slurm] [--launcher-args "..."] [--oversubscribe auto|yes|no]
// [--bind auto|core|none] [--dry-run] -- CMD ...`: runs `sluice CMD ...` as N ranks: on this node
// or on a hostfile's hosts through mpirun (launch_command.h), or on a SLURM allocation through
// srun (slurm_env.h), as a child that stop requests reach gracefully (launch_supervisor.h); the
// launcher's exit status is the launch's.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/hostfile.h"
#include "cli/launch_command.h"
#include "cli/launch_supervisor.h"
#include "cli/rank_placement.h"
#include "cli/slurm_env.h"
#include "runtime/foreign_call.h"

namespace sluice::cli {
namespace {

struct LaunchOptions {
  int ranks = 0;  // 0: the hostfile's slots or SLURM_NTASKS; required on one node
  std::string hostfile;
  std::string include;
  std::string exclude;
  std::string launcher = "auto";
  std::string launcher_args;
  std::string oversubscribe = "auto";
  std::string bind = "auto";
  bool dry_run = false;
};

Result<std::string> SelfPath() {
  std::string path(4096, '\0');
  const ssize_t length = ::readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (length <= 0) {
    const int err = errno;
    return InternalError("cannot find the sluice binary: readlink /proc/self/exe: {}",
                         internal::ErrnoText(err));
  }
  path.resize(static_cast<size_t>(length));
  return path;
}

std::vector<std::string> SplitWords(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// Prints the plan as shell comments, then the command: the output stays a runnable script.
int PrintDryRun(const std::string& plan, const std::vector<std::string>& argv) {
  std::printf("# %s\n%s\n", plan.c_str(), ShellJoin(argv).c_str());
  return 0;
}

Result<int> RunSrun(const LaunchOptions& options, const SlurmJob& job,
                    std::vector<std::string> command) {
  if (!options.include.empty() || !options.exclude.empty()) {
    return InvalidArgumentError(
        "--include/--exclude filter a --hostfile; under SLURM pass srun's own --nodelist or "
        "--exclude through --launcher-args");
  }
  SrunRequest request;
  request.job = job;
  request.ranks = options.ranks;
  request.command = std::move(command);
  request.bind = options.bind;
  request.launcher_args = SplitWords(options.launcher_args);
  request.environment_names = EnvironmentNames();
  SLUICE_ASSIGN_OR_RETURN(request.sluice, SelfPath());
  const char* path = std::getenv("PATH");
  Result<std::string> srun = FindExecutable("srun", path == nullptr ? "" : path);
  if (!srun.ok() && !options.dry_run) {
    return NotFoundError("{}: a SLURM launch runs srun; run inside the allocation's environment",
                         srun.status().message());
  }
  if (srun.ok()) request.srun = *srun;
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> argv, BuildSrunCommand(request));
  if (options.dry_run) return PrintDryRun(DescribeSrunPlan(request), argv);
  return RunSupervised(argv);
}

Result<int> RunMpirun(const LaunchOptions& options, std::vector<std::string> command) {
  LaunchRequest request;
  request.ranks = options.ranks;
  request.oversubscribe = options.oversubscribe == "yes"  ? Oversubscribe::kYes
                          : options.oversubscribe == "no" ? Oversubscribe::kNo
                                                          : Oversubscribe::kAuto;
  request.binding = options.bind == "core"   ? Binding::kCore
                    : options.bind == "none" ? Binding::kNone
                                             : Binding::kAuto;
  request.command = std::move(command);
  request.root = ::geteuid() == 0;
  request.cores = UsableCores();
  request.environment_names = EnvironmentNames();
  request.launcher_args = SplitWords(options.launcher_args);
  if (!options.hostfile.empty()) {
    SLUICE_ASSIGN_OR_RETURN(std::vector<HostSlots> hosts, LoadHostfile(options.hostfile));
    SLUICE_ASSIGN_OR_RETURN(request.hosts, FilterHosts(hosts, options.include, options.exclude));
  } else if (!options.include.empty() || !options.exclude.empty()) {
    return InvalidArgumentError("--include and --exclude select hosts of a --hostfile; give one");
  } else if (options.ranks < 1) {
    return InvalidArgumentError(
        "-n N is required on one node (without --hostfile or a SLURM allocation): how many "
        "ranks to run");
  }
  SLUICE_ASSIGN_OR_RETURN(request.sluice, SelfPath());
  Result<std::string> mpirun = FindMpirun();
  if (!mpirun.ok() && !options.dry_run) return mpirun.status();
  request.mpirun = mpirun.ok() ? *mpirun : "mpirun";
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> argv, BuildMpirunCommand(request));
  if (options.dry_run) return PrintDryRun(DescribeMpirunPlan(request), argv);
  return RunSupervised(argv);
}

// The exit code: the launcher's (launch_supervisor.h).
Result<int> RunLaunch(const LaunchOptions& options, std::vector<std::string> command) {
  if (options.launcher == "mpirun") return RunMpirun(options, std::move(command));
  SLUICE_ASSIGN_OR_RETURN(std::optional<SlurmJob> job,
                          SlurmJobFromEnvironment(ProcessEnvironment()));
  if (options.launcher == "slurm") {
    if (!job.has_value()) {
      return FailedPreconditionError(
          "--launcher slurm outside a SLURM allocation (SLURM_JOB_ID is not set): run it in "
          "salloc or an sbatch script");
    }
    if (!options.hostfile.empty()) {
      return InvalidArgumentError("--launcher slurm takes its nodes from SLURM, not --hostfile");
    }
    return RunSrun(options, *job, std::move(command));
  }
  // auto: a hostfile means mpirun over its hosts; else the SLURM allocation when there is one.
  if (job.has_value() && options.hostfile.empty()) {
    return RunSrun(options, *job, std::move(command));
  }
  return RunMpirun(options, std::move(command));
}

void AddLaunchCommand(CLI::App& parent) {
  auto options = std::make_shared<LaunchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "launch",
      "Run a sluice command as N ranks: on this node or a hostfile's hosts (mpirun), or on a "
      "SLURM allocation (srun): sluice launch -n 4 -- train --config FILE");
  cmd->add_option("-n,--ranks", options->ranks,
                  "Number of ranks (default: every slot of --hostfile, or SLURM_NTASKS in a "
                  "SLURM allocation; required otherwise)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-H,--hostfile", options->hostfile,
                  "Hosts to run on, DeepSpeed's format: one `host slots=N` per line, # comments");
  cmd->add_option("-i,--include", options->include,
                  "Only these hosts of the hostfile, DeepSpeed's syntax: host1@host2:0,1 (slots "
                  "after a colon)");
  cmd->add_option("-e,--exclude", options->exclude,
                  "Leave out these hosts or slots of the hostfile: host1@host2:1");
  cmd->add_option("--launcher", options->launcher,
                  "auto (srun inside a SLURM allocation unless --hostfile is given, else mpirun), "
                  "mpirun, slurm")
      ->check(CLI::IsMember({"auto", "mpirun", "slurm"}));
  cmd->add_option("--launcher-args", options->launcher_args,
                  "Extra arguments for mpirun or srun, one string (e.g. \"--mca "
                  "btl_tcp_if_include eth0\")");
  cmd->add_option("--oversubscribe", options->oversubscribe,
                  "More ranks than cores (or slots): auto (allow when needed on one node), yes, "
                  "no")
      ->check(CLI::IsMember({"auto", "yes", "no"}));
  cmd->add_option("--bind", options->bind,
                  "Bind ranks to cores: auto (one node: cores / N each when N <= cores; hosts: "
                  "none; SLURM: the site's default), core, none")
      ->check(CLI::IsMember({"auto", "core", "none"}));
  cmd->add_flag("--dry-run", options->dry_run,
                "Print the plan and the mpirun or srun command instead of running it");
  // Everything after -- is the command, options included.
  auto command = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *command,
                  "The sluice command every rank runs, after -- (e.g. -- train --config FILE)");
  cmd->footer(
      "Passes SLUICE_* and OMP_* variables to every rank (srun: the whole environment); "
      "SLUICE_MPIRUN selects mpirun. With --hostfile, Open MPI reaches the hosts over ssh: the "
      "sluice binary and the data must be at the same paths there. A first SIGTERM or Ctrl-C "
      "stops training gracefully (the ranks finish the step and checkpoint), a second kills the "
      "ranks.");
  cmd->callback([options, command] {
    Result<int> exit_code = RunLaunch(*options, *command);
    ExitOnError(exit_code.status());
    if (*exit_code != 0) throw CLI::RuntimeError(*exit_code);
  });
}

SLUICE_REGISTER_COMMAND("", AddLaunchCommand);

}  // namespace
}  // namespace sluice::cli
