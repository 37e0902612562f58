#include "cli/hostfile.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace sluice::cli {
namespace {

std::string_view Trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

std::vector<std::string_view> Split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string_view::npos ? end : end - begin));
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> words;
  for (std::string_view part : Split(text, ' ')) {
    for (std::string_view word : Split(part, '\t')) {
      if (!word.empty()) words.push_back(word);
    }
  }
  return words;
}

bool ParseInt(std::string_view text, int* value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size() && !text.empty();
}

// "worker-1@worker-2:0,2" -> {worker-1: {}, worker-2: {0, 2}}; an empty set means every slot.
Result<std::map<std::string, std::set<int>>> ParseFilter(std::string_view text,
                                                         std::string_view flag) {
  std::map<std::string, std::set<int>> filter;
  for (std::string_view item : Split(text, '@')) {
    const size_t colon = item.find(':');
    const std::string host(Trim(item.substr(0, colon)));
    if (host.empty()) {
      return InvalidArgumentError(
          "{} '{}': an empty host name; write hosts joined by @, each optionally with its slots "
          "after a colon, e.g. worker-1@worker-2:0,2",
          flag, text);
    }
    std::set<int>& slots = filter[host];
    if (colon == std::string_view::npos) continue;
    for (std::string_view slot_text : Split(item.substr(colon + 1), ',')) {
      int slot = 0;
      if (!ParseInt(Trim(slot_text), &slot) || slot < 0) {
        return InvalidArgumentError(
            "{} '{}': '{}' is not a slot number (slots are 0, 1, ... after the host and a colon, "
            "comma-separated: {}:0,1)",
            flag, text, slot_text, host);
      }
      slots.insert(slot);
    }
  }
  return filter;
}

std::string HostNames(const std::vector<HostSlots>& hosts) {
  std::vector<std::string> names;
  for (const HostSlots& h : hosts) names.push_back(h.host);
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

Result<std::vector<HostSlots>> ParseHostfile(std::string_view text, std::string_view file) {
  std::vector<HostSlots> hosts;
  std::map<std::string, int, std::less<>> seen;  // host -> line
  int line_number = 0;
  for (std::string_view raw : Split(text, '\n')) {
    ++line_number;
    const std::string_view line = Trim(raw.substr(0, raw.find('#')));
    if (line.empty()) continue;
    const std::vector<std::string_view> words = Words(line);
    const std::string_view host = words[0];
    if (words.size() == 1) {
      return InvalidArgumentError(
          "{}:{}: '{}' has no slot count: write `{} slots=N` (DeepSpeed's hostfile format; N "
          "ranks run there)",
          file, line_number, line, host);
    }
    if (words.size() > 2) {
      return InvalidArgumentError(
          "{}:{}: '{}' has more than a host and its slots: write one `host slots=N` per line "
          "(a # starts a comment)",
          file, line_number, line);
    }
    int slots = 0;
    if (!words[1].starts_with("slots=") || !ParseInt(words[1].substr(6), &slots) || slots < 1) {
      return InvalidArgumentError(
          "{}:{}: '{}' is not slots=N with N a positive integer (e.g. `{} slots=4`)", file,
          line_number, words[1], host);
    }
    if (auto it = seen.find(host); it != seen.end()) {
      return InvalidArgumentError(
          "{}:{}: host {} is already listed on line {}: give each host one line with all its "
          "slots",
          file, line_number, host, it->second);
    }
    seen.emplace(std::string(host), line_number);
    HostSlots entry{.host = std::string(host), .slots = {}, .line = line_number};
    for (int s = 0; s < slots; ++s) entry.slots.push_back(s);
    hosts.push_back(std::move(entry));
  }
  if (hosts.empty()) {
    return InvalidArgumentError(
        "{}: no host in the hostfile: write one `host slots=N` line per machine", file);
  }
  return hosts;
}

Result<std::vector<HostSlots>> LoadHostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return NotFoundError("--hostfile {}: cannot open it (does it exist and can it be read?)", path);
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return IoError("--hostfile {}: reading it failed", path);
  return ParseHostfile(text.str(), path);
}

Result<std::vector<HostSlots>> FilterHosts(const std::vector<HostSlots>& hosts,
                                           std::string_view include, std::string_view exclude) {
  if (!include.empty() && !exclude.empty()) {
    return InvalidArgumentError(
        "--include and --exclude were both given: use one (as DeepSpeed's launcher)");
  }
  if (include.empty() && exclude.empty()) return hosts;
  const bool including = !include.empty();
  const std::string_view flag = including ? "--include" : "--exclude";
  SLUICE_ASSIGN_OR_RETURN(auto filter, ParseFilter(including ? include : exclude, flag));
  for (const auto& [host, slots] : filter) {
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const HostSlots& h) { return h.host == host; });
    if (it == hosts.end()) {
      return InvalidArgumentError("{} names host {}, which the hostfile does not list (it has: {})",
                                  flag, host, HostNames(hosts));
    }
    for (int slot : slots) {
      if (!std::binary_search(it->slots.begin(), it->slots.end(), slot)) {
        return InvalidArgumentError(
            "{} names slot {} of {}, which has slots 0-{} (hostfile line {})", flag, slot, host,
            it->slots.size() - 1, it->line);
      }
    }
  }
  std::vector<HostSlots> kept;
  for (const HostSlots& h : hosts) {
    auto it = filter.find(h.host);
    HostSlots entry = h;
    if (including) {
      if (it == filter.end()) continue;
      if (!it->second.empty()) entry.slots.assign(it->second.begin(), it->second.end());
    } else if (it != filter.end()) {
      if (it->second.empty()) continue;
      std::erase_if(entry.slots, [&](int s) { return it->second.count(s) > 0; });
      if (entry.slots.empty()) continue;
    }
    kept.push_back(std::move(entry));
  }
  if (kept.empty()) {
    return InvalidArgumentError("{} '{}' leaves no slot to run a rank on", flag,
                                including ? include : exclude);
  }
  return kept;
}

int TotalSlots(const std::vector<HostSlots>& hosts) {
  int total = 0;
  for (const HostSlots& h : hosts) total += static_cast<int>(h.slots.size());
  return total;
}

}  // namespace sluice::cli
