// The demote tier on the wire (docs/step-semantics.md section 12, issue #24):
// a session without a tier is answered exactly as before the tier existed
// (no SessionStepResult field 10 or 11, no SessionStats field 10-12, no
// SessionConfig field 25: checked on the serialized bytes the server sends),
// and a session with one gets its moves and counters, equal to core's run in
// process on the same inputs.

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::google::protobuf::internal::WireFormatLite;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// One field of a serialized message: its number and, when it is length
// delimited, its bytes (a nested message, a string or a packed list).
struct WireField {
  int number = 0;
  std::string bytes;
};

// The top-level fields of `bytes`, in the order they are written; an empty
// list and a test failure when the bytes do not parse.
std::vector<WireField> Fields(const std::string& bytes) {
  std::vector<WireField> fields;
  google::protobuf::io::CodedInputStream in(
      reinterpret_cast<const uint8_t*>(bytes.data()),
      static_cast<int>(bytes.size()));
  while (true) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    WireField field;
    field.number = static_cast<int>(WireFormatLite::GetTagFieldNumber(tag));
    if (WireFormatLite::GetTagWireType(tag) ==
        WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) ||
          !in.ReadString(&field.bytes, static_cast<int>(length))) {
        ADD_FAILURE() << "truncated field " << field.number;
        return {};
      }
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      ADD_FAILURE() << "bad field " << field.number;
      return {};
    }
    fields.push_back(std::move(field));
  }
  EXPECT_TRUE(in.ConsumedEntireMessage());
  return fields;
}

std::set<int> Numbers(const std::string& bytes) {
  std::set<int> numbers;
  for (const WireField& f : Fields(bytes)) numbers.insert(f.number);
  return numbers;
}

// The bytes of every occurrence of field `number` in `bytes`.
std::vector<std::string> Nested(const std::string& bytes, int number) {
  std::vector<std::string> out;
  for (WireField& f : Fields(bytes)) {
    if (f.number == number) out.push_back(std::move(f.bytes));
  }
  return out;
}

// Field numbers (entrokv.proto).
constexpr int kSessionInfoConfig = 2, kSessionInfoStats = 3;
constexpr int kCreateResponseSession = 2;
constexpr int kGetResponseSession = 1;
constexpr int kDecodeResponseResults = 2;
constexpr int kResultEvicted = 4, kResultDemoted = 10, kResultPromoted = 11;
constexpr int kStatsEvicted = 7, kStatsTierHeld = 10, kStatsDemoted = 11,
              kStatsPromoted = 12;
constexpr int kConfigTier = 25;

class TierWireTest : public ServerTest {
 protected:
  static SessionConfig TovaConfig(int64_t tier) {
    SessionConfig config;
    config.shape = SmallShape(ElementType::kF32);
    config.budget = 8;
    config.ranking = Ranking::kTova;
    config.budget_control = BudgetControl::kFixed;
    config.protection.sinks = 1;
    config.protection.recent = 2;
    if (tier > 0) {
      config.tier.capacity = tier;
      config.tier.max_promotions = 3;
      config.tier.promote_margin = 0.0;
    }
    config.placement = Placement::kCpu;
    return config;
  }

  // The wire form of `config`, the tier written by hand (ToWireConfig
  // predates it).
  static v1::SessionConfig Wire(const SessionConfig& config) {
    v1::SessionConfig wire = ToWireConfig(config);
    if (config.tier.capacity > 0) {
      wire.mutable_tier()->set_capacity(config.tier.capacity);
      wire.mutable_tier()->set_max_promotions(config.tier.max_promotions);
      wire.mutable_tier()->set_promote_margin(config.tier.promote_margin);
    }
    return wire;
  }

