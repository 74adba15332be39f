// Every bad input of docs/design.md's failure semantics gets its precise code and a
// message naming the field, and leaves the session exactly as it was: after
// each rejected step, the next good step is answered as an in-process core
// session that never saw the bad one answers it.

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class BadStepTest : public ServerTest {
 protected:
  void SetUp() override {
    StartServer();
    config_.shape = SmallShape(ElementType::kF32);
    config_.budget = 12;
    config_.placement = Placement::kCpu;  // affinity + entropy.
    ASSERT_OK_AND_ASSIGN(backend_, CreateBackend(BackendKind::kCpu));
    ASSERT_OK_AND_ASSIGN(reference_,
                         backend_->CreateSession(config_, SessionLimits{}));
    ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                         CreateSession(stub_.get(), ToWireConfig(config_)));
    id_ = created.session_id();
    stream_ = std::make_unique<DecodeStream>(stub_.get());
    ASSERT_OK(stream_->Attach(id_));
    source_ = std::make_unique<WireStepSource>(config_.shape, 11, id_);
    for (int i = 0; i < 20; ++i) RunGoodStep();
  }

  // The next step of the stream, on both sides; they must agree.
  void RunGoodStep() {
    const v1::SessionStep step = source_->Next();
    CoreStep core_step = ToCoreStep(step);
    StepResult expected;
    ASSERT_OK(reference_->Step(core_step.input, &expected));
    ASSERT_OK_AND_ASSIGN(v1::SessionStepResult got, stream_->Step(step));
    ASSERT_THAT(got.evicted(), ElementsAreArray(expected.evicted));
    ASSERT_EQ(got.live(), expected.live);
    ASSERT_EQ(got.budget(), expected.budget);
  }

  // Takes the next good step from the source without sending it; the test
  // spoils a copy, and ExpectRejected() sends the copy and then this step.
  v1::SessionStep NextGoodStepPreview() {
    preview_ = source_->Next();
    has_preview_ = true;
    return preview_;
  }

  // Sends `bad`, expects `code` with `field` in the message, then sends the
  // previewed good step and checks the session answered as if `bad` had never
  // been sent.
  void ExpectRejected(const v1::SessionStep& bad, absl::StatusCode code,
                      const std::string& field) {
    const absl::StatusOr<v1::SessionStepResult> result = stream_->Step(bad);
    EXPECT_STATUS_CODE(result, code);
    EXPECT_THAT(result.status().message(),
                HasSubstr(absl::StrCat("steps[0].", field)));
    ASSERT_TRUE(has_preview_);
    has_preview_ = false;
    CoreStep core_step = ToCoreStep(preview_);
    StepResult expected;
    ASSERT_OK(reference_->Step(core_step.input, &expected));
    ASSERT_OK_AND_ASSIGN(v1::SessionStepResult got, stream_->Step(preview_));
    EXPECT_THAT(got.evicted(), ElementsAreArray(expected.evicted));
    EXPECT_EQ(got.live(), expected.live);
    EXPECT_EQ(got.budget(), expected.budget);
    ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id_));
    EXPECT_EQ(info.stats().steps(), reference_->Stats().steps);
    EXPECT_EQ(info.stats().live(), reference_->Stats().live);
  }

  SessionConfig config_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<SessionState> reference_;
  std::string id_;
  std::unique_ptr<DecodeStream> stream_;
  std::unique_ptr<WireStepSource> source_;
  v1::SessionStep preview_;
  bool has_preview_ = false;
};

float* MutableFloats(std::string* bytes) {
  return reinterpret_cast<float*>(bytes->data());
}

TEST_F(BadStepTest, KeysOfTheWrongLength) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.mutable_append()->mutable_keys()->append(4, '\0');
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "append.keys");
}

TEST_F(BadStepTest, QueriesOfTheWrongLength) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.mutable_queries()->resize(bad.queries().size() - 4);
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "queries");
}

TEST_F(BadStepTest, NanKey) {
  v1::SessionStep bad = NextGoodStepPreview();
  MutableFloats(bad.mutable_append()->mutable_keys())[3] =
      std::numeric_limits<float>::quiet_NaN();
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "append.keys");
}

