#include "tinyllama/decider.h"

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"
#include "entrokv/core/shadow.h"
#include "entrokv/core/sketch.h"
#include "entrokv/core/status_macros.h"

namespace entrokv::tinyllama {

namespace {

// Does what an engine does before a step reaches core: selects the scored
// layers, sketches keys and queries (Sketcher), and leaves out the queries
// and the entropy of a step that will decide nothing. The cadence is tracked
// here exactly as core counts it (docs/step-semantics.md section 11).
class InProcessSession : public DeciderSession {
 public:
  // `shadows`: null, or the set that measures the session's recall.
  InProcessSession(std::unique_ptr<SessionState> state, Sketcher sketcher,
                   std::unique_ptr<ShadowSet> shadows)
      : state_(std::move(state)),
        sketcher_(std::move(sketcher)),
        shadows_(std::move(shadows)) {}

  absl::Status Step(const DecisionRequest& request,
                    Decision* decision) override {
    if (state_ == nullptr) {
      return absl::FailedPreconditionError("decider session is closed");
    }
    const SessionConfig& config = state_->config();
    const Shape& shape = config.shape;
    const ElementType type = shape.element_type;
    ENTROKV_RETURN_IF_ERROR(SelectScoredLayers(
        config.scored_layers, int64_t{shape.kv_heads} * shape.head_dim,
        request.keys, &full_));
    if (static_cast<int64_t>(full_.size()) != sketcher_.full_key_elements()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "append.keys: ", full_.size(),
          " elements in the scored layers, expected ",
          sketcher_.full_key_elements(), " (layers x kv_heads x head_dim)"));
    }
    sketcher_.Keys(full_, 1, &sketched_);
    Encode(type, sketched_, &keys_);

    const int64_t every = config.decide_every;
    const bool decides =
        every <= 1 || (accepted_ + 1) % every == 0 ||
        (config.hard_ceiling > 0 && live_ + 1 > config.hard_ceiling);
    const uint64_t slot = request.slot;
    StepInput input;
    input.step = request.step;
    input.append.slot_ids = absl::MakeConstSpan(&slot, 1);
    input.append.keys = keys_;
    if (decides) {
      ENTROKV_RETURN_IF_ERROR(SelectScoredLayers(
          config.scored_layers, int64_t{shape.q_heads} * shape.head_dim,
          request.queries, &full_));
      if (static_cast<int64_t>(full_.size()) !=
          sketcher_.full_query_elements()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "queries: ", full_.size(),
            " elements in the scored layers, expected ",
            sketcher_.full_query_elements(), " (layers x q_heads x head_dim)"));
      }
      sketcher_.Queries(full_, &sketched_);
      Encode(type, sketched_, &queries_);
      input.queries = queries_;
      input.entropy = request.entropy;
    }
    StepResult result;
    ENTROKV_RETURN_IF_ERROR(state_->Step(input, &result));
    if (shadows_ != nullptr && shadows_->Observe(input, result, &recall_)) {
      decision->recall = recall_.primary;
      decision->oracle_recall = recall_.oracle;
    }
    ++accepted_;
    live_ = result.live;
    decision->evicted = std::move(result.evicted);
    decision->demoted = std::move(result.demoted);
    decision->promoted = std::move(result.promoted);
    decision->live = result.live;
    decision->budget = result.budget;
    decision->deferred = result.deferred;
    return absl::OkStatus();
  }

  absl::Status Close() override {
    state_.reset();
    shadows_.reset();
    return absl::OkStatus();
  }

 private:
  static void Encode(ElementType type, absl::Span<const float> values,
                     std::vector<std::byte>* out) {
    out->resize(values.size() * ElementSize(type));
    EncodeElements(type, values.data(), values.size(), out->data());
  }

  std::unique_ptr<SessionState> state_;
  const Sketcher sketcher_;
  std::unique_ptr<ShadowSet> shadows_;
  StepRecall recall_;
  int64_t accepted_ = 0;  // Steps core accepted.
  int64_t live_ = 0;      // Live entries after the last step, pending included.
  // Scratch.
  std::vector<float> full_;
  std::vector<float> sketched_;
  std::vector<std::byte> keys_;
  std::vector<std::byte> queries_;
};

class InProcessDecider : public Decider {
 public:
  InProcessDecider(std::unique_ptr<Backend> backend, bool measure_recall)
      : backend_(std::move(backend)), measure_recall_(measure_recall) {}

  std::string Describe() const override {
    return absl::StrCat("inprocess:", backend_->Describe(),
                        measure_recall_ ? " (recall measured)" : "");
  }

  absl::StatusOr<std::unique_ptr<DeciderSession>> Open(
      const SessionConfig& config) override {
    ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<SessionState> state,
                             backend_->CreateSession(config, SessionLimits{}));
    ENTROKV_ASSIGN_OR_RETURN(Sketcher sketcher, Sketcher::Create(config));
    std::unique_ptr<ShadowSet> shadows;
    if (measure_recall_) {
      // No shadows: the set scores the session's own live set and the
      // oracle's. A story is at most the model's context, far below the
      // reference's default capacity (2^16 entries, grown as entries come),
      // so every step with queries is scored.
      ShadowOptions options;
      options.max_shadows = 0;
      ENTROKV_ASSIGN_OR_RETURN(shadows, ShadowSet::Create(config, options));
    }
    return std::unique_ptr<DeciderSession>(std::make_unique<InProcessSession>(
        std::move(state), std::move(sketcher), std::move(shadows)));
  }

 private:
  std::unique_ptr<Backend> backend_;
  const bool measure_recall_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decider>> CreateInProcessDecider(
    BackendKind kind, bool measure_recall) {
  ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                           CreateBackend(kind));
  return std::unique_ptr<Decider>(std::make_unique<InProcessDecider>(
      std::move(backend), measure_recall));
}

}  // namespace entrokv::tinyllama
