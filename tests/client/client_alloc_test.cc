// The client library's heap allocations on the engine's thread, once a
// DecodeBatch is warm: its requests are built in the memory of the last
// one written, its answers parsed into the memory of an earlier answer, and
// a step's record is held inline. What is left is gRPC's own, per message.
// A binary of its own, because it replaces operator new
// (testing/count_allocations.h).

#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "client_test_util.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "gtest/gtest.h"
#include "testing/count_allocations.h"

namespace entrokv::testing {
namespace {

class ClientAllocTest : public ::testing::Test {
 protected:
  static constexpr int kSessions = 64;
  static constexpr int kWarm = 4;
  static constexpr int kCounted = 8;

  void SetUp() override {
    server_ = StartTestServer();
    ASSERT_NE(server_, nullptr);
    client_ = ConnectTo(*server_);
    ASSERT_NE(client_, nullptr);
    batch_ = client_->CreateBatch(StreamApi::kSync);
    for (int i = 0; i < kSessions; ++i) {
      // A budget no story reaches: no step evicts, so no outcome carries
      // a vector of its own.
      auto session = batch_->CreateSession(SmallConfig("entropy", 4096));
      ASSERT_TRUE(session.ok()) << session.status();
      sessions_.push_back(*std::move(session));
      stories_.push_back(MakeStory(sessions_.back()->config().shape,
                                   /*prefill=*/8, kWarm + kCounted,
                                   /*seed=*/40 + i));
      requests_.emplace_back();
      for (const StoryStep& step : stories_.back()) {
        requests_.back().push_back(step.Request());
      }
    }
  }

  // Steps every session through its story's step `t` in one Step() call;
  // its outcomes must all come from the server.
  void StepAll(size_t t) {
    steps_.clear();
    for (int i = 0; i < kSessions; ++i) {
      steps_.push_back({sessions_[i].get(), requests_[i][t]});
    }
    std::vector<absl::StatusOr<StepOutcome>> outcomes = batch_->Step(steps_);
    for (const absl::StatusOr<StepOutcome>& outcome : outcomes) {
      ASSERT_TRUE(outcome.ok()) << outcome.status();
      ASSERT_FALSE(outcome->fallback);
      ASSERT_TRUE(outcome->evicted.empty());
    }
  }

  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<DecodeBatch> batch_;
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<std::vector<StoryStep>> stories_;
  std::vector<std::vector<StepRequest>> requests_;
  std::vector<BatchStep> steps_;
};

TEST_F(ClientAllocTest, AWarmBatchAllocatesLessThanOncePerSessionStep) {
  size_t t = 0;
  for (; t < 1 + kWarm; ++t) StepAll(t);  // The prefill, then warm steps.
  const int64_t allocations = AllocationsIn([&] {
    for (int n = 0; n < kCounted; ++n) StepAll(t++);
  });
  const double per_message = static_cast<double>(allocations) / kCounted;
  std::printf("%.1f allocations per message of %d steps\n", per_message,
              kSessions);
  // Parsing each answer into a new message alone would cost two per step
  // (the step's result and its session id); a step's record in a deque,
  // one every other step.
  EXPECT_LT(per_message, kSessions);
}

TEST_F(ClientAllocTest,
       AWarmBatchOfGatheredCallsAllocatesLessThanOncePerSessionStep) {
  size_t t = 0;
  for (; t < 1 + kWarm; ++t) StepAll(t);
  const int64_t allocations = AllocationsIn([&] {
    for (int n = 0; n < kCounted; ++n, ++t) {
      for (int i = 0; i < kSessions; ++i) {
        ASSERT_TRUE(sessions_[i]->StepAsync(requests_[i][t]).ok());
      }
      for (int i = 0; i < kSessions; ++i) {
        absl::StatusOr<StepOutcome> outcome = sessions_[i]->Collect();
        ASSERT_TRUE(outcome.ok()) << outcome.status();
        ASSERT_FALSE(outcome->fallback);
      }
    }
  });
  const double per_message = static_cast<double>(allocations) / kCounted;
  std::printf("%.1f allocations per message of %d steps\n", per_message,
              kSessions);
  EXPECT_LT(per_message, kSessions);
}

}  // namespace
}  // namespace entrokv::testing
