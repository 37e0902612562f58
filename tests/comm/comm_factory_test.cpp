#include "runtime/comm/comm_factory.h"

#include <gtest/gtest.h>

#ifdef SLUICE_TEST_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace sluice {
namespace {

bool HaveGpu() {
#ifdef SLUICE_TEST_HAVE_CUDA
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
#else
  return false;
#endif
}

TEST(CommFactory, ParsesBackendNames) {
  EXPECT_EQ(*ParseCommBackend("mpi"), CommBackend::kMpi);
  EXPECT_EQ(*ParseCommBackend("nccl"), CommBackend::kNccl);
  Result<CommBackend> bad = ParseCommBackend("gloo");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'gloo'"), std::string::npos);
  EXPECT_EQ(CommBackendName(CommBackend::kNccl), "nccl");
}

TEST(CommFactory, RejectsANonPositiveTimeoutNamingTheKey) {
  Result<std::unique_ptr<Comm>> comm = CreateWorldComm({.timeout_seconds = 0});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("run.comm_timeout"), std::string::npos);
}

// Past 10^7 s the deadline would overflow its clock and every collective would time out at
// once: refused instead, naming the key and the bound.
TEST(CommFactory, RejectsATimeoutPastTheClocksRange) {
  Result<std::unique_ptr<Comm>> comm = CreateWorldComm({.timeout_seconds = 1e10});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(comm.status().message().find("run.comm_timeout"), std::string::npos);
  EXPECT_NE(comm.status().message().find("up to 1e+07"), std::string::npos)
      << comm.status().ToString();
  EXPECT_TRUE(CreateWorldComm({.timeout_seconds = kMaxCommTimeoutSeconds}).ok());
}

TEST(CommFactory, NcclWithoutAGpuIsUnavailableAndSaysWhy) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is present: the NCCL backend is available";
  Result<std::unique_ptr<Comm>> comm = CreateWorldComm({.backend = CommBackend::kNccl});
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnavailable);
  // Built without CUDA: how to get it; built with CUDA but no device: use MPI instead.
  EXPECT_NE(comm.status().message().find("MPI backend"), std::string::npos)
      << comm.status().message();
}

}  // namespace
}  // namespace sluice
