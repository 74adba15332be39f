// Sketched keys, group-sum queries and the decision cadence end to end:
// client library (which projects and drops what a step does not need) ->
// wire -> server -> CPU backend, against core run in process on vectors
// projected by a naive reference in this file.

#include <cstdint>
#include <vector>

#include "client_test_util.h"
#include "entrokv/client/client.h"
#include "entrokv/core/sketch.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace entrokv::testing {
namespace {

// Naive P^T v for every (layer, kv head) plane, with P from
// DefaultProjection; queries summed over each GQA group first.
std::vector<float> NaiveProject(const SessionConfig& config,
                                const std::vector<float>& v, bool query) {
  const Shape& s = config.shape;
  const int d = s.head_dim, r = s.sketch_dim;
  const int group = s.group_size();
  const int per_plane = query ? group : 1;
  const int64_t n = static_cast<int64_t>(v.size()) /
                    (int64_t{s.layers} * s.kv_heads * per_plane * d);
  std::vector<float> out;
  for (int64_t e = 0; e < n; ++e) {
    for (int l = 0; l < s.layers; ++l) {
      for (int g = 0; g < s.kv_heads; ++g) {
        const std::vector<double> p =
            DefaultProjection(config.projection_seed, l, g, d, r);
        std::vector<double> x(d, 0.0);
        for (int h = 0; h < per_plane; ++h) {
          for (int j = 0; j < d; ++j) {
            x[j] +=
                v[(((e * s.layers + l) * s.kv_heads + g) * per_plane + h) * d +
                  j];
          }
        }
        for (int c = 0; c < r; ++c) {
          double acc = 0.0;
          for (int j = 0; j < d; ++j) acc += p[j * r + c] * x[j];
          out.push_back(static_cast<float>(acc));
        }
      }
    }
  }
  return out;
}

TEST(SketchCadenceClientTest, EvictsAsCoreOnNaivelyProjectedVectors) {
  auto server = StartTestServer();
  ASSERT_NE(server, nullptr);
  ClientOptions options;
  options.target = server->targets()[0];
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  for (const char* policy : {"entropy", "affinity", "keynorm", "window"}) {
    SCOPED_TRACE(policy);
    SessionConfig config = SmallConfig(policy, 24, ElementType::kF32);
    config.shape.sketch_dim = 3;
    config.shape.query_form = QueryForm::kGroupSum;
    config.decide_every = 4;
    config.hard_ceiling = 40;
    config.projection_seed = 11;
    const std::vector<StoryStep> story = MakeStory(config.shape, 20, 60);

    auto session = (*client)->CreateSession(config);
    ASSERT_TRUE(session.ok()) << session.status();
    auto backend = std::move(CreateBackend(BackendKind::kCpu)).value();
    auto reference = std::move(backend->CreateSession(config, {})).value();
    int deferred = 0;
    for (size_t t = 0; t < story.size(); ++t) {
      const StoryStep& s = story[t];
      const bool decides = (*session)->NextStepDecides(s.slots.size());
      StepRequest request = s.Request();
      if (!decides) {
        request.queries = {};
        request.entropy.reset();
      }
      auto got = (*session)->Step(request);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_FALSE(got->fallback);
      EXPECT_EQ(got->deferred, !decides) << "step " << t;
      deferred += got->deferred ? 1 : 0;

      const std::vector<float> keys = NaiveProject(config, s.keys, false);
      const std::vector<float> query = NaiveProject(config, s.query, true);
      StepInput input;
      input.step = t;
      input.append.slot_ids = s.slots;
      input.append.keys = absl::MakeSpan(
          reinterpret_cast<const std::byte*>(keys.data()), keys.size() * 4);
      if (decides) {
        input.queries = absl::MakeSpan(
            reinterpret_cast<const std::byte*>(query.data()), query.size() * 4);
        input.entropy = s.entropy;
      }
      StepResult want;
      ASSERT_TRUE(reference->Step(input, &want).ok());
      EXPECT_EQ(got->evicted, want.evicted) << "step " << t;
      EXPECT_EQ(got->live, want.live);
    }
    EXPECT_GT(deferred, 30);
    EXPECT_TRUE((*session)->Close().ok());
  }
}

TEST(SketchCadenceClientTest, SketchedSessionsSendFewerBytes) {
  auto server = StartTestServer();
  ASSERT_NE(server, nullptr);
  ClientOptions options;
  options.target = server->targets()[0];
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  SessionConfig exact = SmallConfig("affinity", 24, ElementType::kF16);
  SessionConfig cheap = exact;
  cheap.shape.sketch_dim = 2;
  cheap.shape.query_form = QueryForm::kGroupSum;
  cheap.decide_every = 8;
  const std::vector<StoryStep> story = MakeStory(exact.shape, 0, 64);
  int64_t bytes[2] = {0, 0};
  int i = 0;
  for (const SessionConfig& config : {exact, cheap}) {
    auto session = (*client)->CreateSession(config);
    ASSERT_TRUE(session.ok()) << session.status();
    for (const StoryStep& s : story) {
      ASSERT_TRUE((*session)->Step(s.Request()).ok());
    }
    bytes[i++] = (*session)->counters().bytes_sent;
  }
  // Keys 2 x 2 x 2 of 8 elements; queries (2 x 2 x 2 of 8 per head) go on
  // one step in 8 only: far less than a third of the exact bytes.
  EXPECT_LT(bytes[1] * 3, bytes[0]) << bytes[0] << " vs " << bytes[1];
}

TEST(SketchCadenceClientTest, BadProjectionFailsBeforeAnyCall) {
  ClientOptions client_options;
  client_options.target = "127.0.0.1:1";
  auto client = Client::Connect(client_options);
  ASSERT_TRUE(client.ok());
  SessionConfig config = SmallConfig("affinity", 24);
  config.shape.sketch_dim = 2;
  SessionOptions options;
  options.projection = {1.0f, 2.0f};
  auto session = (*client)->CreateSession(config, options);
  EXPECT_EQ(session.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(session.status().message()),
              ::testing::HasSubstr("projection"));
}

}  // namespace
}  // namespace entrokv::testing