TEST_F(BadStepTest, InfiniteQuery) {
  v1::SessionStep bad = NextGoodStepPreview();
  MutableFloats(bad.mutable_queries())[0] =
      std::numeric_limits<float>::infinity();
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "queries");
}

TEST_F(BadStepTest, DuplicateSlotIdInOneAppend) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.mutable_append()->add_slot_ids(bad.append().slot_ids(0));
  bad.mutable_append()->mutable_keys()->append(bad.append().keys());
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "append.slot_ids");
}

TEST_F(BadStepTest, SlotIdThatIsAlreadyLive) {
  v1::SessionStep bad = NextGoodStepPreview();
  const std::vector<uint64_t> live = reference_->LiveSlots();
  ASSERT_FALSE(live.empty());
  bad.mutable_append()->set_slot_ids(0, live.back());
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "append.slot_ids");
}

TEST_F(BadStepTest, PinnedFlagsOfTheWrongCount) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.mutable_append()->add_pinned(true);
  bad.mutable_append()->add_pinned(false);
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "append.pinned");
}

TEST_F(BadStepTest, StepNumberGap) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.set_step(bad.step() + 1);
  ExpectRejected(bad, absl::StatusCode::kFailedPrecondition, "step");
}

TEST_F(BadStepTest, StepNumberRepeated) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.set_step(bad.step() - 1);
  ExpectRejected(bad, absl::StatusCode::kFailedPrecondition, "step");
}

TEST_F(BadStepTest, MissingEntropyForAnEntropyPolicy) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.clear_entropy_source();
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "entropy");
}

TEST_F(BadStepTest, NegativeEntropy) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.set_entropy(-0.5);
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "entropy");
}

TEST_F(BadStepTest, NanEntropy) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.set_entropy(std::nan(""));
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "entropy");
}

TEST_F(BadStepTest, NonFiniteLogits) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.mutable_logits()->add_values(1.0f);
  bad.mutable_logits()->add_values(std::numeric_limits<float>::infinity());
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "logits");
}

TEST_F(BadStepTest, EmptyLogits) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.mutable_logits()->clear_values();
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "logits");
}

TEST_F(BadStepTest, UnknownSession) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.set_session_id("no-such-session");
  ExpectRejected(bad, absl::StatusCode::kNotFound, "session_id");
}

// An empty id is bad input in a step as in attach and detach, not an
// unknown session.
TEST_F(BadStepTest, EmptySessionId) {
  v1::SessionStep bad = NextGoodStepPreview();
  bad.clear_session_id();
  ExpectRejected(bad, absl::StatusCode::kInvalidArgument, "session_id: empty");
}

TEST_F(BadStepTest, SessionNotAttachedToThisStream) {
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse other,
                       CreateSession(stub_.get(), ToWireConfig(config_)));
  v1::SessionStep bad = NextGoodStepPreview();
  bad.set_session_id(other.session_id());
  ExpectRejected(bad, absl::StatusCode::kFailedPrecondition, "session_id");
}

TEST_F(BadStepTest, AttachUnknownSessionLeavesStreamUsable) {
  const absl::Status status = stream_->Attach("nope");
  EXPECT_STATUS_CODE(status, absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("attach[0].session_id"));
  RunGoodStep();
}

// ---------------------------------------------------------------------------
// Limits.

class LimitTest : public ServerTest {
 protected:
  absl::StatusOr<std::string> Create(const SessionConfig& config) {
    return CreateSessionId(stub_.get(), config);
  }
};

SessionConfig FixedWindow(int64_t budget) {
  return WindowConfig(budget, ElementType::kF32);
}

TEST_F(LimitTest, MaxLiveEntriesPerSession) {
  ServerOptions options = TestServerOptions();
  options.max_live_entries = 16;
  StartServer(options);
  absl::StatusOr<std::string> too_big = Create(FixedWindow(17));
  EXPECT_STATUS_CODE(too_big, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.status().message(), HasSubstr("config.budget"));

  ASSERT_OK_AND_ASSIGN(std::string id, Create(FixedWindow(8)));
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource huge(SmallShape(ElementType::kF32), 1, id, /*prefill=*/17);
  const absl::StatusOr<v1::SessionStepResult> result = stream.Step(huge.Next());
  EXPECT_STATUS_CODE(result, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(result.status().message(), HasSubstr("steps[0].append.slot_ids"));
  WireStepSource fits(SmallShape(ElementType::kF32), 1, id, /*prefill=*/16);
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult ok, stream.Step(fits.Next()));
  EXPECT_EQ(ok.live(), 8);
}

