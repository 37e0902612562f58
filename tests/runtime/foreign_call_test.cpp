#include "runtime/foreign_call.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace sluice {
namespace {

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

Status OpenForReading(const char* path, int* fd_out) {
  int fd = -1;
  SLUICE_TRY_SYS(fd = ::open(path, O_RDONLY | O_CLOEXEC));
  *fd_out = fd;
  return OkStatus();
}

TEST(ForeignCallTest, FailedSyscallNamesTheCallAndErrno) {
  int fd = -1;
  Status status = OpenForReading("/nonexistent/sluice/file", &fd);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  const std::string& message = status.message();
  EXPECT_TRUE(Contains(message, "syscall call `fd = ::open(path, ")) << message;
  EXPECT_TRUE(Contains(message, "No such file or directory (ENOENT)")) << message;
  EXPECT_TRUE(Contains(message, "foreign_call_test.cpp:")) << message;
  EXPECT_EQ(fd, -1);
}

TEST(ForeignCallTest, SuccessfulSyscallContinues) {
  int fd = -1;
  Status status = OpenForReading("/dev/null", &fd);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_GE(fd, 0);
  ::close(fd);
}

TEST(ForeignCallTest, PosixCallsReportTheReturnedError) {
  auto run = [] {
    SLUICE_TRY_POSIX(::posix_fadvise(-1, 0, 0, POSIX_FADV_SEQUENTIAL));
    return OkStatus();
  };
  Status status = run();
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.message(), "posix call `::posix_fadvise(-1, 0, 0, "))
      << status.message();
  EXPECT_TRUE(Contains(status.message(), "(EBADF)")) << status.message();
}

TEST(ForeignCallTest, UringCallsReportNegatedErrno) {
  // liburing returns -errno; a stand-in keeps this test free of io_uring setup.
  int calls = 0;
  auto submit = [&calls] {
    ++calls;
    return -ENOSPC;
  };
  auto run = [&] {
    SLUICE_TRY_URING(submit());
    return OkStatus();
  };
  Status status = run();
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(Contains(status.message(),
                       "liburing call `submit()` failed: No space left on device "
                       "(ENOSPC)"))
      << status.message();
}

TEST(ForeignCallTest, ErrnoTextHasMessageAndName) {
  EXPECT_EQ(internal::ErrnoText(ENOSPC), "No space left on device (ENOSPC)");
  EXPECT_EQ(internal::ErrnoText(EAGAIN), "Resource temporarily unavailable (EAGAIN)");
}

TEST(ForeignCallDeathTest, CheckVariantAbortsNamingTheCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(SLUICE_CHECK_SYS(::close(-1)),
               "CHECK failed.*syscall call `::close\\(-1\\)` failed: Bad file descriptor "
               "\\(EBADF\\)");
}

}  // namespace
}  // namespace sluice
