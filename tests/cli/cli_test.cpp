// The built `sluice`: --version, "did you mean" for unknown commands and flags, launch plans over
// a hostfile and under SLURM's variables (printed, not run), a bad hostfile's error, the
// rank/world check against srun's variables, and train --dry-run writing nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/common/run_command.h"

namespace sluice::cli {
namespace {

using test_cli::CommandResult;
using test_cli::RunSluice;

std::filesystem::path TempDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("sluice_cli_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string Write(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

bool Contains(const CommandResult& r, const std::string& text) {
  return r.output.find(text) != std::string::npos;
}

TEST(CliTest, VersionNamesTheBuildsOptions) {
  const CommandResult r = RunSluice("--version");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.output.starts_with("sluice 0.")) << r.output;
  for (const char* item : {"CUDA", "NCCL", "cuDNN", "oneDNN", "CPU ISA", "GEMM", "BLAS", "MPI"}) {
    EXPECT_TRUE(Contains(r, std::string("\n  ") + item)) << item << "\n" << r.output;
  }
  EXPECT_TRUE(Contains(r, "kernels use ")) << r.output;
  EXPECT_TRUE(Contains(r, "OpenBLAS, core ")) << r.output;
}

TEST(CliTest, SuggestsTheNearestCommandOrFlag) {
  CommandResult r = RunSluice("trian --config x.yaml");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r, "unknown command 'trian' for `sluice`; did you mean 'train'?"))
      << r.output;
  r = RunSluice("bench com");
  EXPECT_TRUE(Contains(r, "did you mean 'comm'?")) << r.output;
  r = RunSluice("train --config x.yaml --rnu-dir out");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r, "unknown flag --rnu-dir for `sluice train`; did you mean --run-dir?"))
      << r.output;
  r = RunSluice("launch --hostfle h -- env");
  EXPECT_TRUE(Contains(r, "did you mean --hostfile?")) << r.output;
  r = RunSluice("--verison");
  EXPECT_TRUE(Contains(r, "did you mean --version?")) << r.output;
  // Nothing near: the command's help is named instead of a guess.
  r = RunSluice("estimate --zzzzzz");
  EXPECT_TRUE(Contains(r,
                       "unknown flag --zzzzzz for `sluice estimate` (see `sluice estimate "
                       "--help`)"))
      << r.output;
}

TEST(CliTest, LaunchPlansAHostfile) {
  const std::filesystem::path dir = TempDir("hostfile");
  const std::string hosts =
      Write(dir / "hosts", "# two hosts\nworker-1 slots=2\n\nworker-2 slots=2 # spare\n");
  CommandResult r =
      RunSluice("launch --hostfile " + hosts + " --exclude worker-2:1 --dry-run -- env", "", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r,
                       "# 3 ranks on 2 hosts, in slot order: worker-1 (2: slots 0,1), "
                       "worker-2 (1: slots 0)"))
      << r.output;
  EXPECT_TRUE(Contains(r, " -np 3 --host worker-1:2,worker-2:1 ")) << r.output;

  const std::string bad = Write(dir / "bad", "worker-1 slots=2\nworker-2 slot=2\n");
  r = RunSluice("launch --hostfile " + bad + " --dry-run -- env");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r, bad + ":2: 'slot=2' is not slots=N")) << r.output;
  std::filesystem::remove_all(dir);
}

TEST(CliTest, LaunchPlansSrunFromSlurmsVariables) {
  const std::string slurm =
      "env -u OMP_NUM_THREADS SLURM_JOB_ID=99 SLURM_JOB_NODELIST='gpu[07-08]' SLURM_NTASKS=4 "
      "SLURM_TASKS_PER_NODE='2(x2)' SLURM_CPUS_ON_NODE=8";
  CommandResult r = RunSluice("launch --dry-run -- train --config c.yaml", slurm, false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r, "# 4 ranks on all nodes of SLURM job 99 (2 nodes): gpu07 (2), gpu08 (2)"))
      << r.output;
  EXPECT_TRUE(Contains(r,
                       "srun --ntasks=4 --nodes=2 --kill-on-bad-exit=1 --mpi=pmix "
                       "--export=ALL,OMP_NUM_THREADS=4 "))
      << r.output;
  EXPECT_TRUE(Contains(r, " train --config c.yaml\n")) << r.output;
  // --launcher mpirun ignores the allocation's srun.
  r = RunSluice("launch -n 2 --launcher mpirun --dry-run -- env", slurm, false);
  EXPECT_TRUE(Contains(r, "mpirun -np 2 ")) << r.output;
  r = RunSluice("launch -n 8 --dry-run -- env", slurm);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r, "SLURM job 99 has 4 tasks (SLURM_NTASKS)")) << r.output;
}

