// Session and backend accounting: stats, live slots, bytes held
// (docs/step-semantics.md section 9) and the backend's limits.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::StepBuilder;
using ::entrokv::testing::TinyConfig;
using ::entrokv::testing::TinySession;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(SessionStatsTest, AFreshSessionIsEmptyWithTheConfiguredBudget) {
  TinySession session(TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 5));
  const SessionStats stats = session.session().Stats();
  EXPECT_EQ(stats.live, 0);
  EXPECT_EQ(stats.peak_live, 0);
  EXPECT_EQ(stats.steps, 0);
  EXPECT_EQ(stats.last_step, std::nullopt);
  EXPECT_EQ(stats.appended, 0);
  EXPECT_EQ(stats.evicted, 0);
  EXPECT_EQ(stats.budget, 5);
  EXPECT_EQ(stats.bytes_held, 0);
  EXPECT_EQ(stats.placement, Placement::kCpu);
  EXPECT_THAT(session.Live(), IsEmpty());
}

TEST(SessionStatsTest, CountsAppendsEvictionsPeakAndSteps) {
  TinySession session(TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 3));
  session.AppendZeros(0, 5);
  StepResult result = session.StepFlat();
  EXPECT_EQ(result.live, 3);
  session.AppendZeros(5, 1);
  result = session.StepFlat();
  const SessionStats stats = session.session().Stats();
  EXPECT_EQ(stats.live, 3);
  EXPECT_EQ(stats.live, result.live);
  EXPECT_EQ(stats.steps, 2);
  EXPECT_EQ(stats.last_step, 2u);
  EXPECT_EQ(stats.appended, 6);
  EXPECT_EQ(stats.evicted, 3);
  EXPECT_EQ(stats.budget, 3);
  EXPECT_GE(stats.peak_live, 3);
  EXPECT_LE(stats.peak_live, 5);
  EXPECT_THAT(session.Live(), ElementsAre(3, 4, 5));
}

TEST(SessionStatsTest, PeakLiveRemembersTheHighestLiveCount) {
  SessionConfig config = TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 8);
  TinySession session(config);
  session.AppendZeros(0, 6);
  session.StepFlat();
  session.AppendPinned(6, 0, 0).AppendPinned(7, 0, 0);
  session.StepFlat();  // 8 live.
  session.AppendZeros(8, 2);
  session.StepFlat();  // 10 -> 8.
  EXPECT_EQ(session.session().Stats().live, 8);
  EXPECT_GE(session.session().Stats().peak_live, 8);
}

TEST(SessionStatsTest, BytesHeldAreKeysPlusFortyBytesAnEntry) {
  for (ElementType type :
       {ElementType::kF32, ElementType::kF16, ElementType::kBf16}) {
    SessionConfig config =
        TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 4);
    config.shape.layers = 3;
    config.shape.kv_heads = 2;
    config.shape.q_heads = 2;
    config.shape.head_dim = 8;
    config.shape.element_type = type;
    ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
    ASSERT_OK_AND_ASSIGN(auto session, backend->CreateSession(config, {}));
    StepBuilder builder(config.shape);
    for (uint64_t slot = 0; slot < 6; ++slot) {
      builder.Append(slot, std::vector<float>(48, 0.5f));
    }
    builder.Query(std::vector<float>(48, 0.25f));
    StepResult result;
    ASSERT_OK(session->Step(builder.Build(1), &result));
    const int64_t per_entry = 48 * int64_t(ElementSize(type)) + 40;
    EXPECT_EQ(session->Stats().bytes_held, 4 * per_entry)
        << ElementTypeName(type);
    EXPECT_EQ(backend->bytes_held(), 4 * per_entry);
  }
}