TEST_F(LimitTest, MaxBytesHeld) {
  ServerOptions options = TestServerOptions();
  // One entry: 2·2·16 f32 keys + 40 bytes of state = 296 bytes.
  options.max_bytes = 296 * 10;
  StartServer(options);
  ASSERT_OK_AND_ASSIGN(std::string id, Create(FixedWindow(64)));
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource source(SmallShape(ElementType::kF32), 1, id, /*prefill=*/10);
  ASSERT_OK(stream.Step(source.Next()));  // 10 entries: at the limit.
  const absl::StatusOr<v1::SessionStepResult> over = stream.Step(source.Next());
  EXPECT_STATUS_CODE(over, absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("steps[0].append"));
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  EXPECT_EQ(info.stats().live(), 10);
}

TEST_F(LimitTest, MaxSessions) {
  ServerOptions options = TestServerOptions();
  options.max_sessions = 3;
  StartServer(options);
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string id, Create(FixedWindow(8)));
    ids.push_back(id);
  }
  EXPECT_STATUS_CODE(Create(FixedWindow(8)),
                     absl::StatusCode::kResourceExhausted);
  ASSERT_OK(CloseSession(stub_.get(), ids[0]));
  EXPECT_OK(Create(FixedWindow(8)));
}

TEST_F(LimitTest, MessageTooLargeEndsOnlyThatStream) {
  ServerOptions options = TestServerOptions();
  options.max_message_bytes = 64 << 10;
  StartServer(options);
  ASSERT_OK_AND_ASSIGN(std::string id, Create(FixedWindow(8)));
  WireStepSource source(SmallShape(ElementType::kF32), 1, id);
  {
    DecodeStream stream(stub_.get());
    ASSERT_OK(stream.Attach(id));
    ASSERT_OK(stream.Step(source.Next()));
    v1::SessionStep huge = source.Next();
    huge.set_queries(std::string(100 << 10, '\0'));
    EXPECT_STATUS_CODE(stream.Step(huge), absl::StatusCode::kResourceExhausted);
  }
  // The session is intact and attachable again; step 2 was never applied.
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  EXPECT_EQ(info.stats().steps(), 1);
  DecodeStream again(stub_.get());
  auto attached = [&] { return again.Attach(id).ok(); };
  bool ok = false;
  for (int i = 0; i < 200 && !(ok = attached()); ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(ok);
  WireStepSource resume(SmallShape(ElementType::kF32), 2, id, /*prefill=*/1,
                        /*first_slot=*/90000);
  resume.set_first_step(2);
  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult result, again.Step(resume.Next()));
  EXPECT_EQ(result.step(), 2u);
}

// ---------------------------------------------------------------------------
// Step numbers at the top of the 64-bit range.

class StepNumberTest : public ServerTest {
 protected:
  void SetUp() override {
    StartServer();
    ASSERT_OK_AND_ASSIGN(id_, CreateSessionId(stub_.get(), FixedWindow(8)));
    stream_ = std::make_unique<DecodeStream>(stub_.get());
    ASSERT_OK(stream_->Attach(id_));
  }

  // A good step numbered `number`, appending one fresh slot.
  v1::SessionStep StepNumbered(uint64_t number) {
    WireStepSource source(SmallShape(ElementType::kF32), number, id_,
                          /*prefill=*/1, /*first_slot=*/next_slot_++);
    source.set_first_step(number);
    return source.Next();
  }

  std::string id_;
  std::unique_ptr<DecodeStream> stream_;
  uint64_t next_slot_ = 1;
};

constexpr uint64_t kMaxStep = std::numeric_limits<uint64_t>::max();

