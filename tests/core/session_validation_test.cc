// Every bad step of docs/design.md "Failure semantics" that reaches core
// (docs/step-semantics.md section 1): the right code, a message naming the
// field, and no trace of the step afterwards.
//
// Each test drives two sessions through the same history: the subject, which
// then sees the bad step, and its twin, which never does. Afterwards both must
// report the same stats and live slots, and answer the next good step
// identically (evictions, budget and the full trace, bit for bit).

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core_test_util.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::Encode;
using ::entrokv::testing::StepBuilder;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct PolicyCase {
  const char* policy;
  AffinityUpdate update;
  int32_t block_size;
};

void PrintTo(const PolicyCase& c, std::ostream* os) {
  *os << c.policy << " (" << AffinityUpdateName(c.update) << ", block "
      << c.block_size << ")";
}

std::string CaseName(const ::testing::TestParamInfo<PolicyCase>& info) {
  std::string name = info.param.policy;
  for (char& c : name) {
    if (c == '+') c = '_';
  }
  if (info.param.update == AffinityUpdate::kSeed) name += "_seed";
  if (info.param.block_size > 1) name += "_block";
  return name;
}

void ExpectSameStats(const SessionStats& a, const SessionStats& b) {
  EXPECT_EQ(a.live, b.live);
  EXPECT_EQ(a.peak_live, b.peak_live);
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.last_step, b.last_step);
  EXPECT_EQ(a.appended, b.appended);
  EXPECT_EQ(a.evicted, b.evicted);
  EXPECT_EQ(a.budget, b.budget);
  EXPECT_EQ(a.bytes_held, b.bytes_held);
  EXPECT_EQ(a.placement, b.placement);
}

class BadStepTest : public ::testing::TestWithParam<PolicyCase> {
 protected:
  void SetUp() override { Open(BackendOptions{}, SessionLimits{}); }

  // (Re)creates subject and twin, each on its own backend with `options`,
  // and plays the shared history: four steps of three entries each.
  void Open(const BackendOptions& options, const SessionLimits& limits) {
    subject_.reset();
    twin_.reset();
    config_ = SessionConfig{};
    config_.shape.layers = 2;
    config_.shape.kv_heads = 2;
    config_.shape.q_heads = 4;
    config_.shape.head_dim = 4;
    config_.shape.element_type = ElementType::kF16;
    config_.budget = 6;
    config_.seed = 17;
    config_.block_size = GetParam().block_size;
    config_.affinity.update = GetParam().update;
    config_.entropy_budget.ema_rate = 0.3;
    ASSERT_OK(ApplyPolicyName(GetParam().policy, &config_));
    for (auto* backend : {&subject_backend_, &twin_backend_}) {
      auto created = CreateBackend(BackendKind::kCpu, options);
      ASSERT_OK(created);
      *backend = std::move(created).value();
    }
    auto subject = subject_backend_->CreateSession(config_, limits);
    ASSERT_OK(subject);
    subject_ = std::move(subject).value();
    auto twin = twin_backend_->CreateSession(config_, limits);
    ASSERT_OK(twin);
    twin_ = std::move(twin).value();
    next_slot_ = 1000;
    next_step_ = 41;
    lcg_ = 99;
    for (int i = 0; i < 4; ++i) RunOnBoth(GoodStep(3));
  }

  float NextFloat() {
    lcg_ = lcg_ * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<float>(lcg_ >> 40) / float(1 << 24) * 4.0f - 2.0f;
  }

  // A valid step appending `n` fresh entries.
  StepBuilder GoodStep(int n) {
    StepBuilder builder(config_.shape);
    for (int i = 0; i < n; ++i) {
      std::vector<float> key(config_.shape.key_elements());
      for (float& x : key) x = NextFloat();
      builder.Append(next_slot_++, key, /*pinned=*/i == 1);
    }
    std::vector<float> query(config_.shape.query_elements());
    for (float& x : query) x = NextFloat();
    builder.Query(query);
    builder.Entropy(1.0 + 0.5 * NextFloat());
    return builder;
  }

  void RunOnBoth(const StepBuilder& builder) {
    StepResult a, b;
    ASSERT_OK(subject_->Step(builder.Build(next_step_), &a));
    ASSERT_OK(twin_->Step(builder.Build(next_step_), &b));
    ASSERT_EQ(a.evicted, b.evicted);
    ++next_step_;
  }

