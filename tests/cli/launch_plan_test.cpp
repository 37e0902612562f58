// Hostfiles, DeepSpeed's --include/--exclude, SLURM's variables and srun commands, the rank a
// launcher's variables describe, and mpirun's command over hosts (no process is started).
#include <gtest/gtest.h>

#include <algorithm>

#include "cli/hostfile.h"
#include "cli/launch_command.h"
#include "cli/rank_placement.h"
#include "cli/slurm_env.h"

namespace sluice::cli {
namespace {

std::string Message(const Status& status) { return status.ToString(); }

TEST(HostfileTest, ReadsDeepSpeedsFormatWithCommentsAndBlankLines) {
  auto hosts =
      ParseHostfile("# cluster\nworker-1 slots=4\n\n  worker-2\tslots=2   # the small one\n", "hf");
  ASSERT_TRUE(hosts.ok()) << hosts.status().ToString();
  ASSERT_EQ(hosts->size(), 2u);
  EXPECT_EQ((*hosts)[0].host, "worker-1");
  EXPECT_EQ((*hosts)[0].slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ((*hosts)[1].host, "worker-2");
  EXPECT_EQ((*hosts)[1].line, 4);
  EXPECT_EQ(TotalSlots(*hosts), 6);
}

TEST(HostfileTest, NamesFileLineAndWhatIsWrong) {
  struct Bad {
    std::string text;
    std::string expected;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"a slots=2\nb\n", "hf:2: 'b' has no slot count"},
           {"a slots=0\n", "hf:1: 'slots=0' is not slots=N"},
           {"a slots=two\n", "hf:1: 'slots=two'"},
           {"a slots=2 gpus=8\n", "hf:1: 'a slots=2 gpus=8' has more than a host"},
           {"a slots=2\n\nb slots=1\na slots=1\n", "hf:4: host a is already listed on line 1"},
           {"# nothing\n\n", "hf: no host"}}) {
    auto hosts = ParseHostfile(bad.text, "hf");
    ASSERT_FALSE(hosts.ok()) << bad.text;
    EXPECT_EQ(hosts.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(Message(hosts.status()).find(bad.expected), std::string::npos)
        << Message(hosts.status());
  }
  EXPECT_EQ(LoadHostfile("/nonexistent/hostfile").status().code(), StatusCode::kNotFound);
}

TEST(HostfileTest, IncludeAndExcludeAsDeepSpeed) {
  auto hosts = ParseHostfile("w1 slots=4\nw2 slots=4\nw3 slots=2\n", "hf");
  ASSERT_TRUE(hosts.ok());
  auto included = FilterHosts(*hosts, "w1@w3:1", "");
  ASSERT_TRUE(included.ok()) << included.status().ToString();
  ASSERT_EQ(included->size(), 2u);
  EXPECT_EQ((*included)[0].slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ((*included)[1].host, "w3");
  EXPECT_EQ((*included)[1].slots, (std::vector<int>{1}));

  auto excluded = FilterHosts(*hosts, "", "w2@w1:0,2");
  ASSERT_TRUE(excluded.ok()) << excluded.status().ToString();
  ASSERT_EQ(excluded->size(), 2u);
  EXPECT_EQ((*excluded)[0].slots, (std::vector<int>{1, 3}));
  EXPECT_EQ((*excluded)[1].host, "w3");

  EXPECT_NE(Message(FilterHosts(*hosts, "w9", "").status()).find("w9"), std::string::npos);
  EXPECT_NE(Message(FilterHosts(*hosts, "w3:2", "").status()).find("slot 2 of w3"),
            std::string::npos);
  EXPECT_NE(Message(FilterHosts(*hosts, "w1", "w2").status()).find("both"), std::string::npos);
  EXPECT_NE(Message(FilterHosts(*hosts, "", "w1@w2@w3").status()).find("no slot"),
            std::string::npos);
  EXPECT_NE(Message(FilterHosts(*hosts, "w1:x", "").status()).find("not a slot number"),
            std::string::npos);
}

TEST(SlurmTest, ExpandsNodeLists) {
  auto nodes = ExpandNodeList("node[01-03,07],gpu-[8-9]-ib,login");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ(*nodes, (std::vector<std::string>{"node01", "node02", "node03", "node07", "gpu-8-ib",
                                              "gpu-9-ib", "login"}));
  auto grid = ExpandNodeList("r[1-2]n[1-2]");
  ASSERT_TRUE(grid.ok());
  EXPECT_EQ(*grid, (std::vector<std::string>{"r1n1", "r1n2", "r2n1", "r2n2"}));
  auto padded = ExpandNodeList("n[098-101]");
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(*padded, (std::vector<std::string>{"n098", "n099", "n100", "n101"}));
  for (const char* bad : {"node[01-03", "node]1[", "node[3-1]", "node[a-b]", ""}) {
    EXPECT_EQ(ExpandNodeList(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(SlurmTest, ExpandsTasksPerNode) {
  auto tasks = ExpandTasksPerNode("2(x3),1");
  ASSERT_TRUE(tasks.ok());
  EXPECT_EQ(*tasks, (std::vector<int>{2, 2, 2, 1}));
  EXPECT_FALSE(ExpandTasksPerNode("2(x)").ok());
  EXPECT_FALSE(ExpandTasksPerNode("x").ok());
}

Environment SlurmAllocation() {
  return {{"SLURM_JOB_ID", "4242"},     {"SLURM_JOB_NODELIST", "node[1-2]"},
          {"SLURM_NTASKS", "4"},        {"SLURM_TASKS_PER_NODE", "2(x2)"},
          {"SLURM_CPUS_ON_NODE", "16"}, {"PATH", "/usr/bin"}};
}

TEST(SlurmTest, ReadsTheAllocationAndPlansSrun) {
  EXPECT_FALSE(SlurmJobFromEnvironment({{"PATH", "/usr/bin"}})->has_value());
  auto job = SlurmJobFromEnvironment(SlurmAllocation());
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(job->has_value());
  EXPECT_EQ((*job)->nodes, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ((*job)->tasks_per_node, (std::vector<int>{2, 2}));

  SrunRequest request;
  request.job = **job;
  request.sluice = "/opt/sluice";
  request.command = {"train", "--config", "c.yaml"};
  auto argv = BuildSrunCommand(request);
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  EXPECT_EQ(*argv,
            (std::vector<std::string>{"srun", "--ntasks=4", "--nodes=2", "--kill-on-bad-exit=1",
                                      "--mpi=pmix", "--export=ALL,OMP_NUM_THREADS=8", "/opt/sluice",
                                      "train", "--config", "c.yaml"}));
  EXPECT_EQ(DescribeSrunPlan(request),
            "4 ranks on all nodes of SLURM job 4242 (2 nodes): node1 (2), node2 (2)");

  // Fewer ranks: srun picks the nodes; the caller's OMP_NUM_THREADS and --mpi stay theirs.
  request.ranks = 2;
  request.environment_names = {"OMP_NUM_THREADS"};
  request.launcher_args = {"--mpi=pmi2"};
  argv = BuildSrunCommand(request);
  ASSERT_TRUE(argv.ok());
  EXPECT_EQ(*argv,
            (std::vector<std::string>{"srun", "--ntasks=2", "--kill-on-bad-exit=1", "--export=ALL",
                                      "--mpi=pmi2", "/opt/sluice", "train", "--config", "c.yaml"}));
  request.ranks = 8;
  EXPECT_NE(Message(BuildSrunCommand(request).status()).find("SLURM_NTASKS"), std::string::npos);
}

TEST(SlurmTest, RefusesVariablesThatDisagree) {
  Environment env = SlurmAllocation();
  env["SLURM_TASKS_PER_NODE"] = "2(x3)";
  EXPECT_NE(Message(SlurmJobFromEnvironment(env).status()).find("not of the same job"),
            std::string::npos);
  env = SlurmAllocation();
  env.erase("SLURM_JOB_NODELIST");
  EXPECT_NE(Message(SlurmJobFromEnvironment(env).status()).find("SLURM_JOB_NODELIST"),
            std::string::npos);
  env = SlurmAllocation();
  env["SLURM_NTASKS"] = "four";
  EXPECT_NE(Message(SlurmJobFromEnvironment(env).status()).find("SLURM_NTASKS=four"),
            std::string::npos);
}

TEST(RankPlacementTest, ReadsSrunsAndMpirunsVariables) {
  // An srun task: rank, world and local rank from SLURM.
  Environment task = SlurmAllocation();
  task.insert({{"SLURM_STEP_ID", "0"},
               {"SLURM_PROCID", "3"},
               {"SLURM_LOCALID", "1"},
               {"SLURM_STEP_NUM_TASKS", "4"}});
  auto placement = RankPlacementFromEnvironment(task);
  ASSERT_TRUE(placement.ok()) << placement.status().ToString();
  ASSERT_TRUE(placement->has_value());
  EXPECT_EQ((*placement)->launcher, "srun");
  EXPECT_EQ((*placement)->rank, 3);
  EXPECT_EQ((*placement)->world_size, 4);
  EXPECT_EQ((*placement)->local_rank, 1);
  EXPECT_TRUE(CheckWorldAgainstLauncher(*placement, 3, 4).ok());
  // The same task as a singleton MPI world: srun gave MPI nothing.
  const Status alone = CheckWorldAgainstLauncher(*placement, 0, 1);
  EXPECT_EQ(alone.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(alone.message().find("--mpi=pmix"), std::string::npos) << alone.message();

  // The batch script of an sbatch job: SLURM_PROCID without a step is no launcher.
  Environment batch = SlurmAllocation();
  batch.insert({{"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"}});
  placement = RankPlacementFromEnvironment(batch);
  ASSERT_TRUE(placement.ok());
  EXPECT_FALSE(placement->has_value());
  EXPECT_TRUE(CheckWorldAgainstLauncher(*placement, 0, 1).ok());

  // mpirun inside an allocation: mpirun's variables win.
  Environment mpirun = task;
  mpirun.insert({{"OMPI_COMM_WORLD_RANK", "1"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  placement = RankPlacementFromEnvironment(mpirun);
  ASSERT_TRUE(placement.ok() && placement->has_value());
  EXPECT_EQ((*placement)->launcher, "mpirun");
  EXPECT_EQ((*placement)->rank, 1);
  EXPECT_EQ((*placement)->world_size, 2);
  EXPECT_EQ(CheckWorldAgainstLauncher(*placement, 0, 2).code(), StatusCode::kFailedPrecondition);

  task["SLURM_PROCID"] = "7";
  EXPECT_EQ(RankPlacementFromEnvironment(task).status().code(), StatusCode::kInvalidArgument);
}

TEST(LaunchHostsTest, RunsOverTheHostsInSlotOrder) {
  auto hosts = ParseHostfile("w1 slots=2\nw2 slots=2\n", "hf");
  ASSERT_TRUE(hosts.ok());
  LaunchRequest r;
  r.ranks = 0;  // every slot
  r.hosts = *hosts;
  r.cores = 8;
  r.mpirun = "/usr/bin/mpirun";
  r.sluice = "/opt/sluice";
  r.command = {"train"};
  r.launcher_args = {"--mca", "plm_rsh_agent", "/x/agent.sh"};
  auto argv = BuildMpirunCommand(r);
  ASSERT_TRUE(argv.ok()) << argv.status().ToString();
  auto after = [&](const std::string& word) {
    auto it = std::find(argv->begin(), argv->end(), word);
    return it == argv->end() || it + 1 == argv->end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(after("-np"), "4");  // every slot by default
  EXPECT_EQ(after("--host"), "w1:2,w2:2");
  EXPECT_EQ(after("--bind-to"), "none");
  EXPECT_EQ(after("btl"), "self,vader,tcp");
  EXPECT_EQ(after("plm_rsh_agent"), "/x/agent.sh");
  EXPECT_EQ(argv->back(), "train");
  EXPECT_EQ(std::count(argv->begin(), argv->end(), "OMP_NUM_THREADS=4"), 1);
  EXPECT_EQ(DescribeMpirunPlan(r),
            "4 ranks on 2 hosts, in slot order: w1 (2: slots 0,1), w2 (2: slots 0,1)");

  r.ranks = 5;
  EXPECT_NE(Message(BuildMpirunCommand(r).status()).find("the hosts have 4 slots"),
            std::string::npos);
  r.oversubscribe = Oversubscribe::kYes;
  argv = BuildMpirunCommand(r);
  ASSERT_TRUE(argv.ok());
  EXPECT_NE(std::find(argv->begin(), argv->end(), "--oversubscribe"), argv->end());
}

}  // namespace
}  // namespace sluice::cli
