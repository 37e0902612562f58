#include "cli/slurm_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace sluice::cli {
namespace {

bool ParseSlurmInt(std::string_view text, int* value) {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size() && !text.empty();
}

// Splits at commas outside brackets.
Result<std::vector<std::string_view>> SplitTopLevel(std::string_view text) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t begin = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0 || depth > 1) break;
    if (c == ',' && depth == 0) {
      items.push_back(text.substr(begin, i - begin));
      begin = i + 1;
    }
  }
  if (depth != 0) {
    return InvalidArgumentError("node list '{}': unbalanced or nested brackets", text);
  }
  return items;
}

// "01-03,07" -> 01 02 03 07 (width of each range's lower bound kept).
Result<std::vector<std::string>> ExpandRanges(std::string_view ranges, std::string_view whole) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= ranges.size()) {
    size_t end = ranges.find(',', begin);
    if (end == std::string_view::npos) end = ranges.size();
    const std::string_view range = ranges.substr(begin, end - begin);
    const size_t dash = range.find('-');
    const std::string_view low = range.substr(0, dash);
    const std::string_view high = dash == std::string_view::npos ? low : range.substr(dash + 1);
    int from = 0, to = 0;
    if (!ParseSlurmInt(low, &from) || !ParseSlurmInt(high, &to) || from < 0 || to < from) {
      return InvalidArgumentError(
          "node list '{}': '{}' is not a number or an ascending range like 01-04", whole, range);
    }
    if (to - from > 100000) {
      return InvalidArgumentError("node list '{}': range '{}' is implausibly long", whole, range);
    }
    for (int n = from; n <= to; ++n) out.push_back(fmt::format("{:0{}d}", n, low.size()));
    begin = end + 1;
  }
  return out;
}

// One item: "rack[1-2]-n[01-02]" -> rack1-n01 rack1-n02 rack2-n01 rack2-n02.
Result<std::vector<std::string>> ExpandItem(std::string_view item, std::string_view whole) {
  const size_t open = item.find('[');
  if (open == std::string_view::npos) {
    if (item.find(']') != std::string_view::npos) {
      return InvalidArgumentError("node list '{}': ']' without '['", whole);
    }
    return std::vector<std::string>{std::string(item)};
  }
  const size_t close = item.find(']', open);
  if (close == std::string_view::npos) {
    return InvalidArgumentError("node list '{}': '[' without ']'", whole);
  }
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> middles,
                          ExpandRanges(item.substr(open + 1, close - open - 1), whole));
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> tails,
                          ExpandItem(item.substr(close + 1), whole));
  std::vector<std::string> out;
  const std::string_view head = item.substr(0, open);
  for (const std::string& middle : middles) {
    for (const std::string& tail : tails) out.push_back(fmt::format("{}{}{}", head, middle, tail));
  }
  return out;
}

Result<int> OptionalInt(const Environment& env, std::string_view name) {
  const std::string* text = FindVariable(env, name);
  if (text == nullptr) return 0;
  int value = 0;
  // SLURM_CPUS_ON_NODE and friends can read "8(x2)" in heterogeneous cases: the first figure.
  const std::string_view number = std::string_view(*text).substr(0, text->find('('));
  if (!ParseSlurmInt(number, &value) || value < 0) {
    return InvalidArgumentError("{}={} is not a non-negative integer", name, *text);
  }
  return value;
}

bool Given(const std::vector<std::string>& args, std::string_view flag) {
  return std::any_of(args.begin(), args.end(), [&](const std::string& a) {
    return a == flag || a.starts_with(std::string(flag) + "=");
  });
}

// The tasks per node srun will start for `ranks`: the allocation's layout when all of it runs.
std::vector<int> Layout(const SrunRequest& r, int ranks) {
  if (ranks == r.job.ntasks && r.job.tasks_per_node.size() == r.job.nodes.size()) {
    return r.job.tasks_per_node;
  }
  return {};
}

int RanksOf(const SrunRequest& r) {
  if (r.ranks > 0) return r.ranks;
  return r.job.ntasks > 0 ? r.job.ntasks : static_cast<int>(r.job.nodes.size());
}

}  // namespace

Result<std::vector<std::string>> ExpandNodeList(std::string_view text) {
  SLUICE_ASSIGN_OR_RETURN(std::vector<std::string_view> items, SplitTopLevel(text));
  std::vector<std::string> nodes;
  for (std::string_view item : items) {
    if (item.empty()) continue;
    SLUICE_ASSIGN_OR_RETURN(std::vector<std::string> expanded, ExpandItem(item, text));
    nodes.insert(nodes.end(), expanded.begin(), expanded.end());
  }
  if (nodes.empty()) return InvalidArgumentError("node list '{}' names no node", text);
  return nodes;
}

Result<std::vector<int>> ExpandTasksPerNode(std::string_view text) {
  std::vector<int> tasks;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view item = text.substr(begin, end - begin);
    const size_t paren = item.find("(x");
    int count = 0, repeat = 1;
    const bool ok = ParseSlurmInt(item.substr(0, paren), &count) &&
                    (paren == std::string_view::npos ||
                     (item.ends_with(")") &&
                      ParseSlurmInt(item.substr(paren + 2, item.size() - paren - 3), &repeat)));
    if (!ok || count < 0 || repeat < 1 || repeat > 100000) {
      return InvalidArgumentError(
          "SLURM_TASKS_PER_NODE '{}': '{}' is not N or N(xM) (e.g. 2(x3),1)", text, item);
    }
    tasks.insert(tasks.end(), static_cast<size_t>(repeat), count);
    begin = end + 1;
  }
  return tasks;
}

