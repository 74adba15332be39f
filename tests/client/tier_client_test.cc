// The client library with a demote tier (session.h, "Demote tier"): the
// tier callbacks get each step's moves in the order evict, demote, promote;
// the client's record of live and demoted entries follows them (a promoted
// entry back at its append position); the first local step hands every
// demoted entry back as evicted; a recovery re-sends live entries only. A
// scripted server gives hand-worked answers; the real server in process is
// checked against core run in process, for a Session and a DecodeBatch.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client_test_util.h"
#include "entrokv/client/batch.h"
#include "entrokv/client/client.h"
#include "entrokv/v1/entrokv.grpc.pb.h"
#include "fake_servers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace entrokv {
namespace {

using ::entrokv::testing::MakeStory;
using ::entrokv::testing::SmallConfig;
using ::entrokv::testing::StoryStep;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Ids = std::vector<uint64_t>;

// A step's scripted answer.
struct Moves {
  Ids evicted, demoted, promoted;
};

// Names its sessions t1, t2, ...; answers attaches; answers step n of any
// session with script[n] (nothing when absent) unless `swallow_steps`;
// records the slot ids each step appended.
class TierScriptService final : public v1::EntroKv::Service {
 public:
  explicit TierScriptService(std::map<uint64_t, Moves> script)
      : script_(std::move(script)) {}
  std::atomic<bool> swallow_steps{false};

  grpc::Status CreateSession(grpc::ServerContext*,
                             const v1::CreateSessionRequest*,
                             v1::CreateSessionResponse* response) override {
    response->set_session_id(absl::StrCat("t", ++creates_));
    return grpc::Status::OK;
  }
  grpc::Status CloseSession(grpc::ServerContext*,
                            const v1::CloseSessionRequest*,
                            v1::CloseSessionResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Decode(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::DecodeResponse, v1::DecodeRequest>* stream)
      override {
    v1::DecodeRequest request;
    while (stream->Read(&request)) {
      v1::DecodeResponse response;
      for (const std::string& id : request.attach()) {
        response.add_attach_results()->set_session_id(id);
      }
      if (request.steps_size() > 0 && swallow_steps) continue;
      for (const v1::SessionStep& step : request.steps()) {
        {
          absl::MutexLock lock(&mu_);
          appended_.emplace_back(step.append().slot_ids().begin(),
                                 step.append().slot_ids().end());
        }
        v1::SessionStepResult* result = response.add_results();
        result->set_session_id(step.session_id());
        result->set_step(step.step());
        result->set_budget(4);
        auto it = script_.find(step.step());
        if (it == script_.end()) continue;
        result->mutable_evicted()->Add(it->second.evicted.begin(),
                                       it->second.evicted.end());
        result->mutable_demoted()->Add(it->second.demoted.begin(),
                                       it->second.demoted.end());
        result->mutable_promoted()->Add(it->second.promoted.begin(),
                                        it->second.promoted.end());
      }
      stream->Write(response);
    }
    return grpc::Status::OK;
  }

  int creates() const { return creates_; }
  // The slot ids each answered step appended, in arrival order.
  std::vector<Ids> appended() {
    absl::MutexLock lock(&mu_);
    return appended_;
  }

 private:
  const std::map<uint64_t, Moves> script_;
  std::atomic<int> creates_{0};
  absl::Mutex mu_;
  std::vector<Ids> appended_ ABSL_GUARDED_BY(mu_);
};

// The engine's side of the callbacks: every call, in order.
struct CallLog {
  std::vector<std::pair<std::string, Ids>> calls;

