// Each `sluice` command lives in its own cli/cmd_*.cpp and registers itself here, so adding a
// command touches no shared file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "runtime/status.h"

namespace sluice::cli {

// parent: "" for a top-level command, or a group created by main ("bench", "config").
using CommandFactory = void (*)(CLI::App& parent);

struct CommandRegistration {
  CommandRegistration(const char* parent, CommandFactory factory);
};

// Adds every registered command under its parent in `app`.
void AddRegisteredCommands(CLI::App& app);

// Ends the command: prints a non-OK status to stderr and makes `sluice` exit with 1.
void ExitOnError(const Status& status);

}  // namespace sluice::cli

#define SLUICE_CLI_CONCAT_INNER(a, b) a##b
#define SLUICE_CLI_CONCAT(a, b) SLUICE_CLI_CONCAT_INNER(a, b)
// __COUNTER__, not __LINE__: unique in a unity build's batch of command files too.
#define SLUICE_REGISTER_COMMAND(parent, factory)                                             \
  static ::sluice::cli::CommandRegistration SLUICE_CLI_CONCAT(sluice_command_, __COUNTER__)( \
      parent, factory)
