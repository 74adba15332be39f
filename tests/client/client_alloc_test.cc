// The client library's heap allocations on the engine's thread, once a
// DecodeBatch is warm: its requests are built in the memory of the last
// one written, its answers parsed into the memory of an earlier answer, and
// a step's record is held inline. What is left is gRPC's own, per message.
// A binary of its own, because it replaces operator new.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "client_test_util.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "gtest/gtest.h"

// The replacements below pair operator new with free(), which GCC cannot
// tell from a mismatch at the sites it inlines.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace {

// Only the test's own thread counts: the server in process, and gRPC's
// threads, allocate on theirs.
thread_local bool t_counting = false;
std::atomic<int64_t> g_allocations{0};

}  // namespace

// Every form gRPC may call, so that what one form allocates another may
// free (a sanitizer build checks that they match).
void* operator new(std::size_t size) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void* operator new(std::size_t size, std::align_val_t align) {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  const std::size_t a = static_cast<std::size_t>(align);
  if (void* p = std::aligned_alloc(a, (size + a - 1) / a * a)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size, std::align_val_t align) {
  return operator new(size, align);
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  if (t_counting) g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void* operator new[](std::size_t size, const std::nothrow_t& n) noexcept {
  return operator new(size, n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}

namespace entrokv::testing {
namespace {

// Calls of operator new on this thread while `run` runs.
template <typename Run>
int64_t AllocationsIn(Run run) {
  const int64_t before = g_allocations.load();
  t_counting = true;
  run();
  t_counting = false;
  return g_allocations.load() - before;
}

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

TEST_F(ClientAllocTest, AWarmBatchOfPerSessionCallsAllocatesLikeOneStepCall) {
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
