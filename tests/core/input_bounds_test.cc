// Finite but absurd inputs must be rejected before they can overflow a dot
// product into inf (and inf - inf into NaN), which would break the strict
// order the eviction selection relies on.

#include <cstring>
#include <vector>

#include "entrokv/core/backend.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

class InputBoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_.shape = {.layers = 1,
                     .kv_heads = 1,
                     .q_heads = 2,
                     .head_dim = 4,
                     .element_type = ElementType::kF32};
    config_.budget = 2;
    backend_ = CreateBackend(BackendKind::kCpu).value();
    session_ = backend_->CreateSession(config_, {}).value();
  }

  // A step appending one entry whose key elements are all `key_value`.
  absl::Status StepWith(uint64_t step, float key_value, float query_value,
                        double entropy) {
    slot_ = step;
    key_.assign(4, key_value);
    query_.assign(8, query_value);
    StepInput in;
    in.step = step;
    in.append.slot_ids = absl::MakeConstSpan(&slot_, 1);
    in.append.keys = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(key_.data()), key_.size() * 4);
    in.queries = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(query_.data()), query_.size() * 4);
    in.entropy = entropy;
    return session_->Step(in, &result_);
  }

  SessionConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> session_;
  uint64_t slot_ = 0;
  std::vector<float> key_, query_;
  StepResult result_;
};

TEST_F(InputBoundsTest, HugeFiniteKeyIsRejectedNamingTheField) {
  const absl::Status st = StepWith(0, 3e37f, 1.0f, 1.0);
  EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("append.keys"), absl::string_view::npos) << st;
  EXPECT_EQ(session_->Stats().live, 0);
}

TEST_F(InputBoundsTest, HugeFiniteQueryIsRejectedNamingTheField) {
  const absl::Status st = StepWith(0, 1.0f, -2e9f, 1.0);
  EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("queries"), absl::string_view::npos) << st;
}

TEST_F(InputBoundsTest, HugeEntropyIsRejected) {
  const absl::Status st = StepWith(0, 1.0f, 1.0f, 1e300);
  EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("entropy"), absl::string_view::npos) << st;
}

TEST_F(InputBoundsTest, LargeButBoundedValuesStayOrderedAndEvictByBudget) {
  // 1e8 keys and queries: z = 4 · 1e16 / 2 per head, far beyond exp's range
  // but finite; the session must still evict down to its budget.
  for (uint64_t t = 0; t < 5; ++t) {
    ASSERT_OK(StepWith(t, t % 2 ? 1e8f : -1e8f, 1e8f, 2.0));
    EXPECT_LE(result_.live, 2);
  }
}

TEST(ConfigBoundsTest, HugeBetaIsRejected) {
  SessionConfig config;
  config.affinity.beta = 1e7;
  const absl::Status st = ValidateSessionConfig(config);
  EXPECT_STATUS_CODE(st, absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("affinity.beta"), absl::string_view::npos) << st;
}

}  // namespace
}  // namespace entrokv
