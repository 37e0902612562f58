// One owner per run directory and swap file: FileLock refuses a second holder, in this process or
// another, naming the holder's pid, and the kernel releases a dead holder's lock.
#include "runtime/file_lock.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace sluice {
namespace {

using ::testing::HasSubstr;

std::string LockPath() {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("sluice_file_lock_" + std::to_string(getpid())))
          .string();
  std::filesystem::create_directories(dir);
  return dir + "/.sluice.lock";
}

TEST(FileLockTest, ASecondHolderIsRefusedNamingTheFirstUntilItIsReleased) {
  const std::string path = LockPath();
  Result<FileLock> first = FileLock::Acquire(path, "run directory", "runs/a", "use another");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->held());
  Result<FileLock> second = FileLock::Acquire(path, "run directory", "runs/a", "use another");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(),
              HasSubstr("run directory runs/a is in use by another run (pid " +
                        std::to_string(getpid()) + ", lock file " + path + "): use another"));
  *first = FileLock();  // released
  EXPECT_TRUE(FileLock::Acquire(path, "run directory", "runs/a", "use another").ok());
}

TEST(FileLockTest, AnotherProcessHoldsItUntilItDies) {
  const std::string path = LockPath();
  int ready[2], stop[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(stop), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Result<FileLock> held = FileLock::Acquire(path, "swap file", "x.swp", "advice");
    const char byte = held.ok() ? 'y' : 'n';
    (void)!write(ready[1], &byte, 1);
    char wait_byte;
    (void)!read(stop[0], &wait_byte, 1);
    _exit(0);  // dies holding it: the kernel releases the lock
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  ASSERT_EQ(byte, 'y');
  Result<FileLock> refused = FileLock::Acquire(path, "swap file", "x.swp", "advice");
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("swap file x.swp is in use by another run (pid " + std::to_string(child)));
  (void)!write(stop[1], "x", 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  Result<FileLock> after = FileLock::Acquire(path, "swap file", "x.swp", "advice");
  EXPECT_TRUE(after.ok()) << after.status().ToString();
}

}  // namespace
}  // namespace sluice
