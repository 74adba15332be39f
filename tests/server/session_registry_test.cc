// SessionRegistry on its own: it never writes a log line while holding its
// lock (a slow sink would otherwise stall every create, attach and detach of
// the server).

#include "server/session_registry.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "entrokv/core/backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"
#include "testing/status_matchers.h"

namespace entrokv::server {
namespace {

// For every line logged, asks another thread to take the registry's lock
// (SessionRegistry::size()) and waits for it: when the lock is held by the
// thread that logs, the probe cannot finish before the line is written, and
// the line is recorded as logged under the lock.
class LockProbeSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit LockProbeSink(SessionRegistry* registry) : registry_(registry) {}

  std::vector<std::string> lines() {
    absl::MutexLock lock(&mu_);
    return lines_;
  }
  std::vector<std::string> under_lock() {
    absl::MutexLock lock(&mu_);
    return under_lock_;
  }
  // Waits for every probe thread to end.
  void Drain() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &probes_running_));
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const std::string line(msg.payload.data(), msg.payload.size());
    auto done = std::make_shared<absl::Notification>();
    {
      absl::MutexLock lock(&mu_);
      ++probes_running_;
      lines_.push_back(line);
    }
    std::thread([this, done] {
      registry_->size();
      done->Notify();
      absl::MutexLock lock(&mu_);
      --probes_running_;
    }).detach();
    if (!done->WaitForNotificationWithTimeout(absl::Milliseconds(500))) {
      absl::MutexLock lock(&mu_);
      under_lock_.push_back(line);
    }
  }
  void flush_() override {}

 private:
  SessionRegistry* const registry_;
  absl::Mutex mu_;
  int probes_running_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> under_lock_ ABSL_GUARDED_BY(mu_);
};

class SessionRegistryLoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(cpu_, CreateBackend(BackendKind::kCpu));
    RegistryOptions options;
    options.idle_timeout = absl::Seconds(1);
    registry_ = std::make_unique<SessionRegistry>(options, cpu_.get(), nullptr);
    sink_ = std::make_shared<LockProbeSink>(registry_.get());
    previous_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::info);
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  void TearDown() override {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    spdlog::set_level(previous_level_);
    sink_->Drain();
    registry_.reset();
  }

  static SessionConfig Config() {
    SessionConfig config;
    config.shape.layers = 1;
    config.shape.kv_heads = 1;
    config.shape.q_heads = 1;
    config.shape.head_dim = 8;
    config.budget = 4;
    config.placement = Placement::kCpu;
    return config;
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<SessionRegistry> registry_;
  std::shared_ptr<LockProbeSink> sink_;
  spdlog::level::level_enum previous_level_ = spdlog::level::info;
};

TEST_F(SessionRegistryLoggingTest, NeverLogsWhileHoldingItsLock) {
  int owner = 0;
  ASSERT_OK_AND_ASSIGN(SessionSnapshot a,
                       registry_->Create(Config(), "a", false));
  ASSERT_OK_AND_ASSIGN(SessionSnapshot b,
                       registry_->Create(Config(), "", false));
  ASSERT_OK_AND_ASSIGN(std::shared_ptr<SessionEntry> entry,
                       registry_->Attach(a.id, &owner));
  registry_->Detach(*entry, &owner);
  entry.reset();
  ASSERT_OK(registry_->Close(a.id));
  EXPECT_EQ(registry_->Reap(absl::Now() + absl::Hours(1)), 1);  // b.

  const std::vector<std::string> lines = sink_->lines();
  EXPECT_GE(lines.size(), 4u);  // Two opened, one closed, one reclaimed.
  EXPECT_THAT(sink_->under_lock(), ::testing::IsEmpty());
}

// Stands in for the CUDA backend where there is no device: kind kCuda,
// refusing a demote tier as the CUDA backend does (UNIMPLEMENTED naming
// tier.capacity, core/cuda/cuda_backend.cc), running everything else on a
// CPU backend (so its sessions' stats say CPU, and the tests read the
// registry's effective config.placement, which names the device). It counts the sessions it
// created.
class TierlessGpuBackend final : public Backend {
 public:
  explicit TierlessGpuBackend(Backend* cpu) : cpu_(cpu) {}
  BackendKind kind() const override { return BackendKind::kCuda; }
  std::string Describe() const override { return "fake gpu"; }
  int64_t bytes_held() const override { return 0; }
  absl::StatusOr<std::unique_ptr<SessionState>> CreateSession(
      const SessionConfig& config, const SessionLimits& limits) override {
    if (config.tier.capacity > 0) {
      return absl::UnimplementedError("tier.capacity: no demote tier here");
    }
    ++created_;
    return cpu_->CreateSession(config, limits);
  }
  int created() const { return created_; }

