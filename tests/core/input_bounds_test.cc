// Finite but absurd inputs must be rejected before they can overflow a dot
// product into inf (and inf - inf into NaN), which would break the strict
// order the eviction selection relies on.

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/element_type.h"
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


// The check reads bit patterns in place. Against the rule it implements --
// a value is accepted when it is finite and |v| <= 1e8 as a float -- every
// f16 and bf16 pattern, in keys and in queries, at every position of a
// 256-element block, and the f32 patterns around each edge.
class InPlaceCheckTest : public ::testing::TestWithParam<ElementType> {
 protected:
  // A session of 1 layer x 1 kv head x 2 q heads x d=160 (a block and a
  // part: the check scans 256 elements at a time).
  void SetUp() override {
    config_.shape = {.layers = 1,
                     .kv_heads = 1,
                     .q_heads = 2,
                     .head_dim = kDim,
                     .element_type = GetParam()};
    config_.budget = 4;
    backend_ = CreateBackend(BackendKind::kCpu).value();
    session_ = backend_->CreateSession(config_, {}).value();
    const size_t esize = ElementSize(GetParam());
    key_.assign(kDim * esize, std::byte{0});
    query_.assign(2 * kDim * esize, std::byte{0});
  }

  // Steps with element `at` of the key (or of the queries) set to `bits`.
  absl::Status StepWith(uint32_t bits, bool in_query, size_t at) {
    const size_t esize = ElementSize(GetParam());
    std::vector<std::byte>& target = in_query ? query_ : key_;
    std::memcpy(target.data() + at * esize, &bits, esize);
    StepInput in;
    in.step = step_;
    in.append.slot_ids = absl::MakeConstSpan(&step_, 1);
    in.append.keys = key_;
    in.queries = query_;
    in.entropy = 1.0;
    absl::Status st = session_->Step(in, &result_);
    std::memset(target.data() + at * esize, 0, esize);
    if (st.ok()) ++step_;
    return st;
  }

  static bool Accepted(float v) { return std::isfinite(v) && std::fabs(v) <= 1e8f; }

  float Decode(uint32_t bits) const {
    float v;
    DecodeElements(GetParam(), reinterpret_cast<const std::byte*>(&bits), 1,
                   &v);
    return v;
  }

  static constexpr int32_t kDim = 160;
  SessionConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> session_;
  std::vector<std::byte> key_, query_;
  uint64_t step_ = 0;
  StepResult result_;
};

TEST_P(InPlaceCheckTest, AcceptsExactlyTheFiniteValuesUpTo1e8) {
  std::vector<uint32_t> patterns;
  if (GetParam() == ElementType::kF32) {
    for (float edge : {0.0f, 1.0f, 65504.0f, 1e8f, 3e38f,
                       std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::denorm_min()}) {
      const uint32_t bits = std::bit_cast<uint32_t>(edge);
      for (uint32_t b : {bits - 1, bits, bits + 1}) {
        patterns.push_back(b);
        patterns.push_back(b | 0x80000000u);
      }
    }
    patterns.push_back(0x7FC00000u);  // Quiet NaN.
    patterns.push_back(0xFFFFFFFFu);
  } else {
    for (uint32_t b = 0; b <= 0xFFFFu; ++b) patterns.push_back(b);
  }
  int64_t checked = 0;
  for (size_t i = 0; i < patterns.size(); ++i) {
    const uint32_t bits = patterns[i];
    const bool in_query = i % 2 == 1;
    // Walk the position through both scan blocks of the queries (320
    // elements) and through the key (160).
    const size_t at = (i * 7) % (in_query ? 2 * kDim : kDim);
    const absl::Status st = StepWith(bits, in_query, at);
    const bool accepted = Accepted(Decode(bits));
    ASSERT_EQ(st.ok(), accepted)
        << "pattern 0x" << std::hex << bits << std::dec << " ("
        << Decode(bits) << ") in " << (in_query ? "queries" : "key")
        << " at " << at << ": " << st;
    if (!accepted) {
      const std::string field = in_query ? "queries" : "append.keys";
      EXPECT_NE(st.message().find(field), absl::string_view::npos) << st;
      EXPECT_NE(st.message().find(absl::StrCat("element ", at)),
                absl::string_view::npos)
          << st;
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int64_t>(patterns.size()));
}

// With several bad elements the error names the first, wherever the others
// are: in the same 256-element block, in the tail after it, or before it.
TEST_P(InPlaceCheckTest, NamesTheFirstOfSeveralBadElements) {
  // A NaN in the step's type.
  const uint32_t nan = GetParam() == ElementType::kF32   ? 0x7FC00000u
                       : GetParam() == ElementType::kF16 ? 0x7E00u
                                                         : 0x7FC0u;
  const size_t esize = ElementSize(GetParam());
  for (const auto& [first, second] : std::vector<std::pair<size_t, size_t>>{
           {10, 200}, {100, 300}, {255, 256}, {257, 319}, {0, 319}}) {
    std::memcpy(query_.data() + second * esize, &nan, esize);
    const absl::Status st = StepWith(nan, /*in_query=*/true, first);
    std::memset(query_.data() + second * esize, 0, esize);
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(
        absl::EndsWith(st.message(), absl::StrCat(" at element ", first)))
        << first << ", " << second << ": " << st;
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, InPlaceCheckTest,
                         ::testing::Values(ElementType::kF32, ElementType::kF16,
                                           ElementType::kBf16),
                         [](const auto& info) {
                           return std::string(ElementTypeName(info.param));
                         });

}  // namespace
}  // namespace entrokv