  SessionOptions::TierCallbacks Callbacks() {
    SessionOptions::TierCallbacks tier;
    auto record = [this](const char* kind) {
      return [this, kind](absl::Span<const uint64_t> ids) {
        calls.emplace_back(kind, Ids(ids.begin(), ids.end()));
      };
    };
    tier.evict = record("evict");
    tier.demote = record("demote");
    tier.promote = record("promote");
    return tier;
  }
  std::vector<std::pair<std::string, Ids>> Take() {
    return std::exchange(calls, {});
  }
};

using Call = std::pair<std::string, Ids>;

// tova + fixed, budget 4, a tier of 4; streaming_sinks 4 (the default) makes
// the local rule keep the first four entries ever appended.
SessionConfig TierConfig() {
  SessionConfig config = SmallConfig("tova", 4, ElementType::kF32);
  config.tier.capacity = 4;
  return config;
}

class TierClientTest : public ::testing::Test {
 protected:
  // Step 0 appends 1000..1005, step n > 0 appends 1005 + n.
  //  0: demote 1001, 1002.            live 1000 1003 1004 1005, tier 1001 1002
  //  1: evict 1003, demote 1004, promote 1001 (appends 1006).
  //                                   live 1000 1001 1005 1006, tier 1002 1004
  TierClientTest()
      : service_({{0, {{}, {1001, 1002}, {}}}, {1, {{1003}, {1004}, {1001}}}}) {
  }

  void SetUp() override {
    ClientOptions options;
    server_ = testing::Serve(&service_, &options.target);
    ASSERT_NE(server_, nullptr);
    ASSERT_OK_AND_ASSIGN(client_, Client::Connect(options));
    story_ = MakeStory(TierConfig().shape, 6, 6);
  }
  void TearDown() override {
    client_.reset();
    server_->Shutdown(absl::ToChronoTime(absl::Now()));
  }

  SessionOptions Options() {
    SessionOptions options;
    options.step_deadline = absl::Milliseconds(100);
    options.recovery_interval = absl::Milliseconds(100);
    options.recovery_jitter = 0.0;
    options.tier = log_.Callbacks();
    return options;
  }

  TierScriptService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Client> client_;
  std::vector<StoryStep> story_;
  CallLog log_;
};

TEST_F(TierClientTest, CallbacksGetEachStepsMovesInOrder) {
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(TierConfig(), Options()));
  ASSERT_OK_AND_ASSIGN(StepOutcome first, session->Step(story_[0].Request()));
  EXPECT_THAT(first.evicted, IsEmpty());
  EXPECT_THAT(first.demoted, ElementsAre(1001, 1002));
  EXPECT_THAT(first.promoted, IsEmpty());
  // Only the non-empty list is handed over.
  EXPECT_THAT(log_.Take(), ElementsAre(Call{"demote", {1001, 1002}}));
  EXPECT_THAT(session->LiveSlots(), ElementsAre(1000, 1003, 1004, 1005));
  EXPECT_THAT(session->TierSlots(), ElementsAre(1001, 1002));

  ASSERT_OK_AND_ASSIGN(StepOutcome second, session->Step(story_[1].Request()));
  EXPECT_THAT(second.evicted, ElementsAre(1003));
  EXPECT_THAT(second.demoted, ElementsAre(1004));
  EXPECT_THAT(second.promoted, ElementsAre(1001));
  EXPECT_THAT(log_.Take(),
              ElementsAre(Call{"evict", {1003}}, Call{"demote", {1004}},
                          Call{"promote", {1001}}));
  // 1001 is back at its own append position, before 1005, not after 1006.
  EXPECT_THAT(session->LiveSlots(), ElementsAre(1000, 1001, 1005, 1006));
  EXPECT_THAT(session->TierSlots(), ElementsAre(1002, 1004));
  EXPECT_OK(session->Close());
}

TEST_F(TierClientTest, ADemotedSlotIdMayNotBeAppendedAgain) {
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(TierConfig(), Options()));
  ASSERT_OK(session->Step(story_[0].Request()).status());
  StoryStep again = story_[1];
  again.slots = {1002};  // In the tier.
  const absl::StatusOr<StepOutcome> refused = session->Step(again.Request());
  EXPECT_STATUS_CODE(refused, absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("append.slot_ids: slot 1002 is in the demote tier"));
  EXPECT_EQ(service_.appended().size(), 1u);  // Nothing was sent.
  EXPECT_OK(session->Close());
}

