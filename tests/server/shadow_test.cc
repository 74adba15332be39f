// Shadow policies over the wire (proto's Shadowing and ShadowStats): a real
// server in process. The session's answers must not change with shadows;
// the recall the server reports is checked against core's ComputeQuality
// (checked against the simulator) on live sets this test derives itself
// from the policies' rules; refusals must name the field. The numpy check of
// the same measures is tests/python/test_shadows.py.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::HasSubstr;

// Recall is computed with core's f32 scoring kernel and vector exp (relative
// error < 2e-7, core/src/cpu_kernels.h), the references here in double.
constexpr double kRecallTolerance = 1e-6;

v1::SessionConfig Policy(const std::string& name, int64_t budget) {
  v1::SessionConfig c;
  c.set_policy(name);
  c.set_budget(budget);
  return c;
}

v1::CreateSessionRequest Request(const SessionConfig& primary,
                                 const std::vector<v1::SessionConfig>& shadows) {
  v1::CreateSessionRequest request;
  *request.mutable_config() = ToWireConfig(primary);
  for (const v1::SessionConfig& s : shadows) {
    *request.mutable_shadowing()->add_policies() = s;
  }
  return request;
}

class ShadowTest : public ServerTest {
 protected:
  void SetUp() override { StartServer(); }

  absl::StatusOr<v1::CreateSessionResponse> Create(
      const v1::CreateSessionRequest& request) {
    grpc::ClientContext context;
    v1::CreateSessionResponse response;
    const grpc::Status status =
        stub_->CreateSession(&context, request, &response);
    if (!status.ok()) return ToAbsl(status);
    return response;
  }

  // The RecallSummary of `values` (nearest-rank p10), as the proto defines it.
  static void ExpectSummary(const v1::RecallSummary& got,
                            std::vector<double> values) {
    ASSERT_EQ(got.steps(), static_cast<int64_t>(values.size()));
    double sum = 0;
    for (double v : values) sum += v;
    std::sort(values.begin(), values.end());
    EXPECT_NEAR(got.mean(), sum / values.size(), kRecallTolerance);
    EXPECT_NEAR(got.min(), values.front(), kRecallTolerance);
    EXPECT_NEAR(got.p10(),
                values[static_cast<size_t>(std::ceil(0.1 * values.size())) - 1],
                kRecallTolerance);
  }
};

TEST_F(ShadowTest, TheSessionsAnswersAreByteIdenticalWithAndWithoutShadows) {
  SessionConfig primary;  // affinity+entropy, the default policy.
  primary.shape = SmallShape(ElementType::kF16);
  primary.budget = 16;
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse plain,
                       Create(Request(primary, {})));
  ASSERT_OK_AND_ASSIGN(
      v1::CreateSessionResponse shadowed,
      Create(Request(primary, {Policy("h2o", 16), Policy("tova", 12),
                               Policy("window+entropy", 16),
                               Policy("keynorm", 20)})));
  EXPECT_FALSE(plain.session().has_shadows());
  ASSERT_TRUE(shadowed.session().has_shadows());
  EXPECT_EQ(shadowed.session().shadows().shadows_size(), 4);

  DecodeStream a(stub_.get()), b(stub_.get());
  ASSERT_OK(a.Attach(plain.session_id()));
  ASSERT_OK(b.Attach(shadowed.session_id()));
  WireStepSource sa(primary.shape, 5, plain.session_id(), 8, 1000, 0, 5);
  WireStepSource sb(primary.shape, 5, shadowed.session_id(), 8, 1000, 0, 5);
  for (int t = 0; t < 80; ++t) {
    ASSERT_OK_AND_ASSIGN(v1::SessionStepResult ra, a.Step(sa.Next()));
    ASSERT_OK_AND_ASSIGN(v1::SessionStepResult rb, b.Step(sb.Next()));
    ra.clear_session_id();
    rb.clear_session_id();
    ra.clear_compute_ns();
    rb.clear_compute_ns();
    ASSERT_EQ(ra.SerializeAsString(), rb.SerializeAsString()) << "step " << t;
  }
}

