#include "cli/did_you_mean.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <limits>

namespace sluice::cli {
namespace {

// "sluice bench comm": the names from the root down to `app`.
std::string CommandPath(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* at = &app; at != nullptr; at = at->get_parent()) {
    names.push_back(at->get_name());
  }
  std::reverse(names.begin(), names.end());
  return fmt::format("{}", fmt::join(names, " "));
}

std::vector<std::string> FlagNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
    for (const std::string& name : option->get_snames()) names.push_back("-" + name);
  }
  return names;
}

std::vector<std::string> CommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_name().empty()) names.push_back(sub->get_name());
  }
  return names;
}

// One line per argument `app` itself did not take.
void DescribeLevel(const CLI::App& app, std::vector<std::string>* lines) {
  const std::vector<std::string> unknown = app.remaining(/*recurse=*/false);
  if (unknown.empty()) return;
  const std::string path = CommandPath(app);
  const std::vector<std::string> flags = FlagNames(app);
  const std::vector<std::string> commands = CommandNames(app);
  // A word where a command is expected: the unknown command; what follows is its business.
  if (!commands.empty() && !unknown.front().starts_with("-")) {
    const std::string& word = unknown.front();
    std::optional<std::string> close = ClosestName(word, commands);
    lines->push_back(
        close ? fmt::format("unknown command '{}' for `{}`; did you mean '{}'?", word, path, *close)
              : fmt::format("unknown command '{}' for `{}`; it has: {}", word, path,
                            fmt::join(commands, ", ")));
    return;
  }
  for (const std::string& word : unknown) {
    // What follows -- belongs to the command's positional arguments, which CLI11 did not reach.
    if (word == "--") break;
    if (word.starts_with("-")) {
      const std::string flag = word.substr(0, word.find('='));
      std::optional<std::string> close = ClosestName(flag, flags);
      lines->push_back(
          close ? fmt::format("unknown flag {} for `{}`; did you mean {}?", flag, path, *close)
                : fmt::format("unknown flag {} for `{}` (see `{} --help`)", flag, path, path));
    } else if (word == unknown.front()) {
      // A word after an unknown flag is most likely its value: the flag is the news.
      lines->push_back(
          fmt::format("unexpected argument '{}' for `{}` (see `{} --help`)", word, path, path));
    }
  }
}

}  // namespace

size_t EditDistance(std::string_view a, std::string_view b) {
  // Optimal string alignment distance over three rows of the table.
  std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::optional<std::string> ClosestName(std::string_view word,
                                       const std::vector<std::string>& names) {
  // Dashes carry no meaning of their own: "--run-dir" vs "--rnu-dir" is judged on "run-dir".
  auto bare = [](std::string_view s) {
    return s.substr(std::min(s.find_first_not_of('-'), s.size()));
  };
  const std::string_view typed = bare(word);
  const size_t limit = std::clamp<size_t>(typed.size() / 3, 1, 3);
  size_t best = std::numeric_limits<size_t>::max();
  std::optional<std::string> found;
  bool tie = false;
  for (const std::string& name : names) {
    const size_t distance = EditDistance(typed, bare(name));
    if (distance < best) {
      best = distance;
      found = name;
      tie = false;
    } else if (distance == best && found != name) {
      tie = true;
    }
  }
  if (!found || best > limit || tie) return std::nullopt;
  return found;
}

std::optional<std::string> DescribeUnknownArguments(const CLI::App& app) {
  std::vector<std::string> lines;
  const CLI::App* level = &app;
  while (level != nullptr) {
    DescribeLevel(*level, &lines);
    const std::vector<const CLI::App*> parsed =
        level->get_subcommands([](const CLI::App* sub) { return sub->parsed(); });
    level = parsed.empty() ? nullptr : parsed.front();
  }
  if (lines.empty()) return std::nullopt;
  return fmt::format("{}", fmt::join(lines, "\n"));
}

int ReportParseError(CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() != 0) {
    if (std::optional<std::string> message = DescribeUnknownArguments(app)) {
      std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", message->c_str());
      return error.get_exit_code();
    }
  }
  return app.exit(error);
}

}  // namespace sluice::cli