TEST_F(TierClientTest, FirstLocalStepHandsEveryDemotedEntryBackAsEvicted) {
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(TierConfig(), Options()));
  ASSERT_OK(session->Step(story_[0].Request()).status());
  ASSERT_OK(session->Step(story_[1].Request()).status());
  log_.Take();

  // The server goes silent: step 2 (appends 1007) is decided locally. Live
  // 1000 1001 1005 1006 1007, over the budget of 4 by one; 1000..1003 are
  // the rule's sinks, so it evicts 1005. The tier's 1002 and 1004 are handed
  // back too, all in append order.
  service_.swallow_steps = true;
  ASSERT_OK_AND_ASSIGN(StepOutcome local, session->Step(story_[2].Request()));
  EXPECT_TRUE(local.fallback);
  EXPECT_THAT(local.evicted, ElementsAre(1002, 1004, 1005));
  EXPECT_THAT(local.demoted, IsEmpty());
  EXPECT_THAT(local.promoted, IsEmpty());
  EXPECT_EQ(local.live, 4);
  EXPECT_THAT(log_.Take(), ElementsAre(Call{"evict", {1002, 1004, 1005}}));
  EXPECT_THAT(session->TierSlots(), IsEmpty());
  EXPECT_THAT(session->LiveSlots(), ElementsAre(1000, 1001, 1006, 1007));

  // Later local steps have no tier left: the rule's evictions only (1006).
  ASSERT_OK_AND_ASSIGN(StepOutcome next, session->Step(story_[3].Request()));
  EXPECT_TRUE(next.fallback);
  EXPECT_THAT(next.evicted, ElementsAre(1006));
  EXPECT_THAT(log_.Take(), ElementsAre(Call{"evict", {1006}}));
}

TEST_F(TierClientTest, RecoveryResendsLiveEntriesOnly) {
  SessionOptions options = Options();
  std::vector<Ids> asked;
  const int64_t key_elements = story_[0].keys.size() / story_[0].slots.size();
  options.live_keys = [&](absl::Span<const uint64_t> live,
                          std::vector<float>* keys) {
    asked.emplace_back(live.begin(), live.end());
    keys->assign(live.size() * key_elements, 0.25f);
    return absl::OkStatus();
  };
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(TierConfig(), options));
  ASSERT_OK(session->Step(story_[0].Request()).status());
  ASSERT_OK(session->Step(story_[1].Request()).status());
  service_.swallow_steps = true;
  ASSERT_OK_AND_ASSIGN(StepOutcome local, session->Step(story_[2].Request()));
  ASSERT_TRUE(local.fallback);
  service_.swallow_steps = false;
  absl::SleepFor(absl::Milliseconds(150));
  // Step 3 (appends 1008) goes to a new server session: it re-sends the
  // live entries 1000 1001 1006 1007 (the demoted ones were handed back).
  ASSERT_OK_AND_ASSIGN(StepOutcome back, session->Step(story_[3].Request()));
  EXPECT_FALSE(back.fallback);
  EXPECT_EQ(session->id(), "t2");
  EXPECT_THAT(asked, ElementsAre(Ids{1000, 1001, 1006, 1007}));
  EXPECT_THAT(service_.appended().back(),
              ElementsAre(1000, 1001, 1006, 1007, 1008));
  EXPECT_OK(session->Close());
}

// The moves of step t-1 reach the callbacks in the call that sends step t,
// before it returns step t-1's outcome.
TEST_F(TierClientTest, PipelinedStepsDeliverTheMovesOfTheStepTheyReturn) {
  ASSERT_OK_AND_ASSIGN(auto session,
                       client_->CreateSession(TierConfig(), Options()));
  ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> none,
                       session->StepPipelined(story_[0].Request()));
  EXPECT_FALSE(none.has_value());
  EXPECT_THAT(log_.Take(), IsEmpty());
  ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> zero,
                       session->StepPipelined(story_[1].Request()));
  ASSERT_TRUE(zero.has_value());
  EXPECT_EQ(zero->step, 0u);
  EXPECT_THAT(log_.Take(), ElementsAre(Call{"demote", {1001, 1002}}));
  ASSERT_OK_AND_ASSIGN(std::optional<StepOutcome> one, session->Flush());
  ASSERT_TRUE(one.has_value());
  EXPECT_THAT(log_.Take(),
              ElementsAre(Call{"evict", {1003}}, Call{"demote", {1004}},
                          Call{"promote", {1001}}));
  EXPECT_THAT(session->LiveSlots(), ElementsAre(1000, 1001, 1005, 1006));
  EXPECT_OK(session->Close());
}