  // CreateSession through raw bytes: the response's bytes.
  std::string CreateRaw(const SessionConfig& config, const std::string& id) {
    v1::CreateSessionRequest request;
    *request.mutable_config() = Wire(config);
    request.set_session_id(id);
    std::string reply;
    const grpc::Status status =
        RawUnaryCall(channel_.get(), "/entrokv.v1.EntroKv/CreateSession",
                     request.SerializeAsString(), &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return reply;
  }

  std::string GetRaw(const std::string& id) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    std::string reply;
    const grpc::Status status =
        RawUnaryCall(channel_.get(), "/entrokv.v1.EntroKv/GetSession",
                     request.SerializeAsString(), &reply);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return reply;
  }
};

TEST_F(TierWireTest, SessionWithoutATierIsAnsweredWithoutTheTierFields) {
  StartServer();
  const SessionConfig config = TovaConfig(/*tier=*/0);
  const std::string created = CreateRaw(config, "no-tier");
  const std::vector<std::string> info = Nested(created, kCreateResponseSession);
  ASSERT_EQ(info.size(), 1u);
  const std::vector<std::string> echoed = Nested(info[0], kSessionInfoConfig);
  ASSERT_EQ(echoed.size(), 1u);
  EXPECT_FALSE(Numbers(echoed[0]).contains(kConfigTier));
  // The scan sees the config's other fields (budget is field 2).
  EXPECT_TRUE(Numbers(echoed[0]).contains(2));

  RawStream stream(channel_.get(), "/entrokv.v1.EntroKv/Decode");
  v1::DecodeRequest attach;
  attach.add_attach("no-tier");
  ASSERT_TRUE(stream.Write(attach));
  std::string reply;
  ASSERT_TRUE(stream.Read(&reply));
  WireStepSource source(config.shape, /*seed=*/5, "no-tier", /*prefill=*/10);
  int evicting_results = 0;
  for (int t = 0; t < 40; ++t) {
    SCOPED_TRACE(absl::StrCat("step ", t));
    v1::DecodeRequest request;
    *request.add_steps() = source.Next();
    ASSERT_TRUE(stream.Write(request));
    ASSERT_TRUE(stream.Read(&reply));
    const std::vector<std::string> results =
        Nested(reply, kDecodeResponseResults);
    ASSERT_EQ(results.size(), 1u);
    const std::set<int> numbers = Numbers(results[0]);
    EXPECT_FALSE(numbers.contains(kResultDemoted));
    EXPECT_FALSE(numbers.contains(kResultPromoted));
    if (numbers.contains(kResultEvicted)) ++evicting_results;
  }
  // Budget 8 over 49 entries: the session evicted, and the scan saw it.
  EXPECT_GT(evicting_results, 0);
  stream.WritesDone();
  EXPECT_TRUE(stream.Finish().ok());

  const std::vector<std::string> got = Nested(
      Nested(GetRaw("no-tier"), kGetResponseSession).at(0), kSessionInfoStats);
  ASSERT_EQ(got.size(), 1u);
  const std::set<int> stats = Numbers(got[0]);
  EXPECT_TRUE(stats.contains(kStatsEvicted));
  EXPECT_FALSE(stats.contains(kStatsTierHeld));
  EXPECT_FALSE(stats.contains(kStatsDemoted));
  EXPECT_FALSE(stats.contains(kStatsPromoted));
}