TEST_F(ShadowTest, RecallAndJaccardMatchAnIndependentComputation) {
  const SessionConfig primary = WindowConfig(12, ElementType::kF32);
  v1::CreateSessionRequest request =
      Request(primary, {Policy("streaming", 12)});
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created, Create(request));
  const std::string id = created.session_id();
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource source(primary.shape, 9, id, /*prefill=*/8);

  const Shape& shape = primary.shape;
  std::vector<float> keys;  // Every appended key, in append order.
  std::vector<double> want_primary, want_shadow;
  double jaccard_sum = 0;
  constexpr int kSteps = 40;
  for (int t = 0; t < kSteps; ++t) {
    const v1::SessionStep step = source.Next();
    ASSERT_OK(stream.Step(step).status());
    const std::string& bytes = step.append().keys();
    const float* k = reinterpret_cast<const float*>(bytes.data());
    keys.insert(keys.end(), k, k + bytes.size() / sizeof(float));
    const int n = static_cast<int>(keys.size() / shape.key_elements());
    std::vector<float> query(shape.query_elements());
    std::memcpy(query.data(), step.queries().data(),
                query.size() * sizeof(float));
    // window: the newest 12; streaming (4 sinks): the first 4 and the
    // newest 8.
    std::vector<uint8_t> window(n), streaming(n);
    int both = 0, either = 0;
    for (int i = 0; i < n; ++i) {
      window[i] = i >= n - 12;
      streaming[i] = n <= 12 || i < 4 || i >= n - 8;
      both += window[i] && streaming[i];
      either += window[i] || streaming[i];
    }
    want_primary.push_back(
        ComputeQuality(shape, keys, keys, query, window).attention_recall);
    want_shadow.push_back(
        ComputeQuality(shape, keys, keys, query, streaming).attention_recall);
    jaccard_sum += static_cast<double>(both) / either;
  }
  // A reply to a later message: the shadows have run every step before it.
  ASSERT_OK(stream.Attach(id));
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  const v1::ShadowStats& stats = info.shadows();
  EXPECT_EQ(stats.steps_observed(), kSteps);
  EXPECT_EQ(stats.primary().policy(), "window+fixed");
  ExpectSummary(stats.primary().recall(), want_primary);
  ASSERT_EQ(stats.shadows_size(), 1);
  EXPECT_EQ(stats.shadows(0).policy(), "streaming+fixed");
  EXPECT_EQ(stats.shadows(0).config().shape().head_dim(), shape.head_dim);
  ExpectSummary(stats.shadows(0).recall(), want_shadow);
  EXPECT_NEAR(stats.shadows(0).mean_jaccard(), jaccard_sum / kSteps, 1e-12);
  EXPECT_EQ(stats.shadows(0).live(), 12);
  EXPECT_EQ(stats.oracle().policy(), "oracle");
  EXPECT_GE(stats.oracle().recall().mean(),
            stats.primary().recall().mean() - 1e-12);
  EXPECT_EQ(stats.reference_entries(), 8 + kSteps - 1);
  EXPECT_EQ(stats.reference_bytes() % (shape.key_elements() * 4), 0);
  EXPECT_FALSE(stats.reference_full());
  EXPECT_GT(stats.bytes_held(), stats.reference_bytes() - 1);

  // Prometheus: one sample per scored step, under the policy's label.
  const std::string text = server_->MetricsText();
  EXPECT_THAT(text, HasSubstr(absl::StrCat(
                        "entrokv_attention_recall_count{role=\"shadow\","
                        "policy=\"streaming+fixed\"} ",
                        kSteps, "\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat(
                        "entrokv_attention_recall_count{role=\"session\","
                        "policy=\"window+fixed\"} ",
                        kSteps, "\n")));
  EXPECT_THAT(text, HasSubstr("entrokv_attention_recall_count{role=\"oracle\","
                              "policy=\"oracle\"} "));
}

