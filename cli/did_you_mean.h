// "did you mean" for the sluice command line: when CLI11 refuses an argument, the command or flag
// closest to it by edit distance among the registered ones is suggested, e.g.
//   error: unknown flag --rnu-dir for `sluice train`; did you mean --run-dir?
//   error: unknown command 'trian' for `sluice`; did you mean 'train'?
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {

// Edits (insert, delete, substitute, swap two neighbours) that turn `a` into `b`: "stpes" and
// "steps" are 1 apart, as a typo of two swapped keys is one slip.
size_t EditDistance(std::string_view a, std::string_view b);

// The name in `names` closest to `word`, when it is close enough to be the one meant: at most a
// third of the word's length away (at least 1, at most 3 edits), and nearer than any other.
std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& names);

// After a failed parse of `app`: the arguments a command of the parsed chain did not take, each
// with a suggestion where one is close, as one message; nullopt when every argument was taken
// (the error is about something else: a missing or invalid value).
std::optional<std::string> DescribeUnknownArguments(const CLI::App& app);

// What main does with a parse error: the message above when there is one (exit code of the
// error), CLI11's own report otherwise (help, version, validation errors).
int ReportParseError(CLI::App& app, const CLI::ParseError& error);

}  // namespace sluice::cli