TEST(BackendTest, BytesHeldSumOverSessionsAndAreReleasedWithThem) {
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu));
  EXPECT_EQ(backend->kind(), BackendKind::kCpu);
  EXPECT_FALSE(backend->Describe().empty());
  const SessionConfig config =
      TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 10);
  ASSERT_OK_AND_ASSIGN(auto a, backend->CreateSession(config, {}));
  ASSERT_OK_AND_ASSIGN(auto b, backend->CreateSession(config, {}));
  StepBuilder three(config.shape), five(config.shape);
  for (uint64_t s = 0; s < 3; ++s) three.Append(s, {1.0f, 2.0f});
  for (uint64_t s = 0; s < 5; ++s) five.Append(s, {1.0f, 2.0f});
  three.Query({0.0f, 1.0f});
  five.Query({0.0f, 1.0f});
  StepResult result;
  ASSERT_OK(a->Step(three.Build(1), &result));
  ASSERT_OK(b->Step(five.Build(1), &result));
  constexpr int64_t kPerEntry = 2 * 4 + 40;
  EXPECT_EQ(backend->bytes_held(), 8 * kPerEntry);
  b.reset();
  EXPECT_EQ(backend->bytes_held(), 3 * kPerEntry);
  a.reset();
  EXPECT_EQ(backend->bytes_held(), 0);
}

TEST(BackendTest, TheByteLimitIsSharedByTheBackendsSessions) {
  constexpr int64_t kPerEntry = 2 * 4 + 40;
  BackendOptions options;
  options.max_bytes = 6 * kPerEntry;
  ASSERT_OK_AND_ASSIGN(auto backend, CreateBackend(BackendKind::kCpu, options));
  const SessionConfig config =
      TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 10);
  ASSERT_OK_AND_ASSIGN(auto a, backend->CreateSession(config, {}));
  ASSERT_OK_AND_ASSIGN(auto b, backend->CreateSession(config, {}));
  StepBuilder four(config.shape), three(config.shape), two(config.shape);
  for (uint64_t s = 0; s < 4; ++s) four.Append(s, {1.0f, 2.0f});
  for (uint64_t s = 0; s < 3; ++s) three.Append(s, {1.0f, 2.0f});
  for (uint64_t s = 0; s < 2; ++s) two.Append(s, {1.0f, 2.0f});
  for (StepBuilder* s : {&four, &three, &two}) s->Query({0.0f, 1.0f});
  StepResult result;
  ASSERT_OK(a->Step(four.Build(1), &result));
  const absl::Status refused = b->Step(three.Build(1), &result);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("append"));
  EXPECT_EQ(b->Stats().live, 0);
  EXPECT_EQ(backend->bytes_held(), 4 * kPerEntry);
  EXPECT_OK(b->Step(two.Build(1), &result));  // Exactly at the limit.
  EXPECT_EQ(backend->bytes_held(), 6 * kPerEntry);
}

TEST(BackendTest, CudaIsUnavailableOrWorks) {
  auto backend = CreateBackend(BackendKind::kCuda);
  if (!CudaBackendCompiled()) {
    EXPECT_STATUS_CODE(backend, absl::StatusCode::kUnavailable);
    return;
  }
  if (!backend.ok()) {
    EXPECT_STATUS_CODE(backend, absl::StatusCode::kUnavailable);
    GTEST_SKIP() << backend.status();
  }
  EXPECT_EQ((*backend)->kind(), BackendKind::kCuda);
}


// SessionStats.bytes_copied counts the key and query bytes a step writes
// (session.h). Expected values are the byte sizes of what each step must
// write, from the shape: 2 layers x 2 kv heads x 4 q heads x d=8 in f16,
// so 64 key bytes per entry, 64 query elements (256 bytes as scaled floats,
// written only for rankings that need per-head z) and 2 x 2 x 8 summed query
// floats (128 bytes, for s_i).
class BytesCopiedTest : public ::testing::Test {
 protected:
  static constexpr int64_t kKeyBytes = 2 * 2 * 8 * 2;
  static constexpr int64_t kScaledQueryBytes = 2 * 4 * 8 * 4;
  static constexpr int64_t kSummedQueryBytes = 2 * 2 * 8 * 4;

  std::unique_ptr<SessionState> Create(Ranking ranking, int64_t budget,
                                       int32_t decide_every = 1,
                                       int32_t block_size = 1) {
    SessionConfig config;
    config.shape = {.layers = 2,
                    .kv_heads = 2,
                    .q_heads = 4,
                    .head_dim = 8,
                    .element_type = ElementType::kF16};
    config.ranking = ranking;
    config.budget = budget;
    config.decide_every = decide_every;
    config.block_size = block_size;
    config.block_summary = block_size > 1;
    backend_ = CreateBackend(BackendKind::kCpu).value();
    return backend_->CreateSession(config, {}).value();
  }