  // Sends `bad` (as step `step`) to the subject only and checks the refusal;
  // then checks that the subject cannot be told apart from its twin.
  void ExpectRejected(const StepBuilder& bad, uint64_t step,
                      absl::StatusCode code, const std::string& field) {
    StepResult result;
    result.evicted = {777};
    result.live = -7;
    StepTrace trace;
    const absl::Status status = subject_->Step(bad.Build(step), &result, &trace);
    EXPECT_STATUS_CODE(status, code);
    EXPECT_THAT(std::string(status.message()), HasSubstr(field));
    EXPECT_THAT(result.evicted, ElementsAre(777u)) << "result was touched";
    EXPECT_EQ(result.live, -7) << "result was touched";
    ExpectNoTrace();
  }

  void ExpectNoTrace() {
    ExpectSameStats(subject_->Stats(), twin_->Stats());
    EXPECT_EQ(subject_->LiveSlots(), twin_->LiveSlots());
    // The next good step, twice in a row, answers identically.
    for (int i = 0; i < 2; ++i) {
      const StepBuilder next = GoodStep(2);
      StepResult a, b;
      StepTrace ta, tb;
      ASSERT_OK(subject_->Step(next.Build(next_step_), &a, &ta));
      ASSERT_OK(twin_->Step(next.Build(next_step_), &b, &tb));
      ++next_step_;
      EXPECT_EQ(a.evicted, b.evicted);
      EXPECT_EQ(a.live, b.live);
      EXPECT_EQ(a.budget, b.budget);
      EXPECT_EQ(a.entropy, b.entropy);
      EXPECT_EQ(ta.slots, tb.slots);
      EXPECT_EQ(ta.mean_logit, tb.mean_logit);
      EXPECT_EQ(ta.attention, tb.attention);
      EXPECT_EQ(ta.rank_score, tb.rank_score);
      EXPECT_EQ(ta.protected_, tb.protected_);
    }
    ExpectSameStats(subject_->Stats(), twin_->Stats());
  }

  // Overwrites element `index` of `bytes` with `value` in the session's type.
  void Poke(std::vector<std::byte>& bytes, size_t index, float value) {
    const std::vector<std::byte> encoded =
        Encode(config_.shape.element_type, {&value, 1});
    std::copy(encoded.begin(), encoded.end(),
              bytes.begin() + index * encoded.size());
  }

  SessionConfig config_;
  std::unique_ptr<Backend> subject_backend_, twin_backend_;
  std::unique_ptr<SessionState> subject_, twin_;
  uint64_t next_slot_ = 0;
  uint64_t next_step_ = 0;
  uint64_t lcg_ = 0;
};

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST_P(BadStepTest, StepGapIsFailedPrecondition) {
  ExpectRejected(GoodStep(1), next_step_ + 1,
                 absl::StatusCode::kFailedPrecondition, "step");
}

TEST_P(BadStepTest, RepeatedStepIsFailedPrecondition) {
  ExpectRejected(GoodStep(1), next_step_ - 1,
                 absl::StatusCode::kFailedPrecondition, "step");
}

TEST_P(BadStepTest, OlderStepIsFailedPrecondition) {
  ExpectRejected(GoodStep(1), next_step_ - 3,
                 absl::StatusCode::kFailedPrecondition, "step");
}

TEST_P(BadStepTest, PinnedFlagsOfTheWrongCount) {
  StepBuilder bad = GoodStep(3);
  bad.SendPinnedFlags();
  bad.pinned_flags().pop_back();
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "append.pinned");
}

TEST_P(BadStepTest, KeysOneByteShort) {
  StepBuilder bad = GoodStep(2);
  bad.key_bytes().pop_back();
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "append.keys");
}

TEST_P(BadStepTest, KeysForOneEntryTooMany) {
  StepBuilder bad = GoodStep(2);
  bad.slot_ids().pop_back();
  bad.pinned_flags().pop_back();
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "append.keys");
}

TEST_P(BadStepTest, KeysWithoutSlotIds) {
  StepBuilder bad = GoodStep(1);
  bad.slot_ids().clear();
  bad.pinned_flags().clear();
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "append.keys");
}

