#include "tinyllama/grpc_decider.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "entrokv/client/client.h"
#include "entrokv/client/session.h"
#include "entrokv/client/vectors.h"
#include "entrokv/core/status_macros.h"

namespace entrokv::tinyllama {

namespace {

class GrpcSession : public DeciderSession {
 public:
  GrpcSession(std::unique_ptr<Session> session, const SessionConfig& config)
      : session_(std::move(session)),
        scored_layers_(config.scored_layers),
        key_row_(int64_t{config.shape.kv_heads} * config.shape.head_dim),
        query_row_(int64_t{config.shape.q_heads} * config.shape.head_dim) {}

  // The client library sketches and group-sums; the engine's part is to send
  // only the scored layers, and nothing but the keys on a step that decides
  // nothing.
  absl::Status Step(const DecisionRequest& request,
                    Decision* decision) override {
    const uint64_t slot = request.slot;
    StepRequest step;
    step.slot_ids = absl::MakeConstSpan(&slot, 1);
    if (scored_layers_.empty()) {
      step.keys = VectorView::F32(request.keys);
    } else {
      ENTROKV_RETURN_IF_ERROR(
          SelectScoredLayers(scored_layers_, key_row_, request.keys, &keys_));
      step.keys = VectorView::F32(keys_);
    }
    if (session_->NextStepDecides(1)) {
      if (scored_layers_.empty()) {
        step.queries = VectorView::F32(request.queries);
      } else {
        ENTROKV_RETURN_IF_ERROR(SelectScoredLayers(scored_layers_, query_row_,
                                                   request.queries, &queries_));
        step.queries = VectorView::F32(queries_);
      }
      step.entropy = request.entropy;
    }
    ENTROKV_ASSIGN_OR_RETURN(StepOutcome outcome, session_->Step(step));
    if (outcome.fallback) {
      return absl::UnavailableError(absl::StrCat(
          "step ", outcome.step, " was decided by the client's local ",
          "fallback, not the server: ",
          session_->degraded_reason().ToString()));
    }
    decision->evicted = std::move(outcome.evicted);
    decision->demoted = std::move(outcome.demoted);
    decision->promoted = std::move(outcome.promoted);
    decision->live = outcome.live;
    decision->budget = outcome.budget;
    decision->deferred = outcome.deferred;
    return absl::OkStatus();
  }

  absl::Status Close() override { return session_->Close(); }

 private:
  std::unique_ptr<Session> session_;
  const std::vector<int32_t> scored_layers_;
  const int64_t key_row_;    // Key elements per model layer.
  const int64_t query_row_;  // Query elements per model layer.
  std::vector<float> keys_;
  std::vector<float> queries_;
};

class GrpcDecider : public Decider {
 public:
  GrpcDecider(std::unique_ptr<Client> client, absl::Duration step_deadline)
      : client_(std::move(client)), step_deadline_(step_deadline) {}

  std::string Describe() const override {
    return absl::StrCat("grpc:", client_->options().target);
  }

  absl::StatusOr<std::unique_ptr<DeciderSession>> Open(
      const SessionConfig& config) override {
    // A demote tier (config.tier) goes to the server with the rest of the
    // configuration; its moves come back in each StepOutcome. No tier
    // callbacks: the engine applies the outcome's lists itself, in the order
    // evicted, demoted, promoted (decider.h).
    SessionOptions options;
    options.step_deadline = step_deadline_;
    options.first_step = 1;  // The evaluator numbers steps from 1.
    options.offline_when_unavailable = false;
    ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<Session> session,
                             client_->CreateSession(config, options));
    return std::unique_ptr<DeciderSession>(
        std::make_unique<GrpcSession>(std::move(session), config));
  }

 private:
  std::unique_ptr<Client> client_;
  absl::Duration step_deadline_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decider>> CreateGrpcDecider(
    const std::string& target, absl::Duration step_deadline) {
  ClientOptions options;
  options.target = target;
  ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                           Client::Connect(options));
  return std::unique_ptr<Decider>(
      std::make_unique<GrpcDecider>(std::move(client), step_deadline));
}

}  // namespace entrokv::tinyllama