Result<std::optional<SlurmJob>> SlurmJobFromEnvironment(const Environment& env) {
  const std::string* job_id = FindVariable(env, "SLURM_JOB_ID");
  if (job_id == nullptr) job_id = FindVariable(env, "SLURM_JOBID");
  if (job_id == nullptr) return std::optional<SlurmJob>();
  SlurmJob job;
  job.job_id = *job_id;
  const char* list_variable =
      FindVariable(env, "SLURM_JOB_NODELIST") != nullptr ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
  const std::string* list = FindVariable(env, list_variable);
  if (list == nullptr) {
    return InvalidArgumentError(
        "SLURM_JOB_ID={} is set but SLURM_JOB_NODELIST is not: run sluice launch inside the "
        "allocation (salloc, or an sbatch script), or choose --launcher mpirun",
        job.job_id);
  }
  Result<std::vector<std::string>> nodes = ExpandNodeList(*list);
  if (!nodes.ok()) return Status(nodes.status()).WithContext(list_variable);
  job.nodes = std::move(nodes).value();
  SLUICE_ASSIGN_OR_RETURN(job.ntasks, OptionalInt(env, "SLURM_NTASKS"));
  SLUICE_ASSIGN_OR_RETURN(job.cpus_per_task, OptionalInt(env, "SLURM_CPUS_PER_TASK"));
  SLUICE_ASSIGN_OR_RETURN(job.cpus_on_node, OptionalInt(env, "SLURM_CPUS_ON_NODE"));
  if (const std::string* per_node = FindVariable(env, "SLURM_TASKS_PER_NODE");
      per_node != nullptr) {
    SLUICE_ASSIGN_OR_RETURN(job.tasks_per_node, ExpandTasksPerNode(*per_node));
    if (job.tasks_per_node.size() != job.nodes.size()) {
      return InvalidArgumentError(
          "SLURM_TASKS_PER_NODE={} gives {} nodes but {}={} has {}: the variables are not of "
          "the same job",
          *per_node, job.tasks_per_node.size(), list_variable, *list, job.nodes.size());
    }
    int sum = 0;
    for (int t : job.tasks_per_node) sum += t;
    if (job.ntasks == 0) job.ntasks = sum;
  }
  return std::optional<SlurmJob>(std::move(job));
}

Result<std::vector<std::string>> BuildSrunCommand(const SrunRequest& request) {
  if (request.command.empty()) {
    return InvalidArgumentError(
        "no command to launch: give the sluice command after --, e.g. sluice launch -- train "
        "--config FILE");
  }
  const int ranks = RanksOf(request);
  if (request.job.ntasks > 0 && ranks > request.job.ntasks) {
    return InvalidArgumentError(
        "-n {}: SLURM job {} has {} tasks (SLURM_NTASKS): ask salloc/sbatch for --ntasks={} or "
        "more, or launch fewer ranks",
        ranks, request.job.job_id, request.job.ntasks, ranks);
  }
  std::vector<std::string> argv = {request.srun, fmt::format("--ntasks={}", ranks)};
  const std::vector<int> layout = Layout(request, ranks);
  if (!layout.empty()) argv.push_back(fmt::format("--nodes={}", layout.size()));
  argv.push_back("--kill-on-bad-exit=1");
  if (!Given(request.launcher_args, "--mpi")) argv.push_back("--mpi=pmix");
  if (request.bind == "core") argv.push_back("--cpu-bind=cores");
  if (request.bind == "none") argv.push_back("--cpu-bind=none");
  const bool omp_given =
      std::find(request.environment_names.begin(), request.environment_names.end(),
                "OMP_NUM_THREADS") != request.environment_names.end();
  int threads = request.job.cpus_per_task;
  if (threads == 0 && request.job.cpus_on_node > 0) {
    const int busiest = layout.empty() ? 1 : *std::max_element(layout.begin(), layout.end());
    threads = std::max(1, request.job.cpus_on_node / std::max(1, busiest));
  }
  argv.push_back(omp_given || threads == 0
                     ? std::string("--export=ALL")
                     : fmt::format("--export=ALL,OMP_NUM_THREADS={}", threads));
  argv.insert(argv.end(), request.launcher_args.begin(), request.launcher_args.end());
  argv.push_back(request.sluice);
  argv.insert(argv.end(), request.command.begin(), request.command.end());
  return argv;
}

std::string DescribeSrunPlan(const SrunRequest& request) {
  const int ranks = RanksOf(request);
  const std::vector<int> layout = Layout(request, ranks);
  std::vector<std::string> nodes;
  for (size_t i = 0; i < request.job.nodes.size(); ++i) {
    nodes.push_back(layout.empty() ? request.job.nodes[i]
                                   : fmt::format("{} ({})", request.job.nodes[i], layout[i]));
  }
  return fmt::format("{} ranks on {} of SLURM job {} ({} node{}): {}", ranks,
                     layout.empty() ? "the nodes srun picks" : "all nodes", request.job.job_id,
                     request.job.nodes.size(), request.job.nodes.size() == 1 ? "" : "s",
                     fmt::join(nodes, ", "));
}

}  // namespace sluice::cli