TEST_P(BadStepTest, QueriesOfTheWrongLength) {
  StepBuilder bad = GoodStep(1);
  bad.query_bytes().resize(bad.query_bytes().size() - 2);
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "queries");
}

TEST_P(BadStepTest, MissingQueries) {
  StepBuilder bad = GoodStep(1);
  bad.query_bytes().clear();
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "queries");
}

TEST_P(BadStepTest, NanInAKey) {
  StepBuilder bad = GoodStep(3);
  Poke(bad.key_bytes(), 2 * config_.shape.key_elements() + 5, kNan);
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "append.keys");
}

TEST_P(BadStepTest, InfinityInAKey) {
  StepBuilder bad = GoodStep(3);
  Poke(bad.key_bytes(), config_.shape.key_elements() - 1, -kInf);
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "append.keys");
}

TEST_P(BadStepTest, NanInTheQueries) {
  StepBuilder bad = GoodStep(1);
  Poke(bad.query_bytes(), 7, kNan);
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "queries");
}

TEST_P(BadStepTest, InfinityInTheQueries) {
  StepBuilder bad = GoodStep(1);
  Poke(bad.query_bytes(), 0, kInf);
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "queries");
}

TEST_P(BadStepTest, DuplicateSlotIdWithinTheBatch) {
  StepBuilder bad = GoodStep(3);
  bad.slot_ids()[2] = bad.slot_ids()[0];
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "append.slot_ids");
}

TEST_P(BadStepTest, SlotIdThatIsAlreadyLive) {
  StepBuilder bad = GoodStep(2);
  const std::vector<uint64_t> live = twin_->LiveSlots();
  ASSERT_FALSE(live.empty());
  bad.slot_ids()[1] = live.back();
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "append.slot_ids");
}

TEST_P(BadStepTest, BothEntropyAndLogits) {
  StepBuilder bad = GoodStep(1);
  bad.Logits({0.1f, 0.2f, 0.3f});
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "entropy");
}

TEST_P(BadStepTest, NegativeEntropy) {
  StepBuilder bad = GoodStep(1);
  bad.Entropy(-0.01);
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "entropy");
}

TEST_P(BadStepTest, NanEntropy) {
  StepBuilder bad = GoodStep(1);
  bad.Entropy(std::nan(""));
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "entropy");
}

TEST_P(BadStepTest, InfiniteEntropy) {
  StepBuilder bad = GoodStep(1);
  bad.Entropy(INFINITY);
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "entropy");
}

TEST_P(BadStepTest, NonFiniteLogits) {
  for (float poison : {kNan, kInf, -kInf}) {
    StepBuilder bad = GoodStep(1);
    bad.entropy().reset();
    bad.Logits({0.5f, poison, 1.0f});
    ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                   "logits");
  }
}

TEST_P(BadStepTest, MissingEntropyWhenThePolicyReadsIt) {
  if (!PolicyNeedsEntropy(config_)) {
    GTEST_SKIP() << GetParam().policy << " reads no entropy";
  }
  StepBuilder bad = GoodStep(1);
  bad.entropy().reset();
  ExpectRejected(bad, next_step_, absl::StatusCode::kInvalidArgument,
                 "entropy");
}

TEST_P(BadStepTest, MissingEntropyIsFineWhenThePolicyIgnoresIt) {
  if (PolicyNeedsEntropy(config_)) {
    GTEST_SKIP() << GetParam().policy << " reads the entropy";
  }
  StepBuilder step = GoodStep(1);
  step.entropy().reset();
  StepResult result;
  ASSERT_OK(subject_->Step(step.Build(next_step_), &result));
  EXPECT_EQ(result.entropy, 0.0);
}

TEST_P(BadStepTest, MoreLiveEntriesThanTheLimit) {
  SessionLimits limits;
  limits.max_live_entries = 20;
  Open(BackendOptions{}, limits);
  // One entry past the limit is refused.
  const int64_t live = twin_->Stats().live;
  ASSERT_LT(live, 20);
  StepBuilder bad = GoodStep(static_cast<int>(20 - live + 1));
  ExpectRejected(bad, next_step_, absl::StatusCode::kResourceExhausted,
                 "append.slot_ids");
  // Exactly up to the limit is fine.
  const int64_t now = subject_->Stats().live;
  StepBuilder fits = GoodStep(static_cast<int>(20 - now));
  StepResult result;
  EXPECT_OK(subject_->Step(fits.Build(next_step_), &result));
}

