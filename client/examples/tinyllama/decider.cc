#include "tinyllama/decider.h"

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "entrokv/core/element_type.h"
#include "entrokv/core/session.h"
#include "entrokv/core/status_macros.h"

namespace entrokv::tinyllama {

namespace {

class InProcessSession : public DeciderSession {
 public:
  explicit InProcessSession(std::unique_ptr<SessionState> state)
      : state_(std::move(state)) {}

  absl::Status Step(const DecisionRequest& request,
                    Decision* decision) override {
    if (state_ == nullptr) {
      return absl::FailedPreconditionError("decider session is closed");
    }
    const ElementType type = state_->config().shape.element_type;
    Encode(type, request.keys, &keys_);
    Encode(type, request.queries, &queries_);
    const uint64_t slot = request.slot;
    StepInput input;
    input.step = request.step;
    input.append.slot_ids = absl::MakeConstSpan(&slot, 1);
    input.append.keys = keys_;
    input.queries = queries_;
    input.entropy = request.entropy;
    StepResult result;
    ENTROKV_RETURN_IF_ERROR(state_->Step(input, &result));
    decision->evicted = std::move(result.evicted);
    decision->live = result.live;
    decision->budget = result.budget;
    return absl::OkStatus();
  }

  absl::Status Close() override {
    state_.reset();
    return absl::OkStatus();
  }

 private:
  static void Encode(ElementType type, absl::Span<const float> values,
                     std::vector<std::byte>* out) {
    out->resize(values.size() * ElementSize(type));
    EncodeElements(type, values.data(), values.size(), out->data());
  }

  std::unique_ptr<SessionState> state_;
  std::vector<std::byte> keys_;
  std::vector<std::byte> queries_;
};

class InProcessDecider : public Decider {
 public:
  explicit InProcessDecider(std::unique_ptr<Backend> backend)
      : backend_(std::move(backend)) {}

  std::string Describe() const override {
    return absl::StrCat("inprocess:", backend_->Describe());
  }

  absl::StatusOr<std::unique_ptr<DeciderSession>> Open(
      const SessionConfig& config) override {
    ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<SessionState> state,
                             backend_->CreateSession(config, SessionLimits{}));
    return std::unique_ptr<DeciderSession>(
        std::make_unique<InProcessSession>(std::move(state)));
  }

 private:
  std::unique_ptr<Backend> backend_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decider>> CreateInProcessDecider(
    BackendKind kind) {
  ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                           CreateBackend(kind));
  return std::unique_ptr<Decider>(
      std::make_unique<InProcessDecider>(std::move(backend)));
}

}  // namespace entrokv::tinyllama