TEST_F(ShadowTest, ABadShadowIsRefusedNamingTheField) {
  const SessionConfig primary = WindowConfig(12);
  struct Case {
    std::vector<v1::SessionConfig> shadows;
    absl::StatusCode code;
    std::string field;
  };
  v1::SessionConfig other_shape = Policy("h2o", 12);
  *other_shape.mutable_shape() = ToProtoShape(primary.shape);
  other_shape.mutable_shape()->set_head_dim(32);
  v1::SessionConfig same_shape = Policy("h2o", 12);
  *same_shape.mutable_shape() = ToProtoShape(primary.shape);
  v1::SessionConfig other_cadence = Policy("h2o", 12);
  other_cadence.set_decide_every(4);
  const std::vector<Case> cases = {
      {{Policy("h2o", 12), Policy("tova", 0)},
       absl::StatusCode::kInvalidArgument, "shadowing.policies[1].budget: "},
      {{Policy("nope", 12)}, absl::StatusCode::kInvalidArgument,
       "shadowing.policies[0].policy: "},
      {{other_shape}, absl::StatusCode::kInvalidArgument,
       "shadowing.policies[0].shape: "},
      {{other_cadence}, absl::StatusCode::kInvalidArgument,
       "shadowing.policies[0].decide_every: "},
      {{Policy("h2o", 12), Policy("h2o", 12), Policy("h2o", 12),
        Policy("h2o", 12), Policy("h2o", 12)},
       absl::StatusCode::kInvalidArgument, "shadowing.policies: 5 given"},
      {{Policy("h2o", int64_t{1} << 21)}, absl::StatusCode::kResourceExhausted,
       "shadowing.policies[0].budget: "},
  };
  for (const Case& c : cases) {
    const absl::Status status = Create(Request(primary, c.shadows)).status();
    EXPECT_EQ(status.code(), c.code) << c.field << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(c.field));
  }
  v1::CreateSessionRequest bad_cadence = Request(primary, {Policy("h2o", 12)});
  bad_cadence.mutable_shadowing()->set_score_every(0);
  const absl::Status status = Create(bad_cadence).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("shadowing.score_every: "));
  // The session's own shape, given explicitly, is accepted; none of the
  // refusals above left a session behind.
  EXPECT_OK(Create(Request(primary, {same_shape})).status());
  ASSERT_OK_AND_ASSIGN(v1::ListSessionsResponse list, ListSessions(stub_.get()));
  EXPECT_EQ(list.sessions_size(), 1);
  EXPECT_EQ(list.server().max_shadows(), 4);
}

TEST_F(ShadowTest, TheReferenceCapAndTheServersShadowBytesAreEnforced) {
  const SessionConfig primary = WindowConfig(6, ElementType::kF32);
  v1::CreateSessionRequest request = Request(primary, {Policy("h2o", 6)});
  request.mutable_shadowing()->set_max_reference_entries(10);
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse created, Create(request));
  EXPECT_EQ(created.session().shadows().reference_capacity(), 10);
  const std::string id = created.session_id();
  DecodeStream stream(stub_.get());
  ASSERT_OK(stream.Attach(id));
  WireStepSource source(primary.shape, 2, id, /*prefill=*/4);
  for (int t = 0; t < 12; ++t) ASSERT_OK(stream.Step(source.Next()).status());
  ASSERT_OK(stream.Attach(id));
  ASSERT_OK_AND_ASSIGN(v1::SessionInfo info, GetSession(stub_.get(), id));
  // 4 + 1 + 1 ... entries: the 7th step would take the reference to 11.
  EXPECT_EQ(info.shadows().reference_entries(), 10);
  EXPECT_EQ(info.shadows().reference_bytes(),
            10 * primary.shape.key_elements() * 4);
  EXPECT_TRUE(info.shadows().reference_full());
  EXPECT_EQ(info.shadows().primary().recall().steps(), 7);
  EXPECT_EQ(info.shadows().steps_observed(), 12);
  EXPECT_OK(CloseSession(stub_.get(), id).status());
}

TEST_F(ShadowTest, ShadowBytesPastTheServersLimitAreRefusedAndGivenBack) {
  ServerOptions options = TestServerOptions();
  options.max_shadow_reference_bytes = 1 << 20;
  options.max_shadow_bytes = 3 << 20;
  server_.reset();
  StartServer(options);
  const SessionConfig primary = WindowConfig(6, ElementType::kF32);
  // Each session's shadowing reserves a little over 1 MiB: two fit, the
  // third does not.
  const v1::CreateSessionRequest request =
      Request(primary, {Policy("h2o", 6)});
  ASSERT_OK_AND_ASSIGN(v1::CreateSessionResponse first, Create(request));
  ASSERT_OK(Create(request).status());
  absl::Status third = Create(request).status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.message(), HasSubstr("--max_shadow_bytes"));
  // Closing one gives its reservation back.
  ASSERT_OK(CloseSession(stub_.get(), first.session_id()).status());
  EXPECT_OK(Create(request).status());

  options.max_shadows = 0;
  server_.reset();
  StartServer(options);
  third = Create(request).status();
  EXPECT_EQ(third.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(third.message(), HasSubstr("--max_shadows"));
  EXPECT_OK(Create(Request(primary, {})).status());
}

}  // namespace
}  // namespace entrokv::server::testing