// No step number can follow 2^64-1, so a session that started there could
// never step again: the first step is refused, naming `step`, and the session
// is unchanged and can start at a usable number.
TEST_F(StepNumberTest, FirstStepOfTwoToThe64MinusOneIsRefused) {
  const absl::StatusOr<v1::SessionStepResult> refused =
      stream_->Step(StepNumbered(kMaxStep));
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("steps[0].step"));
  EXPECT_THAT(refused.status().message(), HasSubstr("first step"));
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id_));
  EXPECT_EQ(info.stats().steps(), 0);
  EXPECT_FALSE(info.stats().has_last_step());

  ASSERT_OK_AND_ASSIGN(v1::SessionStepResult first,
                       stream_->Step(StepNumbered(kMaxStep - 1)));
  EXPECT_EQ(first.step(), kMaxStep - 1);
  EXPECT_EQ(first.live(), 1);
}

// A session that reached 2^64-1 the only way left (starting at 2^64-2) is
// told that its step numbers are used up, not "got 0, expected 0".
TEST_F(StepNumberTest, SessionAtTheLastNumberSaysItsNumbersAreUsedUp) {
  ASSERT_OK(stream_->Step(StepNumbered(kMaxStep - 1)));
  ASSERT_OK(stream_->Step(StepNumbered(kMaxStep)));
  const absl::StatusOr<v1::SessionStepResult> next =
      stream_->Step(StepNumbered(0));  // 2^64 on the wire's uint64.
  EXPECT_STATUS_CODE(next, absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(next.status().message(), HasSubstr("steps[0].step"));
  EXPECT_THAT(next.status().message(), HasSubstr("used up"));
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id_));
  EXPECT_EQ(info.stats().steps(), 2);
}

// ---------------------------------------------------------------------------
// Bad CreateSession / unary inputs.

class BadCreateTest : public ServerTest {
 protected:
  void SetUp() override { StartServer(); }

  void ExpectRejected(const v1::SessionConfig& config, absl::StatusCode code,
                      const std::string& field) {
    const absl::StatusOr<v1::CreateSessionResponse> created =
        CreateSession(stub_.get(), config);
    EXPECT_STATUS_CODE(created, code);
    EXPECT_THAT(created.status().message(), HasSubstr(field));
    ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse list,
                         ListSessions(stub_.get()));
    EXPECT_EQ(list.sessions_size(), 0);
  }

  v1::SessionConfig Good() { return ToWireConfig(FixedWindow(8)); }
};

TEST_F(BadCreateTest, QHeadsNotAMultipleOfKvHeads) {
  v1::SessionConfig config = Good();
  config.mutable_shape()->set_q_heads(3);
  ExpectRejected(config, absl::StatusCode::kInvalidArgument,
                 "config.shape.q_heads");
}

TEST_F(BadCreateTest, ZeroHeadDim) {
  v1::SessionConfig config = Good();
  config.mutable_shape()->set_head_dim(0);
  ExpectRejected(config, absl::StatusCode::kInvalidArgument,
                 "config.shape.head_dim");
}

TEST_F(BadCreateTest, BudgetOutOfRange) {
  v1::SessionConfig config = Good();
  config.set_budget(0);
  ExpectRejected(config, absl::StatusCode::kInvalidArgument, "config.budget");
  config.set_budget(-5);
  ExpectRejected(config, absl::StatusCode::kInvalidArgument, "config.budget");
}

TEST_F(BadCreateTest, UnknownEnumValues) {
  v1::SessionConfig config = Good();
  config.set_ranking(static_cast<v1::Ranking>(99));
  ExpectRejected(config, absl::StatusCode::kInvalidArgument, "config.ranking");
  config = Good();
  config.mutable_shape()->set_element_type(static_cast<v1::ElementType>(42));
  ExpectRejected(config, absl::StatusCode::kInvalidArgument,
                 "config.shape.element_type");
  config = Good();
  config.set_budget_control(static_cast<v1::BudgetControl>(-1));
  ExpectRejected(config, absl::StatusCode::kInvalidArgument,
                 "config.budget_control");
  config = Good();
  config.set_placement(static_cast<v1::Placement>(7));
  ExpectRejected(config, absl::StatusCode::kInvalidArgument,
                 "config.placement");
  config = Good();
  config.set_block_reduce(static_cast<v1::BlockReduce>(3));
  ExpectRejected(config, absl::StatusCode::kInvalidArgument,
                 "config.block_reduce");
  config = Good();
  config.mutable_affinity()->set_update(static_cast<v1::AffinityUpdate>(9));
  ExpectRejected(config, absl::StatusCode::kInvalidArgument,
                 "config.affinity.update");
}