TEST_F(TierWireTest, TierSessionGetsTheMovesCoreDecidesInProcess) {
  StartServer();
  const SessionConfig config = TovaConfig(/*tier=*/6);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                       CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SessionState> reference,
                       backend->CreateSession(config, SessionLimits{}));
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), Wire(config)));
  const v1::TierParams& tier = created.session().config().tier();
  EXPECT_EQ(tier.capacity(), 6);
  EXPECT_EQ(tier.max_promotions(), 3);
  EXPECT_EQ(tier.promote_margin(), 0.0);
  const std::string id = created.session_id();

  RawStream stream(channel_.get(), "/entrokv.v1.EntroKv/Decode");
  v1::DecodeRequest attach;
  attach.add_attach(id);
  ASSERT_TRUE(stream.Write(attach));
  std::string reply;
  ASSERT_TRUE(stream.Read(&reply));
  WireStepSource source(config.shape, /*seed=*/5, id, /*prefill=*/10);
  int64_t demoted = 0, promoted = 0, evicted = 0;
  bool saw_demoted_field = false;
  for (int t = 0; t < 120; ++t) {
    SCOPED_TRACE(absl::StrCat("step ", t));
    v1::DecodeRequest request;
    *request.add_steps() = source.Next();
    CoreStep core_step = ToCoreStep(request.steps(0));
    StepResult expected;
    ASSERT_OK(reference->Step(core_step.input, &expected));
    ASSERT_TRUE(stream.Write(request));
    ASSERT_TRUE(stream.Read(&reply));
    v1::DecodeResponse response;
    ASSERT_TRUE(response.ParseFromString(reply));
    ASSERT_EQ(response.results_size(), 1);
    const v1::SessionStepResult& got = response.results(0);
    ASSERT_EQ(got.status().code(), 0) << got.status().message();
    ASSERT_THAT(got.evicted(), ElementsAreArray(expected.evicted));
    ASSERT_THAT(got.demoted(), ElementsAreArray(expected.demoted));
    ASSERT_THAT(got.promoted(), ElementsAreArray(expected.promoted));
    ASSERT_EQ(got.live(), expected.live);
    ASSERT_EQ(got.budget(), expected.budget);
    saw_demoted_field |= Numbers(Nested(reply, kDecodeResponseResults).at(0))
                             .contains(kResultDemoted);
    demoted += got.demoted_size();
    promoted += got.promoted_size();
    evicted += got.evicted_size();
  }
  // The run exercised every kind of move, or the comparison says little.
  EXPECT_GT(demoted, 0);
  EXPECT_GT(promoted, 0);
  EXPECT_GT(evicted, 0);
  EXPECT_TRUE(saw_demoted_field);
  stream.WritesDone();
  EXPECT_TRUE(stream.Finish().ok());

  const SessionStats want = reference->Stats();
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  EXPECT_EQ(info.stats().live(), want.live);
  EXPECT_EQ(info.stats().tier_held(), want.tier_held);
  EXPECT_EQ(info.stats().demoted(), want.demoted);
  EXPECT_EQ(info.stats().promoted(), want.promoted);
  EXPECT_EQ(info.stats().evicted(), want.evicted);
  EXPECT_EQ(info.stats().bytes_held(), want.bytes_held);
  // The counters are the sums of the answers (section 12, "Accounting").
  EXPECT_EQ(info.stats().demoted(), demoted);
  EXPECT_EQ(info.stats().promoted(), promoted);
  EXPECT_EQ(info.stats().evicted(), evicted);
}

TEST_F(TierWireTest, RefusedTiersNameTheField) {
  StartServer();
  SessionConfig window = WindowConfig(8);
  window.tier.capacity = 4;
  const absl::StatusOr<v1::CreateSessionResponse> refused =
      CreateSession(stub_.get(), Wire(window));
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("config.tier.capacity: "));

  v1::SessionConfig negative = Wire(TovaConfig(4));
  negative.mutable_tier()->set_promote_margin(-0.5);
  const absl::StatusOr<v1::CreateSessionResponse> margin =
      CreateSession(stub_.get(), negative);
  EXPECT_STATUS_CODE(margin, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(margin.status().message()),
              HasSubstr("config.tier.promote_margin: "));
}