TEST(CliTest, RefusesASrunTaskThatMpiSeesAlone) {
  // What srun without --mpi=pmix produces: SLURM says rank 1 of 2, MPI a world of one.
  const CommandResult r =
      RunSluice("bench comm -b 8 -e 8",
                "env SLURM_JOB_ID=5 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_NTASKS=2 "
                "SLURM_LOCALID=1 SLURM_JOB_NODELIST=n1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(Contains(r, "srun started 2 tasks")) << r.output;
  EXPECT_TRUE(Contains(r, "--mpi=pmix")) << r.output;
}

TEST(CliTest, TrainDryRunPrintsThePlanAndWritesNothing) {
  const std::filesystem::path dir = TempDir("dry_run");
  std::string corpus;
  for (int i = 0; i < 4000; ++i) corpus += "the quick brown fox " + std::to_string(i % 97) + "\n";
  const std::string corpus_path = Write(dir / "corpus.txt", corpus);
  const std::string config = Write(
      dir / "tiny.yaml",
      "train_micro_batch_size_per_gpu: 4\ngradient_accumulation_steps: 2\n"
      "optimizer: {type: AdamW, params: {lr: 1.0e-3}}\n"
      "model: {family: gpt2, n_layer: 2, n_head: 2, d_model: 32, seq_len: 32, vocab_size: 256}\n"
      "data: {train_path: " +
          corpus_path +
          ", format: text}\n"
          "device: {type: cpu, memory_limit: 64MiB, threads: 1}\n"
          "run: {steps: 10}\n");
  const std::filesystem::path run_dir = dir / "run";
  CommandResult r = RunSluice("train --config " + config + " --run-dir " + run_dir.string() +
                                  " --dry-run --ranks 2 --set zero_optimization.stage=3",
                              "", false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r, "ranks       2 (--ranks)")) << r.output;
  EXPECT_TRUE(Contains(r, "ZeRO        stage 3; offload optimizer none")) << r.output;
  EXPECT_TRUE(
      Contains(r, "16 sequences per step = micro-batch 4 x accumulation 2 x 2 data-parallel ranks"))
      << r.output;
  EXPECT_TRUE(Contains(r, "10: 512 tokens per step, 5120 in all")) << r.output;
  EXPECT_TRUE(Contains(r, "device per rank: ")) << r.output;
  EXPECT_TRUE(Contains(r, "(would be created)")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run_dir));

  // The launcher's world when --ranks is absent: srun's variables.
  r = RunSluice("train --config " + config + " --run-dir " + run_dir.string() + " --dry-run",
                "env SLURM_JOB_ID=5 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_NTASKS=4 SLURM_LOCALID=0",
                false);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r, "ranks       4 (srun: ")) << r.output;

  // The process grid: the layers split over 2 tensor ranks, and a split the heads refuse.
  r = RunSluice("train --config " + config +
                " --dry-run --ranks 4 --set tensor_parallel.autotp_size=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r, "ranks       4 (--ranks): data 2 x tensor 2 x pipeline 1")) << r.output;
  r = RunSluice("train --config " + config +
                " --dry-run --ranks 4 --set tensor_parallel.autotp_size=4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r, "model.n_head = 2 does not split over tensor_parallel.autotp_size = 4"))
      << r.output;

  // A failing pre-flight check is the run's error, and exits 1.
  r = RunSluice("train --config " + config + " --dry-run --set device.memory_limit=16KiB");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r, "device.memory_limit")) << r.output;
  r = RunSluice("train --config " + config + " --dry-run --set data.train_path=/nonexistent.txt");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r, "/nonexistent.txt")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(run_dir));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::cli
