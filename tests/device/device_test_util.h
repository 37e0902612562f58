// Helpers shared by the device tests.
#pragma once

#include <gtest/gtest.h>

#include "runtime/status.h"

#define SLUICE_TEST_CONCAT_INNER(a, b) a##b
#define SLUICE_TEST_CONCAT(a, b) SLUICE_TEST_CONCAT_INNER(a, b)

// ASSERT_DEVICE_OK(status_or_result): fails the test with the error text.
#define ASSERT_DEVICE_OK(expr)                                                       \
  do {                                                                               \
    const ::sluice::Status sluice_test_status_ = ::sluice::internal::AsStatus(expr); \
    ASSERT_TRUE(sluice_test_status_.ok()) << sluice_test_status_.ToString();         \
  } while (0)

#define EXPECT_DEVICE_OK_STATUS(expr)                                                \
  do {                                                                               \
    const ::sluice::Status sluice_test_status_ = ::sluice::internal::AsStatus(expr); \
    EXPECT_TRUE(sluice_test_status_.ok()) << sluice_test_status_.ToString();         \
  } while (0)

// ASSERT_DEVICE_OK_AND_ASSIGN(auto x, MakeX()): binds the value or fails the test.
#define ASSERT_DEVICE_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_DEVICE_OK_AND_ASSIGN_IMPL(SLUICE_TEST_CONCAT(sluice_test_result_, __LINE__), lhs, expr)
#define ASSERT_DEVICE_OK_AND_ASSIGN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                     \
  ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();      \
  lhs = std::move(tmp).value()

namespace sluice::testing_util {

inline constexpr uint64_t kMiB = 1024 * 1024;

}  // namespace sluice::testing_util