TEST_P(BadStepTest, MoreBytesThanTheBackendMayHold) {
  // 16 f16 key elements + 40 bytes of state = 72 bytes an entry; room for 30.
  BackendOptions options;
  options.max_bytes = 30 * 72;
  Open(options, SessionLimits{});
  EXPECT_EQ(twin_->Stats().bytes_held, twin_->Stats().live * 72);
  const int64_t live = twin_->Stats().live;
  StepBuilder bad = GoodStep(static_cast<int>(30 - live + 1));
  ExpectRejected(bad, next_step_, absl::StatusCode::kResourceExhausted,
                 "append");
}

TEST_P(BadStepTest, ARejectedStepNumberMayBeRetried) {
  StepBuilder bad = GoodStep(2);
  bad.key_bytes().pop_back();
  const uint64_t step = next_step_;
  StepResult result;
  EXPECT_FALSE(subject_->Step(bad.Build(step), &result).ok());
  // ExpectNoTrace sends the next good step with the same number.
  EXPECT_EQ(next_step_, step);
  ExpectNoTrace();
}

INSTANTIATE_TEST_SUITE_P(
    Policies, BadStepTest,
    ::testing::Values(PolicyCase{"entropy", AffinityUpdate::kLogitEma, 1},
                      PolicyCase{"affinity+fixed", AffinityUpdate::kSeed, 1},
                      PolicyCase{"h2o+entropy", AffinityUpdate::kLogitEma, 1},
                      PolicyCase{"random", AffinityUpdate::kLogitEma, 1},
                      PolicyCase{"tova", AffinityUpdate::kLogitEma, 2},
                      PolicyCase{"window", AffinityUpdate::kLogitEma, 1}),
    CaseName);

// A CPU session of a tiny window+fixed config (budget 4), and a step with
// one query and nothing appended, for the step-number tests.
class StepNumberTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto backend = CreateBackend(BackendKind::kCpu);
    ASSERT_OK(backend);
    backend_ = *std::move(backend);
    NewSession();
  }
  void NewSession() {
    auto session = backend_->CreateSession(config_, {});
    ASSERT_OK(session);
    session_ = *std::move(session);
  }
  absl::Status Step(uint64_t number) {
    StepBuilder step(config_.shape);
    step.Query({1.0f, 0.0f});
    StepResult result;
    return session_->Step(step.Build(number), &result);
  }

  const SessionConfig config_ =
      testing::TinyConfig(Ranking::kWindow, BudgetControl::kFixed, 4);
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> session_;
};

// The first step may carry any number; the next must follow it.
TEST_F(StepNumberTest, FirstStepMayBeAnyNumberThenStrictlyConsecutive) {
  for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{123456789}}) {
    NewSession();
    ASSERT_OK(Step(first));
    EXPECT_EQ(session_->Stats().last_step, first);
    EXPECT_STATUS_CODE(Step(first + 2), absl::StatusCode::kFailedPrecondition);
    EXPECT_OK(Step(first + 1));
    EXPECT_EQ(session_->Stats().steps, 2);
  }
}

// No step number follows 2^64-1: core refuses it as a first step (the session
// could never step again) and, once a session has reached it (from 2^64-2),
// refuses every later step with a message that says why, for every backend
// user (server, eval, simulator) alike.
TEST_F(StepNumberTest, TheLastNumberCannotStartASessionAndEndsOne) {
  constexpr uint64_t kMax = ~uint64_t{0};
  const absl::Status first = Step(kMax);
  EXPECT_STATUS_CODE(first, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(first.message()),
              ::testing::HasSubstr("cannot be a session's first step"));
  EXPECT_EQ(session_->Stats().steps, 0);
  ASSERT_OK(Step(kMax - 1));
  ASSERT_OK(Step(kMax));
  for (uint64_t next : {uint64_t{0}, kMax}) {
    const absl::Status after = Step(next);
    EXPECT_STATUS_CODE(after, absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(after.message()),
                ::testing::HasSubstr("step numbers are used up"));
  }
  EXPECT_EQ(session_->Stats().steps, 2);
}

}  // namespace
}  // namespace entrokv
