// What the recovery tests share (recovery_test.cc, recovery_policy_test.cc):
// a scripted server that records what it receives, the engine's side that
// owns the keys of its live entries, and the fixture that connects a Client
// to the server on each stream API.

#ifndef ENTROKV_TESTS_CLIENT_RECOVERY_TEST_UTIL_H_
#define ENTROKV_TESTS_CLIENT_RECOVERY_TEST_UTIL_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client_test_util.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "fake_servers.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/engine_cache.h"
#include "testing/status_matchers.h"

namespace entrokv::recovery_testing {

using ::entrokv::testing::StoryStep;

// A step as the scripted server received it.
struct ReceivedStep {
  std::string session_id;
  uint64_t step = 0;
  std::vector<uint64_t> slot_ids;
  std::vector<bool> pinned;
  std::string keys;
};

// Names its sessions s1, s2, ...; answers attach; records steps, and answers
// them with no eviction unless `swallow_steps`; records
// CloseSession; with `hang_create`, never answers CreateSession.
class ScriptedService final : public v1::EntroKv::Service {
 public:
  std::atomic<bool> swallow_steps{false};
  std::atomic<bool> hang_create{false};
  // Answers each message with steps this late (after recording them).
  std::atomic<int> answer_delay_ms{0};

  grpc::Status CreateSession(grpc::ServerContext* context,
                             const v1::CreateSessionRequest*,
                             v1::CreateSessionResponse* response) override {
    ++creates_;
    if (hang_create) {
      while (!context->IsCancelled()) absl::SleepFor(absl::Milliseconds(2));
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    response->set_session_id(absl::StrCat("s", creates_.load()));
    return grpc::Status::OK;
  }

  grpc::Status CloseSession(grpc::ServerContext*,
                            const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse*) override {
    absl::MutexLock lock(&mu_);
    closed_.push_back(request->session_id());
    return grpc::Status::OK;
  }

  grpc::Status Decode(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream)
      override {
    v1::DecodeRequest request;
    std::map<std::string, int64_t> live;
    while (stream->Read(&request)) {
      v1::DecodeResponse response;
      for (const std::string& id : request.attach()) {
        response.add_attach_results()->set_session_id(id);
      }
      const bool swallow = request.steps_size() > 0 && swallow_steps;
      for (const v1::SessionStep& step : request.steps()) {
        ReceivedStep received{
            step.session_id(),
            step.step(),
            {step.append().slot_ids().begin(), step.append().slot_ids().end()},
            {step.append().pinned().begin(), step.append().pinned().end()},
            step.append().keys()};
        if (swallow) {
          absl::MutexLock lock(&mu_);
          swallowed_.push_back(std::move(received));
          continue;
        }
        live[step.session_id()] += step.append().slot_ids_size();
        v1::SessionStepResult* result = response.add_results();
        result->set_session_id(step.session_id());
        result->set_step(step.step());
        result->set_live(live[step.session_id()]);
        result->set_budget(100);
        absl::MutexLock lock(&mu_);
        steps_.push_back(std::move(received));
      }
      if (!swallow && request.steps_size() > 0 && answer_delay_ms > 0) {
        absl::SleepFor(absl::Milliseconds(answer_delay_ms.load()));
      }
      if (!swallow) stream->Write(response);
    }
    return grpc::Status::OK;
  }

  int creates() const { return creates_; }
  // The steps answered, and those swallowed.
  std::vector<ReceivedStep> steps() {
    absl::MutexLock lock(&mu_);
    return steps_;
  }
  std::vector<ReceivedStep> swallowed() {
    absl::MutexLock lock(&mu_);
    return swallowed_;
  }
  // Waits up to 2 s for CloseSession(`id`).
  bool WaitClosed(const std::string& id) {
    for (int i = 0; i < 200; ++i) {
      {
        absl::MutexLock lock(&mu_);
        for (const std::string& closed : closed_) {
          if (closed == id) return true;
        }
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

 private:
  std::atomic<int> creates_{0};
  absl::Mutex mu_;
  std::vector<ReceivedStep> steps_ ABSL_GUARDED_BY(mu_);
  std::vector<ReceivedStep> swallowed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> closed_ ABSL_GUARDED_BY(mu_);
};

// The engine's side: it owns the keys of its live entries.
class Engine {
 public:
  explicit Engine(const std::vector<StoryStep>& story) : story_(story) {}

  // The request of story step `t`; remembers its keys as live.
  StepRequest Request(size_t t, absl::Span<const uint8_t> pinned = {}) {
    const StoryStep& step = story_[t];
    const size_t per_entry = step.keys.size() / step.slots.size();
    for (size_t i = 0; i < step.slots.size(); ++i) {
      keys_[step.slots[i]].assign(step.keys.begin() + i * per_entry,
                                  step.keys.begin() + (i + 1) * per_entry);
    }
    StepRequest request = step.Request();
    request.pinned = pinned;
    return request;
  }
  void Free(const StepOutcome& outcome) {
    for (uint64_t slot : outcome.evicted) keys_.erase(slot);
  }
  SessionOptions::LiveKeysCallback Callback() {
    return [this](absl::Span<const uint64_t> slots, std::vector<float>* keys) {
      ++calls_;
      return testing::GatherKeys(keys_, slots, keys);
    };
  }
  const std::vector<float>& KeyOf(uint64_t slot) { return keys_[slot]; }
  int calls() const { return calls_; }

 private:
  const std::vector<StoryStep>& story_;
  testing::EngineCache keys_;
  int calls_ = 0;
};

class RecoveryTest : public ::testing::TestWithParam<StreamApi> {
 protected:
  void SetUp() override {
    ClientOptions options;
    server_ = testing::Serve(&service_, &options.target);
    ASSERT_NE(server_, nullptr);
    options.log = [this](std::string_view line) {
      absl::MutexLock lock(&log_mu_);
      log_.emplace_back(line);
    };
    ASSERT_OK_AND_ASSIGN(client_, Client::Connect(options));
  }
  void TearDown() override {
    client_.reset();
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  SessionOptions Options(Engine* engine) const {
    SessionOptions options;
    options.stream_api = GetParam();
    options.step_deadline = absl::Milliseconds(50);
    options.recovery_interval = absl::Milliseconds(100);
    options.recovery_jitter = 0.0;
    if (engine != nullptr) options.live_keys = engine->Callback();
    return options;
  }

  // What the client wrote to ClientOptions::log.
  std::vector<std::string> Log() {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

  ScriptedService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
};

}  // namespace entrokv::recovery_testing

#endif  // ENTROKV_TESTS_CLIENT_RECOVERY_TEST_UTIL_H_