 private:
  Backend* const cpu_;
  int created_ = 0;
};

// Where a session with a demote tier goes (the proto's Placement comments):
// auto takes the CPU when the device refuses the tier; gpu returns the
// device's refusal, or with placement_fallback takes the CPU; without a
// device, gpu is FAILED_PRECONDITION unless the fallback is set.
class SessionRegistryTierPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(cpu_, CreateBackend(BackendKind::kCpu));
    gpu_ = std::make_unique<TierlessGpuBackend>(cpu_.get());
  }

  std::unique_ptr<SessionRegistry> Registry(bool with_gpu) {
    return std::make_unique<SessionRegistry>(RegistryOptions{}, cpu_.get(),
                                             with_gpu ? gpu_.get() : nullptr);
  }

  static SessionConfig Config(Placement placement, int64_t tier) {
    SessionConfig config;
    config.shape.layers = 1;
    config.shape.kv_heads = 1;
    config.shape.q_heads = 1;
    config.shape.head_dim = 8;
    config.budget = 4;
    config.ranking = Ranking::kTova;
    config.budget_control = BudgetControl::kFixed;
    config.tier.capacity = tier;
    config.placement = placement;
    return config;
  }

  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<TierlessGpuBackend> gpu_;
};

TEST_F(SessionRegistryTierPlacementTest, AutoPutsATierSessionOnTheCpu) {
  auto registry = Registry(/*with_gpu=*/true);
  ASSERT_OK_AND_ASSIGN(
      SessionSnapshot tier,
      registry->Create(Config(Placement::kAuto, 6), "", false));
  EXPECT_EQ(tier.config.placement, Placement::kCpu);
  EXPECT_EQ(tier.config.tier.capacity, 6);
  EXPECT_EQ(gpu_->created(), 0);
  // Without a tier auto still prefers the device.
  ASSERT_OK_AND_ASSIGN(
      SessionSnapshot plain,
      registry->Create(Config(Placement::kAuto, 0), "", false));
  EXPECT_EQ(plain.config.placement, Placement::kGpu);
  EXPECT_EQ(gpu_->created(), 1);
}

TEST_F(SessionRegistryTierPlacementTest, GpuReturnsTheDevicesRefusal) {
  auto registry = Registry(/*with_gpu=*/true);
  const absl::StatusOr<SessionSnapshot> refused =
      registry->Create(Config(Placement::kGpu, 6), "", false);
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::StartsWith("config.tier.capacity: "));
  EXPECT_EQ(registry->size(), 0);
}

TEST_F(SessionRegistryTierPlacementTest, GpuWithFallbackTakesTheCpu) {
  auto registry = Registry(/*with_gpu=*/true);
  ASSERT_OK_AND_ASSIGN(SessionSnapshot s,
                       registry->Create(Config(Placement::kGpu, 6), "", true));
  EXPECT_EQ(s.config.placement, Placement::kCpu);
  EXPECT_EQ(gpu_->created(), 0);
  // The fallback does not move a session the device can run.
  ASSERT_OK_AND_ASSIGN(SessionSnapshot plain,
                       registry->Create(Config(Placement::kGpu, 0), "", true));
  EXPECT_EQ(plain.config.placement, Placement::kGpu);
  EXPECT_EQ(gpu_->created(), 1);
}

TEST_F(SessionRegistryTierPlacementTest, GpuWithoutADeviceAsBefore) {
  auto registry = Registry(/*with_gpu=*/false);
  EXPECT_STATUS_CODE(registry->Create(Config(Placement::kGpu, 6), "", false),
                     absl::StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(SessionSnapshot s,
                       registry->Create(Config(Placement::kGpu, 6), "", true));
  EXPECT_EQ(s.config.placement, Placement::kCpu);
  ASSERT_OK_AND_ASSIGN(
      SessionSnapshot a,
      registry->Create(Config(Placement::kAuto, 6), "", false));
  EXPECT_EQ(a.config.placement, Placement::kCpu);
}

}  // namespace
}  // namespace entrokv::server