// The shadows see the session's live set follow its moves: the primary's
// report counts live entries, not the demoted ones it still holds.
TEST_F(TierWireTest, ShadowsFollowTheSessionsDemotionsAndPromotions) {
  StartServer();
  v1::CreateSessionRequest request;
  *request.mutable_config() = Wire(TovaConfig(6));
  v1::SessionConfig shadow;
  shadow.set_policy("h2o");
  shadow.set_budget(8);
  *request.mutable_shadowing()->add_policies() = shadow;
  grpc::ClientContext context;
  v1::CreateSessionResponse created;
  ASSERT_TRUE(stub_->CreateSession(&context, request, &created).ok());
  const std::string id = created.session_id();
  {
    DecodeStream stream(stub_.get());
    ASSERT_OK(stream.Attach(id));
    WireStepSource source(SmallShape(ElementType::kF32), 5, id, 10);
    for (int t = 0; t < 60; ++t) ASSERT_OK(stream.Step(source.Next()).status());
    // The half-close detaches the session after its shadows' work has run.
    ASSERT_OK(stream.Close());
  }
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  ASSERT_TRUE(info.has_shadows());
  EXPECT_EQ(info.shadows().steps_observed(), 60);
  EXPECT_GT(info.stats().tier_held(), 0);  // Else the check says little.
  EXPECT_GT(info.stats().promoted(), 0);
  EXPECT_EQ(info.shadows().primary().live(), info.stats().live());
}

// A step of a tier session that the server rejects carries no moves.
TEST_F(TierWireTest, RejectedStepCarriesNoMoves) {
  StartServer();
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created,
                       CreateSession(stub_.get(), Wire(TovaConfig(6))));
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(created.session_id()));
  WireStepSource source(SmallShape(ElementType::kF32), 5, created.session_id(),
                        10);
  for (int t = 0; t < 30; ++t) ASSERT_OK(stream.Step(source.Next()).status());
  v1::SessionStep bad = source.Next();
  bad.set_queries("xyz");  // Not a whole number of elements.
  v1::DecodeRequest request;
  *request.add_steps() = bad;
  ASSERT_OK_AND_ASSIGN(v1::DecodeResponse response, stream.RoundTrip(request));
  ASSERT_EQ(response.results_size(), 1);
  EXPECT_NE(response.results(0).status().code(), 0);
  EXPECT_THAT(response.results(0).demoted(), IsEmpty());
  EXPECT_THAT(response.results(0).promoted(), IsEmpty());
}

// On a server with a CUDA device: auto places a tier session on the CPU,
// gpu is refused UNIMPLEMENTED naming config.tier.capacity, and gpu with the
// fallback goes to the CPU. Skipped where there is no device
// (session_registry_test.cc checks the same routing with a stand-in).
TEST_F(TierWireTest, OnADeviceATierSessionGoesToTheCpu) {
  ServerOptions options = TestServerOptions();
  options.use_gpu = true;
  StartServer(options);
  ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse list,
                       ListSessions(stub_.get()));
  if (!list.server().gpu_available()) {
    GTEST_SKIP() << "no CUDA device on this machine";
  }
  SessionConfig config = TovaConfig(6);
  config.placement = Placement::kAuto;
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse automatic,
                       CreateSession(stub_.get(), Wire(config)));
  EXPECT_EQ(automatic.session().stats().placement(), v1::PLACEMENT_CPU);
  EXPECT_EQ(automatic.session().config().placement(), v1::PLACEMENT_CPU);

  config.placement = Placement::kGpu;
  const absl::StatusOr<v1::CreateSessionResponse> refused =
      CreateSession(stub_.get(), Wire(config));
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("config.tier.capacity: "));

  v1::SessionConfig fallback = Wire(config);
  fallback.set_placement_fallback(true);
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse moved,
                       CreateSession(stub_.get(), fallback));
  EXPECT_EQ(moved.session().stats().placement(), v1::PLACEMENT_CPU);

  // Without a tier, auto still takes the device.
  v1::SessionConfig plain_config = Wire(TovaConfig(0));
  plain_config.set_placement(v1::PLACEMENT_AUTO);
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse plain,
                       CreateSession(stub_.get(), plain_config));
  EXPECT_EQ(plain.session().stats().placement(), v1::PLACEMENT_GPU);
}

}  // namespace
}  // namespace entrokv::server::testing
