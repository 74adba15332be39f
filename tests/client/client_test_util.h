// Helpers for the client tests: an in-process entrokv server, and a synthetic
// story (core's SyntheticStream) as owned step data that can be fed both to
// an entrokv::Session and to a core SessionState run in process as the
// reference.
//
// Not thread-safe.

#ifndef ENTROKV_TESTS_CLIENT_CLIENT_TEST_UTIL_H_
#define ENTROKV_TESTS_CLIENT_CLIENT_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"
#include "entrokv/core/synthetic.h"
#include "gtest/gtest.h"
#include "server/server.h"

namespace entrokv::testing {

// One step of a story: the entries it appends and its query and entropy.
struct StoryStep {
  std::vector<uint64_t> slots;
  std::vector<float> keys;  // slots.size() entries.
  std::vector<float> query;
  double entropy = 0.0;

  StepRequest Request() const {
    StepRequest request;
    request.slot_ids = slots;
    request.keys = VectorView::F32(keys);
    request.queries = VectorView::F32(query);
    request.entropy = entropy;
    return request;
  }
};

// A prefill of `prefill` entries in one step, then `decode` steps of one
// entry each; slot ids 1000, 1001, ... in append order.
inline std::vector<StoryStep> MakeStory(const Shape& shape, int prefill,
                                        int decode, uint64_t seed = 7) {
  SyntheticParams params;
  params.shape = shape;
  params.seed = seed;
  SyntheticStream stream(params);
  SyntheticStep next;
  std::vector<StoryStep> story;
  uint64_t slot = 1000;
  auto add_entry = [&](StoryStep* step) {
    stream.Next(&next);
    step->slots.push_back(slot++);
    step->keys.insert(step->keys.end(), next.key.begin(), next.key.end());
    step->query = next.query;
    step->entropy = next.entropy;
  };
  if (prefill > 0) {
    story.emplace_back();
    for (int i = 0; i < prefill; ++i) add_entry(&story.back());
  }
  for (int i = 0; i < decode; ++i) {
    story.emplace_back();
    add_entry(&story.back());
  }
  return story;
}

// Runs `story` through core in process (the CPU backend), step numbers from
// 0; the evicted slots of each step.
inline std::vector<std::vector<uint64_t>> CoreEvictions(
    const SessionConfig& config, const std::vector<StoryStep>& story) {
  std::vector<std::vector<uint64_t>> evictions;
  auto backend = CreateBackend(BackendKind::kCpu);
  EXPECT_TRUE(backend.ok());
  auto session = (*backend)->CreateSession(config, SessionLimits{});
  EXPECT_TRUE(session.ok()) << session.status();
  const ElementType type = config.shape.element_type;
  for (size_t t = 0; t < story.size(); ++t) {
    const StoryStep& s = story[t];
    std::vector<std::byte> keys(s.keys.size() * ElementSize(type));
    EncodeElements(type, s.keys.data(), s.keys.size(), keys.data());
    std::vector<std::byte> query(s.query.size() * ElementSize(type));
    EncodeElements(type, s.query.data(), s.query.size(), query.data());
    StepInput input;
    input.step = t;
    input.append.slot_ids = s.slots;
    input.append.keys = keys;
    input.queries = query;
    input.entropy = s.entropy;
    StepResult result;
    absl::Status status = (*session)->Step(input, &result);
    EXPECT_TRUE(status.ok()) << status;
    evictions.push_back(result.evicted);
  }
  return evictions;
}

// A small session shape: 2 layers, 2 kv heads, 4 q heads, head_dim 8.
inline SessionConfig SmallConfig(const char* policy, int64_t budget,
                                 ElementType type = ElementType::kF16) {
  SessionConfig config;
  config.shape.layers = 2;
  config.shape.kv_heads = 2;
  config.shape.q_heads = 4;
  config.shape.head_dim = 8;
  config.shape.element_type = type;
  config.budget = budget;
  config.placement = Placement::kCpu;
  EXPECT_TRUE(ApplyPolicyName(policy, &config).ok()) << policy;
  return config;
}

// The options of the test servers: CPU only, on `address`.
inline server::ServerOptions TestServerOptions(
    const std::string& address = "127.0.0.1:0") {
  server::ServerOptions options;
  options.listen = {address};
  options.use_gpu = false;
  options.max_bytes = int64_t{1} << 30;
  options.idle_timeout = absl::Seconds(30);
  return options;
}

// An entrokv server in process with `options`; null (and a test failure)
// when it cannot start.
inline std::unique_ptr<server::Server> StartTestServer(
    const server::ServerOptions& options) {
  auto started = server::Server::Start(options);
  EXPECT_TRUE(started.ok()) << started.status();
  return started.ok() ? *std::move(started) : nullptr;
}

// An entrokv server in process on a free loopback port, CPU only.
inline std::unique_ptr<server::Server> StartTestServer() {
  return StartTestServer(TestServerOptions());
}

// A client of `server` (its first target) with default options; null, after
// a failed expectation, when it cannot connect.
inline std::unique_ptr<Client> ConnectTo(const server::Server& server) {
  ClientOptions options;
  options.target = server.targets()[0];
  auto client = Client::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

// Both stream APIs, as the values of a parameterized suite, and their
// names ("Sync", "Callback") for the test names.
inline auto BothStreamApis() {
  return ::testing::Values(StreamApi::kSync, StreamApi::kCallback);
}
inline std::string StreamApiName(
    const ::testing::TestParamInfo<StreamApi>& info) {
  return info.param == StreamApi::kSync ? "Sync" : "Callback";
}

}  // namespace entrokv::testing

#endif  // ENTROKV_TESTS_CLIENT_CLIENT_TEST_UTIL_H_
