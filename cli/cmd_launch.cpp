// `sluice launch -n N [--oversubscribe auto|yes|no] [--bind auto|core|none] [--dry-run] -- CMD
// ...`: runs `sluice CMD ...` as N MPI ranks on this node through mpirun (launch_command.h says
// which flags it adds and why), as a child that stop requests reach gracefully
// (launch_supervisor.h); mpirun's exit status is the launch's.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/command_registry.h"
#include "cli/launch_command.h"
#include "cli/launch_supervisor.h"
#include "runtime/foreign_call.h"

namespace sluice::cli {
namespace {

struct LaunchOptions {
  int ranks = 1;
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

// The exit code: mpirun's (launch_supervisor.h).
Result<int> RunLaunch(const LaunchOptions& options, std::vector<std::string> command) {
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
  SLUICE_ASSIGN_OR_RETURN(request.sluice, SelfPath());
  Result<std::string> mpirun = FindMpirun();
  if (!mpirun.ok() && !options.dry_run) return mpirun.status();
  request.mpirun = mpirun.ok() ? *mpirun : "mpirun";
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> argv, BuildMpirunCommand(request));
  if (options.dry_run) {
    std::printf("%s\n", ShellJoin(argv).c_str());
    return 0;
  }
  return RunSupervised(argv);
}

void AddLaunchCommand(CLI::App& parent) {
  auto options = std::make_shared<LaunchOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "launch",
      "Run a sluice command as N MPI ranks on this node (wraps mpirun): sluice launch -n 4 -- "
      "train --config FILE");
  cmd->add_option("-n,--ranks", options->ranks, "Number of ranks")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--oversubscribe", options->oversubscribe,
                  "More ranks than cores: auto (allow when needed), yes, no")
      ->check(CLI::IsMember({"auto", "yes", "no"}));
  cmd->add_option("--bind", options->bind,
                  "Bind ranks to cores: auto (cores / N each when N <= cores), core, none")
      ->check(CLI::IsMember({"auto", "core", "none"}));
  cmd->add_flag("--dry-run", options->dry_run, "Print the mpirun command instead of running it");
  // Everything after -- is the command, options included.
  auto command = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *command,
                  "The sluice command every rank runs, after -- (e.g. -- train --config FILE)");
  cmd->footer(
      "Passes SLUICE_* and OMP_* variables to every rank; SLUICE_MPIRUN selects mpirun. A first "
      "SIGTERM or Ctrl-C stops training gracefully (the ranks finish the step and checkpoint), a "
      "second kills the ranks.");
  cmd->callback([options, command] {
    Result<int> exit_code = RunLaunch(*options, *command);
    ExitOnError(exit_code.status());
    if (*exit_code != 0) throw CLI::RuntimeError(*exit_code);
  });
}

SLUICE_REGISTER_COMMAND("", AddLaunchCommand);

}  // namespace
}  // namespace sluice::cli
