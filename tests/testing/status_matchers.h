// Thin GoogleTest helpers for absl::Status, which Debian's Abseil lacks.
//
// EXPECT_OK(expr) / ASSERT_OK(expr): expr is an absl::Status or StatusOr.
// EXPECT_STATUS_CODE(expr, code): the status code equals `code`
// (absl::StatusCode::kInvalidArgument etc.).
// ASSERT_OK_AND_ASSIGN(lhs, expr): asserts OK, then assigns the value.

#ifndef ENTROKV_TESTS_TESTING_STATUS_MATCHERS_H_
#define ENTROKV_TESTS_TESTING_STATUS_MATCHERS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace entrokv::testing {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

inline ::testing::AssertionResult IsOk(const absl::Status& status) {
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << status;
}
inline ::testing::AssertionResult HasCode(const absl::Status& status,
                                          absl::StatusCode code) {
  if (status.code() == code) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "expected code " << absl::StatusCodeToString(code) << ", got "
         << status;
}

}  // namespace entrokv::testing

// Each macro evaluates `expr` exactly once.
#define EXPECT_OK(expr) \
  EXPECT_TRUE(::entrokv::testing::IsOk(::entrokv::testing::GetStatus(expr)))
#define ASSERT_OK(expr) \
  ASSERT_TRUE(::entrokv::testing::IsOk(::entrokv::testing::GetStatus(expr)))
#define EXPECT_STATUS_CODE(expr, code)                                         \
  EXPECT_TRUE(::entrokv::testing::HasCode(::entrokv::testing::GetStatus(expr), \
                                          (code)))
#define ENTROKV_TEST_CONCAT_INNER_(a, b) a##b
#define ENTROKV_TEST_CONCAT_(a, b) ENTROKV_TEST_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                      \
  ASSERT_OK_AND_ASSIGN_IMPL_(ENTROKV_TEST_CONCAT_(statusor_, __LINE__), lhs, \
                             expr)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status();           \
  lhs = std::move(tmp).value()

#endif  // ENTROKV_TESTS_TESTING_STATUS_MATCHERS_H_