TEST_F(BadCreateTest, BadPolicyName) {
  v1::SessionConfig config = Good();
  config.clear_ranking();
  config.clear_budget_control();
  config.set_policy("lru");
  ExpectRejected(config, absl::StatusCode::kInvalidArgument, "config.policy");
  config = Good();  // window + fixed
  config.set_policy("tova");
  ExpectRejected(config, absl::StatusCode::kInvalidArgument, "config.policy");
}

// The checks that no numeric bound covers (bounds_test.cc has those): each
// is INVALID_ARGUMENT whose message starts with the field, "config.FIELD: ".
TEST_F(BadCreateTest, EveryRuleBetweenFieldsNamesTheField) {
  const struct {
    const char* field;
    std::function<void(v1::SessionConfig*)> spoil;
  } cases[] = {
      {"config.scored_layers",  // Two listed for three sent layers.
       [](v1::SessionConfig* c) {
         c->mutable_shape()->set_layers(3);
         c->add_scored_layers(0);
         c->add_scored_layers(1);
       }},
      {"config.scored_layers",  // Not strictly increasing.
       [](v1::SessionConfig* c) {
         c->mutable_shape()->set_layers(2);
         c->add_scored_layers(5);
         c->add_scored_layers(5);
       }},
      {"config.block_summary",  // Token granularity.
       [](v1::SessionConfig* c) { c->set_block_summary(true); }},
      {"config.block_summary",  // Budget 8 below one block of 16.
       [](v1::SessionConfig* c) {
         c->set_block_size(16);
         c->set_block_summary(true);
       }},
      {"config.shape.query_form",  // tova needs each head's softmax.
       [](v1::SessionConfig* c) {
         c->set_ranking(v1::RANKING_TOVA);
         c->mutable_shape()->set_query_form(v1::QUERY_FORM_GROUP_SUM);
       }},
      {"config.shape.q_heads",  // Fewer q heads than kv heads.
       [](v1::SessionConfig* c) {
         c->mutable_shape()->set_kv_heads(4);
         c->mutable_shape()->set_q_heads(2);
       }},
      {"config.entropy_budget.min_budget",  // Above budget 8.
       [](v1::SessionConfig* c) {
         c->mutable_entropy_budget()->set_min_budget(9);
       }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field);
    v1::SessionConfig config = Good();
    c.spoil(&config);
    const absl::StatusOr<v1::CreateSessionResponse> created =
        CreateSession(stub_.get(), config);
    EXPECT_STATUS_CODE(created, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(created.status().message()),
                ::testing::StartsWith(absl::StrCat(c.field, ": ")));
  }
}

TEST_F(BadCreateTest, GpuPlacementWithoutDevice) {
  v1::SessionConfig config = Good();
  config.set_placement(v1::PLACEMENT_GPU);
  ExpectRejected(config, absl::StatusCode::kFailedPrecondition,
                 "config.placement");
}

TEST_F(BadCreateTest, SessionIds) {
  for (const std::string& bad :
       {std::string("has space"), std::string(129, 'x')}) {
    const absl::StatusOr<v1::CreateSessionResponse> created =
        CreateSession(stub_.get(), Good(), bad);
    EXPECT_STATUS_CODE(created, absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(created.status().message()),
                ::testing::StartsWith("session_id: "));
  }
  ASSERT_OK(CreateSession(stub_.get(), Good(), "dup"));
  EXPECT_STATUS_CODE(CreateSession(stub_.get(), Good(), "dup"),
                     absl::StatusCode::kAlreadyExists);
  EXPECT_STATUS_CODE(GetSession(stub_.get(), ""),
                     absl::StatusCode::kInvalidArgument);
  EXPECT_STATUS_CODE(GetSession(stub_.get(), "unknown"),
                     absl::StatusCode::kNotFound);
  EXPECT_STATUS_CODE(CloseSession(stub_.get(), "unknown"),
                     absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace entrokv::server::testing
