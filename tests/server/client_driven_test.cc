// The service driven through the real client library (entrokv::Client /
// Session), as an engine drives it: the evictions equal core's in-process
// decisions on the same inputs, and nothing falls back to the local policy.

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/client/vectors.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "testing/status_matchers.h"

namespace entrokv::server::testing {
namespace {

using ::testing::ElementsAreArray;

class ClientDrivenTest : public ServerTest {};

TEST_F(ClientDrivenTest, SessionThroughClientLibraryMatchesCore) {
  StartServer();
  ClientOptions client_options;
  client_options.target = server_->targets()[0];
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Client> client,
                       Client::Connect(client_options));

  SessionConfig config;
  config.shape = SmallShape(ElementType::kF16);
  config.budget = 20;
  config.protection.sinks = 1;
  config.placement = Placement::kCpu;  // affinity + entropy.
  SessionOptions session_options;
  session_options.step_deadline = absl::InfiniteDuration();
  session_options.first_step = 1;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Session> session,
                       client->CreateSession(config, session_options));

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Backend> backend,
                       CreateBackend(BackendKind::kCpu));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<SessionState> reference,
                       backend->CreateSession(config, SessionLimits{}));

  SyntheticParams params;
  params.shape = config.shape;
  params.seed = 31;
  SyntheticStream stream(params);
  SyntheticStep synthetic;
  int64_t evicted = 0;
  for (uint64_t t = 1; t <= 80; ++t) {
    SCOPED_TRACE(absl::StrCat("step ", t));
    stream.Next(&synthetic);
    const uint64_t slot = 700 + t;
    // The client converts f32 to the session's f16; the reference is fed the
    // same conversion from core.
    const std::string keys = Encode(config.shape.element_type, synthetic.key);
    const std::string queries =
        Encode(config.shape.element_type, synthetic.query);
    StepInput input;
    input.step = t;
    input.append.slot_ids = absl::MakeConstSpan(&slot, 1);
    input.append.keys = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(keys.data()), keys.size());
    input.queries = absl::MakeConstSpan(
        reinterpret_cast<const std::byte*>(queries.data()), queries.size());
    input.entropy = synthetic.entropy;
    StepResult expected;
    ASSERT_OK(reference->Step(input, &expected));

    StepRequest request;
    request.slot_ids = absl::MakeConstSpan(&slot, 1);
    request.keys = VectorView::F32(synthetic.key);
    request.queries = VectorView::F32(synthetic.query);
    request.entropy = synthetic.entropy;
    ASSERT_OK_AND_ASSIGN(StepOutcome outcome, session->Step(request));
    EXPECT_FALSE(outcome.fallback);
    ASSERT_THAT(outcome.evicted, ElementsAreArray(expected.evicted));
    ASSERT_EQ(outcome.live, expected.live);
    ASSERT_EQ(outcome.budget, expected.budget);
    evicted += static_cast<int64_t>(outcome.evicted.size());
  }
  EXPECT_GT(evicted, 0);
  const std::string id = session->id();
  ASSERT_OK_AND_ASSIGN(SessionInfo info, client->GetSession(id));
  EXPECT_EQ(info.stats.steps, 80);
  EXPECT_EQ(info.stats.live, reference->Stats().live);
  EXPECT_OK(session->Close());
  EXPECT_STATUS_CODE(client->GetSession(id), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace entrokv::server::testing