// Without a tier in the config the callbacks are never called, even with
// evictions (the engine frees StepOutcome::evicted as before).
TEST_F(TierClientTest, CallbacksAreIgnoredWithoutATier) {
  SessionConfig config = TierConfig();
  config.tier.capacity = 0;
  ASSERT_OK_AND_ASSIGN(auto session, client_->CreateSession(config, Options()));
  ASSERT_OK(session->Step(story_[0].Request()).status());
  ASSERT_OK_AND_ASSIGN(StepOutcome second, session->Step(story_[1].Request()));
  EXPECT_THAT(second.evicted, ElementsAre(1003));  // The script's.
  EXPECT_THAT(log_.Take(), IsEmpty());
  EXPECT_OK(session->Close());
}

// Against the real server: each step's lists equal core's in process, the
// callbacks get them, and an engine that applies them keeps exactly the
// client's live and demoted records (and core's).
class TierServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::StartTestServer();
    ASSERT_NE(server_, nullptr);
    client_ = testing::ConnectTo(*server_);
    ASSERT_NE(client_, nullptr);
  }

  static SessionConfig Config() {
    SessionConfig config = SmallConfig("tova", 8, ElementType::kF32);
    config.protection.sinks = 1;
    config.protection.recent = 2;
    config.tier.capacity = 6;
    config.tier.max_promotions = 3;
    return config;
  }

  // Core's answers to `story`, and its live and demoted slots after each.
  struct CoreRun {
    std::vector<StepResult> results;
    std::vector<Ids> live, tier;
  };
  static CoreRun RunCore(const SessionConfig& config,
                         const std::vector<StoryStep>& story) {
    CoreRun run;
    auto backend = CreateBackend(BackendKind::kCpu);
    EXPECT_TRUE(backend.ok());
    auto session = (*backend)->CreateSession(config, SessionLimits{});
    EXPECT_TRUE(session.ok()) << session.status();
    for (size_t t = 0; t < story.size(); ++t) {
      const StoryStep& s = story[t];
      StepInput input;
      input.step = t;
      input.append.slot_ids = s.slots;
      input.append.keys = {reinterpret_cast<const std::byte*>(s.keys.data()),
                           s.keys.size() * sizeof(float)};
      input.queries = {reinterpret_cast<const std::byte*>(s.query.data()),
                       s.query.size() * sizeof(float)};
      input.entropy = s.entropy;
      StepResult result;
      EXPECT_OK((*session)->Step(input, &result));
      run.results.push_back(result);
      run.live.push_back((*session)->LiveSlots());
      run.tier.push_back((*session)->DemotedSlots());
    }
    return run;
  }

  std::unique_ptr<server::Server> server_;
  std::unique_ptr<Client> client_;
};

// The engine's two memories, moved by the callbacks.
struct EngineMemory {
  std::set<uint64_t> device, host;
  size_t peak_device = 0;

  SessionOptions::TierCallbacks Callbacks() {
    SessionOptions::TierCallbacks tier;
    tier.evict = [this](absl::Span<const uint64_t> ids) {
      for (uint64_t id : ids) {
        EXPECT_TRUE(device.erase(id) + host.erase(id) == 1) << id;
      }
    };
    tier.demote = [this](absl::Span<const uint64_t> ids) {
      for (uint64_t id : ids) {
        EXPECT_EQ(device.erase(id), 1u) << id;
        host.insert(id);
      }
    };
    tier.promote = [this](absl::Span<const uint64_t> ids) {
      for (uint64_t id : ids) {
        EXPECT_EQ(host.erase(id), 1u) << id;
        device.insert(id);
        peak_device = std::max(peak_device, device.size());
      }
    };
    return tier;
  }
  void Append(const Ids& ids) {
    device.insert(ids.begin(), ids.end());
    peak_device = std::max(peak_device, device.size());
  }
};

