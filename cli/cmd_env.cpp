// `sluice env`: what this machine offers Sluice — CPU ISA, the OpenBLAS kernel and the CPU GEMM
// setting, cores and NUMA, memory, GPUs, MPI, io_uring and O_DIRECT, the memlock limit — as text
// or JSON.
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command_registry.h"
#include "cli/env_probes.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops_path.h"
#include "runtime/comm/mpi/mpi_call.h"
#include "runtime/device/cpu/memory_protection.h"
#include "runtime/json_text.h"
#include "runtime/size_format.h"
#include "runtime/topology.h"

namespace sluice::cli {
namespace {

struct EnvOptions {
  std::string dir = ".";
  bool json = false;
};

std::string MpiLibraryVersion() {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int length = 0;
  if (MPI_Get_library_version(version, &length) != MPI_SUCCESS) return "unknown";
  std::string text(version, length);
  size_t newline = text.find_first_of("\n,");
  return newline == std::string::npos ? text : text.substr(0, newline);
}

// hwloc's per-node figures can be partial inside VMs; the kernel's own totals are the truth.
uint64_t MemInfoBytes(std::string_view field) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key.size() == field.size() + 1 && key.compare(0, field.size(), field) == 0) {
      return kib * 1024;
    }
  }
  return 0;
}

std::string StatusText(const Status& status) { return status.ok() ? "yes" : status.message(); }

nlohmann::json CollectEnv(const EnvOptions& options) {
  nlohmann::json env;
  const kernels::CpuFeatures& cpu = kernels::DetectCpuFeatures();
  env["cpu"] = {{"model", cpu.model_name},
                {"vendor", cpu.vendor},
                {"avx2", cpu.avx2},
                {"avx512", cpu.avx512},
                {"avx512_bf16", cpu.avx512_bf16},
                {"amx", cpu.amx},
                {"kernel_isa", kernels::IsaName(kernels::SelectedIsa())},
                // The non-GEMM ops' path under each device.cpu_gemm (kernels/cpu/ops_path.h).
                {"ops_path",
                 {{"deterministic", kernels::cpu::OpsPathName(kernels::cpu::OpsPath::kFixed)},
                  {"blas", kernels::cpu::OpsPathName(kernels::cpu::OpsPath::kVector)}}}};
  env["gemm"] = ProbeGemm();

  Result<Topology> topo = DetectTopology();
  if (topo.ok()) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const NumaNode& n : topo->numa_nodes) {
      nodes.push_back(
          {{"os_index", n.os_index}, {"memory_bytes", n.memory_bytes}, {"cpuset", n.cpuset}});
    }
    env["topology"] = {{"packages", topo->packages},
                       {"cores", topo->cores},
                       {"hardware_threads", topo->hardware_threads},
                       {"numa_nodes", nodes}};
  } else {
    env["topology"] = {{"error", topo.status().message()}};
  }
  env["memory"] = {{"total_bytes", MemInfoBytes("MemTotal")},
                   {"available_bytes", MemInfoBytes("MemAvailable")}};

  rlimit memlock{};
  getrlimit(RLIMIT_MEMLOCK, &memlock);
  env["memlock"] = {
      {"limit_bytes",
       memlock.rlim_cur == RLIM_INFINITY ? -1 : static_cast<int64_t>(memlock.rlim_cur)},
      {"root", geteuid() == 0}};
  // What a training run's cpu device gets with device.memory_protection at its default, auto
  // (SLUICE_DEVICE_PROTECT applied): whether the host would fault on device memory, or why not.
  env["device_memory_protection"] = DescribeDeviceMemoryProtection(DeviceMemoryProtection::kAuto);

  env["gpus"] = ProbeGpus();
  env["mpi"] = {{"library", MpiLibraryVersion()},
                {"launched_by_mpirun", std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr}};
  env["io"] = {{"dir", options.dir},
               {"io_uring", StatusText(ProbeIoUringSupport())},
               {"o_direct", StatusText(ProbeODirectSupport(options.dir))}};
  return env;
}