  // Step `t` appending slot `t` (keys of distinct values), with queries.
  absl::Status Step(SessionState* session, uint64_t t) {
    slot_ = t;
    key_.assign(kKeyBytes, std::byte{0});
    key_[0] = static_cast<std::byte>(t + 1);  // A small f16 subnormal.
    query_.assign(2 * 4 * 8 * 2, std::byte{0});
    StepInput in;
    in.step = t;
    in.append.slot_ids = absl::MakeConstSpan(&slot_, 1);
    in.append.keys = key_;
    in.queries = query_;
    in.entropy = 1.0;
    return session->Step(in, &result_);
  }

  std::unique_ptr<Backend> backend_;
  uint64_t slot_ = 0;
  std::vector<std::byte> key_, query_;
  StepResult result_;
};

TEST_F(BytesCopiedTest, AWindowStepStoresItsKeyAndDecodesNoQuery) {
  auto session = Create(Ranking::kWindow, 100);
  for (uint64_t t = 0; t < 10; ++t) ASSERT_OK(Step(session.get(), t));
  EXPECT_EQ(session->Stats().bytes_copied, 10 * kKeyBytes);
}

// The queries are decoded, scaled and summed in one pass: only the sums are
// written (docs/design.md, "One path for the bytes").
TEST_F(BytesCopiedTest, AnAffinityStepWritesOnlyItsSummedQueries) {
  auto session = Create(Ranking::kAffinity, 100);
  for (uint64_t t = 0; t < 10; ++t) ASSERT_OK(Step(session.get(), t));
  EXPECT_EQ(session->Stats().bytes_copied,
            10 * (kKeyBytes + kSummedQueryBytes));
}

TEST_F(BytesCopiedTest, ATovaStepWritesItsScaledQueriesAndNoSums) {
  auto session = Create(Ranking::kTova, 100);
  for (uint64_t t = 0; t < 10; ++t) ASSERT_OK(Step(session.get(), t));
  EXPECT_EQ(session->Stats().bytes_copied,
            10 * (kKeyBytes + kScaledQueryBytes));
}

TEST_F(BytesCopiedTest, AnEvictionMovesTheLastEntryIntoTheHole) {
  auto session = Create(Ranking::kWindow, 2);
  for (uint64_t t = 0; t < 3; ++t) ASSERT_OK(Step(session.get(), t));
  ASSERT_THAT(result_.evicted, ElementsAre(0));
  // Three appends; the oldest entry's place is taken by the newest.
  EXPECT_EQ(session->Stats().bytes_copied, 3 * kKeyBytes + kKeyBytes);
}

TEST_F(BytesCopiedTest, ACadenceHoldsPendingKeysOnceThenStoresThem) {
  auto session = Create(Ranking::kWindow, 100, /*decide_every=*/2);
  ASSERT_OK(Step(session.get(), 0));
  EXPECT_EQ(session->Stats().bytes_copied, kKeyBytes);  // Pending.
  ASSERT_OK(Step(session.get(), 1));
  // The decision step's key joins the pending one, and both are stored.
  EXPECT_EQ(session->Stats().bytes_copied, 2 * kKeyBytes + 2 * kKeyBytes);
}

TEST_F(BytesCopiedTest, BlockSummariesDecodeEachTokenOnceAndStoreTheMean) {
  constexpr int64_t kDecodedKeyBytes = 2 * 2 * 8 * 4;
  auto session = Create(Ranking::kWindow, 100, 1, /*block_size=*/2);
  ASSERT_OK(Step(session.get(), 0));
  EXPECT_EQ(session->Stats().bytes_copied, kDecodedKeyBytes);  // Partial.
  ASSERT_OK(Step(session.get(), 1));
  // The second token decoded; the block's mean as floats and as f16; the
  // mean stored below. Nothing is left to move to the front.
  EXPECT_EQ(session->Stats().bytes_copied,
            2 * kDecodedKeyBytes + kDecodedKeyBytes + kKeyBytes + kKeyBytes);
}

TEST_F(BytesCopiedTest, ARejectedStepCopiesNothing) {
  auto session = Create(Ranking::kAffinity, 100);
  ASSERT_OK(Step(session.get(), 0));
  const int64_t before = session->Stats().bytes_copied;
  EXPECT_FALSE(Step(session.get(), 0).ok());  // A repeated step number.
  EXPECT_EQ(session->Stats().bytes_copied, before);
}

}  // namespace
}  // namespace entrokv