TEST_F(TierServerTest, SessionMovesAreCoresAndTheEngineFollowsThem) {
  const SessionConfig config = Config();
  const std::vector<StoryStep> story = MakeStory(config.shape, 10, 110, 5);
  const CoreRun want = RunCore(config, story);
  EngineMemory memory;
  SessionOptions options;
  options.step_deadline = absl::InfiniteDuration();
  options.tier = memory.Callbacks();
  ASSERT_OK_AND_ASSIGN(auto session, client_->CreateSession(config, options));
  int64_t demoted = 0, promoted = 0;
  for (size_t t = 0; t < story.size(); ++t) {
    SCOPED_TRACE(absl::StrCat("step ", t));
    const size_t live_before = memory.device.size();
    memory.Append(story[t].slots);
    memory.peak_device = memory.device.size();
    ASSERT_OK_AND_ASSIGN(StepOutcome got, session->Step(story[t].Request()));
    ASSERT_FALSE(got.fallback);
    ASSERT_THAT(got.evicted, ElementsAreArray(want.results[t].evicted));
    ASSERT_THAT(got.demoted, ElementsAreArray(want.results[t].demoted));
    ASSERT_THAT(got.promoted, ElementsAreArray(want.results[t].promoted));
    ASSERT_EQ(got.live, want.results[t].live);
    ASSERT_THAT(session->LiveSlots(), ElementsAreArray(want.live[t]));
    ASSERT_THAT(session->TierSlots(), ElementsAreArray(want.tier[t]));
    // The engine's memories equal the records, and applying evict and
    // demote before promote kept its device within the previous live
    // entries plus this step's appends (step-semantics section 12, step 7).
    ASSERT_THAT(Ids(memory.device.begin(), memory.device.end()),
                ElementsAreArray(want.live[t]));
    ASSERT_THAT(Ids(memory.host.begin(), memory.host.end()),
                ElementsAreArray(want.tier[t]));
    ASSERT_LE(memory.peak_device, live_before + story[t].slots.size());
    demoted += static_cast<int64_t>(got.demoted.size());
    promoted += static_cast<int64_t>(got.promoted.size());
  }
  EXPECT_GT(demoted, 0);
  EXPECT_GT(promoted, 0);
  EXPECT_OK(session->Close());
}

TEST_F(TierServerTest, BatchSessionsGetTheirOwnMoves) {
  const SessionConfig config = Config();
  const std::vector<StoryStep> story = MakeStory(config.shape, 10, 60, 5);
  const CoreRun want = RunCore(config, story);
  std::unique_ptr<DecodeBatch> batch = client_->CreateBatch();
  EngineMemory a_memory, b_memory;
  SessionOptions a_options, b_options;
  a_options.step_deadline = b_options.step_deadline = absl::InfiniteDuration();
  a_options.tier = a_memory.Callbacks();
  b_options.tier = b_memory.Callbacks();
  ASSERT_OK_AND_ASSIGN(auto a, batch->CreateSession(config, a_options));
  ASSERT_OK_AND_ASSIGN(auto b, batch->CreateSession(config, b_options));
  int64_t promoted = 0;
  for (size_t t = 0; t < story.size(); ++t) {
    SCOPED_TRACE(absl::StrCat("step ", t));
    a_memory.Append(story[t].slots);
    b_memory.Append(story[t].slots);
    const std::vector<BatchStep> steps = {{a.get(), story[t].Request()},
                                          {b.get(), story[t].Request()}};
    std::vector<absl::StatusOr<StepOutcome>> got = batch->Step(steps);
    ASSERT_EQ(got.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      ASSERT_OK(got[i].status());
      ASSERT_THAT(got[i]->demoted, ElementsAreArray(want.results[t].demoted));
      ASSERT_THAT(got[i]->promoted, ElementsAreArray(want.results[t].promoted));
      ASSERT_THAT(got[i]->evicted, ElementsAreArray(want.results[t].evicted));
    }
    for (EngineMemory* memory : {&a_memory, &b_memory}) {
      ASSERT_THAT(Ids(memory->device.begin(), memory->device.end()),
                  ElementsAreArray(want.live[t]));
      ASSERT_THAT(Ids(memory->host.begin(), memory->host.end()),
                  ElementsAreArray(want.tier[t]));
    }
    promoted += static_cast<int64_t>(got[0]->promoted.size());
  }
  EXPECT_GT(promoted, 0);
}

}  // namespace
}  // namespace entrokv