void PrintEnv(const nlohmann::json& env) {
  const auto& cpu = env["cpu"];
  auto yes_no = [](const nlohmann::json& b) { return b.get<bool>() ? "yes" : "no"; };
  std::cout << "CPU            " << cpu["model"].get<std::string>() << " ("
            << cpu["vendor"].get<std::string>() << ")\n"
            << "  ISA          AVX2 " << yes_no(cpu["avx2"]) << ", AVX-512 "
            << yes_no(cpu["avx512"]) << ", AVX512_BF16 " << yes_no(cpu["avx512_bf16"]) << ", AMX "
            << yes_no(cpu["amx"]) << "; kernels use " << cpu["kernel_isa"].get<std::string>()
            << "\n"
            << "  other ops    device.cpu_gemm deterministic: "
            << cpu["ops_path"]["deterministic"].get<std::string>()
            << "; blas: " << cpu["ops_path"]["blas"].get<std::string>() << "\n";
  const auto& gemm = env["gemm"];
  // "OpenBLAS       core SkylakeX (set by Sluice for avx512 (OpenBLAS picked Prescott)), 2
  // threads (OpenBLAS 0.3.21 ...)"
  std::cout << "OpenBLAS       core " << gemm["openblas"]["core"].get<std::string>() << " ("
            << gemm["openblas"]["reason"].get<std::string>() << "), " << gemm["openblas"]["threads"]
            << " threads (" << gemm["openblas"]["config"].get<std::string>() << ")\n";
  // "device.cpu_gemm deterministic (default): GemmFixed avx512; blas: oneDNN 2.6.3 avx512_core_amx"
  const auto& setting = gemm["cpu_gemm"];
  const std::string value = setting["value"].get<std::string>();
  std::cout << "CPU GEMM       device.cpu_gemm " << value << " ("
            << (setting["source"] == "env" ? setting["env_var"].get<std::string>() : "default")
            << ")";
  const auto& kernels = setting["kernels"];
  if (kernels.contains(value)) {
    std::cout << ": " << kernels[value].get<std::string>();
  } else {
    std::cout << ": not a value it takes (a run would refuse it)";
  }
  for (const auto& [name, kernel] : kernels.items()) {
    if (name != value) std::cout << "; " << name << ": " << kernel.get<std::string>();
  }
  std::cout << "\n";
  // The library blas runs, with its threads and anything to know (SLUICE_CPU_BLAS ignored).
  const auto& blas = gemm["backends"]["blas"];
  std::cout << "  blas         " << blas["name"].get<std::string>() << ", " << blas["threads"]
            << " threads (SLUICE_CPU_BLAS=onednn|openblas chooses)";
  if (!blas["note"].get<std::string>().empty()) {
    std::cout << "; " << blas["note"].get<std::string>();
  }
  std::cout << "\n";
  const auto& topo = env["topology"];
  if (topo.contains("error")) {
    std::cout << "Topology       unavailable: " << topo["error"].get<std::string>() << "\n";
  } else {
    std::cout << "Cores          " << topo["cores"] << " cores, " << topo["hardware_threads"]
              << " hardware threads, " << topo["packages"] << " package(s)\n";
    for (const auto& n : topo["numa_nodes"]) {
      std::cout << "  NUMA node " << n["os_index"] << "  "
                << FormatBytes(n["memory_bytes"].get<uint64_t>()) << ", cpus "
                << n["cpuset"].get<std::string>() << "\n";
    }
  }
  std::cout << "Memory         " << FormatBytes(env["memory"]["total_bytes"].get<uint64_t>())
            << " total, " << FormatBytes(env["memory"]["available_bytes"].get<uint64_t>())
            << " available\n";
  int64_t memlock = env["memlock"]["limit_bytes"].get<int64_t>();
  std::cout << "memlock limit  " << (memlock < 0 ? std::string("unlimited") : FormatBytes(memlock))
            << (env["memlock"]["root"].get<bool>() ? " (root: CAP_IPC_LOCK lifts it)" : "") << "\n";
  std::cout << "Device memory  protection " << env["device_memory_protection"].get<std::string>()
            << "\n";
  const auto& gpus = env["gpus"];
  if (gpus.contains("error")) {
    std::cout << "GPUs           none: " << gpus["error"].get<std::string>() << "\n";
  } else {
    std::cout << "GPUs           " << gpus["devices"].size() << " (CUDA runtime "
              << gpus["cuda_runtime"].get<std::string>() << ", driver "
              << gpus["cuda_driver"].get<std::string>() << ", NCCL "
              << gpus["nccl"].get<std::string>() << ")\n";
    for (const auto& d : gpus["devices"]) {
      std::cout << "  cuda:" << d["index"] << "       " << d["name"].get<std::string>() << ", "
                << FormatBytes(d["memory_bytes"].get<uint64_t>()) << ", sm_" << d["sm"] << "\n";
    }
  }
  std::cout << "MPI            " << env["mpi"]["library"].get<std::string>() << "\n"
            << "io_uring       " << env["io"]["io_uring"].get<std::string>() << "\n"
            << "O_DIRECT       " << env["io"]["o_direct"].get<std::string>() << " (in "
            << env["io"]["dir"].get<std::string>() << ")\n";
}

void AddEnvCommand(CLI::App& parent) {
  auto options = std::make_shared<EnvOptions>();
  CLI::App* cmd = parent.add_subcommand("env", "Report what this machine offers Sluice");
  cmd->add_option("--dir", options->dir, "Directory in which to probe O_DIRECT (swap location)");
  cmd->add_flag("--json", options->json, "Print a JSON record instead of text");
  cmd->callback([options] {
    nlohmann::json env = CollectEnv(*options);
    if (options->json) {
      std::cout << JsonText(env, 2) << "\n";
    } else {
      PrintEnv(env);
    }
  });
}

}  // namespace

SLUICE_REGISTER_COMMAND("", AddEnvCommand);

}  // namespace sluice::cli
