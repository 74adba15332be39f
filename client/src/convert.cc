#include "convert.h"

#include <string>

namespace entrokv::client_internal {
namespace {

v1::ElementType ToProto(ElementType type) {
  switch (type) {
    case ElementType::kF32:
      return v1::ELEMENT_TYPE_F32;
    case ElementType::kF16:
      return v1::ELEMENT_TYPE_F16;
    case ElementType::kBf16:
      return v1::ELEMENT_TYPE_BF16;
  }
  return v1::ELEMENT_TYPE_UNSPECIFIED;
}
ElementType FromProto(v1::ElementType type) {
  switch (type) {
    case v1::ELEMENT_TYPE_F32:
      return ElementType::kF32;
    case v1::ELEMENT_TYPE_BF16:
      return ElementType::kBf16;
    default:
      return ElementType::kF16;
  }
}

v1::Ranking ToProto(Ranking ranking) {
  switch (ranking) {
    case Ranking::kWindow:
      return v1::RANKING_WINDOW;
    case Ranking::kStreaming:
      return v1::RANKING_STREAMING;
    case Ranking::kH2o:
      return v1::RANKING_H2O;
    case Ranking::kTova:
      return v1::RANKING_TOVA;
    case Ranking::kKeyNorm:
      return v1::RANKING_KEYNORM;
    case Ranking::kRandom:
      return v1::RANKING_RANDOM;
    case Ranking::kAffinity:
      return v1::RANKING_AFFINITY;
  }
  return v1::RANKING_UNSPECIFIED;
}
Ranking FromProto(v1::Ranking ranking) {
  switch (ranking) {
    case v1::RANKING_WINDOW:
      return Ranking::kWindow;
    case v1::RANKING_STREAMING:
      return Ranking::kStreaming;
    case v1::RANKING_H2O:
      return Ranking::kH2o;
    case v1::RANKING_TOVA:
      return Ranking::kTova;
    case v1::RANKING_KEYNORM:
      return Ranking::kKeyNorm;
    case v1::RANKING_RANDOM:
      return Ranking::kRandom;
    default:
      return Ranking::kAffinity;
  }
}

v1::Placement ToProto(Placement placement) {
  switch (placement) {
    case Placement::kCpu:
      return v1::PLACEMENT_CPU;
    case Placement::kGpu:
      return v1::PLACEMENT_GPU;
    case Placement::kAuto:
      return v1::PLACEMENT_AUTO;
  }
  return v1::PLACEMENT_UNSPECIFIED;
}
Placement FromProto(v1::Placement placement) {
  switch (placement) {
    case v1::PLACEMENT_CPU:
      return Placement::kCpu;
    case v1::PLACEMENT_GPU:
      return Placement::kGpu;
    default:
      return Placement::kAuto;
  }
}

}  // namespace

void ConfigToProto(const SessionConfig& config, v1::SessionConfig* proto) {
  v1::Shape* shape = proto->mutable_shape();
  shape->set_layers(config.shape.layers);
  shape->set_kv_heads(config.shape.kv_heads);
  shape->set_q_heads(config.shape.q_heads);
  shape->set_head_dim(config.shape.head_dim);
  shape->set_element_type(ToProto(config.shape.element_type));
  proto->set_budget(config.budget);
  proto->set_ranking(ToProto(config.ranking));
  proto->set_budget_control(config.budget_control == BudgetControl::kFixed
                                ? v1::BUDGET_CONTROL_FIXED
                                : v1::BUDGET_CONTROL_ENTROPY);
  v1::AffinityParams* affinity = proto->mutable_affinity();
  affinity->set_update(config.affinity.update == AffinityUpdate::kSeed
                           ? v1::AFFINITY_UPDATE_SEED
                           : v1::AFFINITY_UPDATE_LOGIT_EMA);
  affinity->set_beta(config.affinity.beta);
  affinity->set_lambda(config.affinity.lambda);
  v1::EntropyBudgetParams* eb = proto->mutable_entropy_budget();
  eb->set_gamma(config.entropy_budget.gamma);
  eb->set_ema_rate(config.entropy_budget.ema_rate);
  eb->set_epsilon(config.entropy_budget.epsilon);
  eb->set_min_budget(config.entropy_budget.min_budget);
  eb->set_max_budget(config.entropy_budget.max_budget);
  proto->mutable_h2o()->set_recent_fraction(config.h2o.recent_fraction);
  proto->set_streaming_sinks(config.streaming_sinks);
  proto->set_seed(config.seed);
  proto->mutable_protection()->set_sinks(config.protection.sinks);
  proto->mutable_protection()->set_recent(config.protection.recent);
  proto->set_block_size(config.block_size);
  proto->set_block_reduce(config.block_reduce == BlockReduce::kMax
                              ? v1::BLOCK_REDUCE_MAX
                              : v1::BLOCK_REDUCE_MEAN);
  proto->set_placement(ToProto(config.placement));
}

SessionConfig ConfigFromProto(const v1::SessionConfig& proto) {
  SessionConfig config;
  const v1::Shape& shape = proto.shape();
  if (shape.has_layers()) config.shape.layers = shape.layers();
  if (shape.has_kv_heads()) config.shape.kv_heads = shape.kv_heads();
  if (shape.has_q_heads()) config.shape.q_heads = shape.q_heads();
  if (shape.has_head_dim()) config.shape.head_dim = shape.head_dim();
  config.shape.element_type = FromProto(shape.element_type());
  if (proto.has_budget()) config.budget = proto.budget();
  if (!proto.policy().empty()) {
    // The canonical name wins over the enum pair when both are present.
    (void)ApplyPolicyName(proto.policy(), &config);
  } else {
    config.ranking = FromProto(proto.ranking());
    config.budget_control = proto.budget_control() == v1::BUDGET_CONTROL_FIXED
                                ? BudgetControl::kFixed
                                : BudgetControl::kEntropy;
  }
  config.affinity.update = proto.affinity().update() == v1::AFFINITY_UPDATE_SEED
                               ? AffinityUpdate::kSeed
                               : AffinityUpdate::kLogitEma;
  if (proto.affinity().has_beta())
    config.affinity.beta = proto.affinity().beta();
  if (proto.affinity().has_lambda()) {
    config.affinity.lambda = proto.affinity().lambda();
  }
  const v1::EntropyBudgetParams& eb = proto.entropy_budget();
  if (eb.has_gamma()) config.entropy_budget.gamma = eb.gamma();
  if (eb.has_ema_rate()) config.entropy_budget.ema_rate = eb.ema_rate();
  if (eb.has_epsilon()) config.entropy_budget.epsilon = eb.epsilon();
  if (eb.has_min_budget()) config.entropy_budget.min_budget = eb.min_budget();
  if (eb.has_max_budget()) config.entropy_budget.max_budget = eb.max_budget();
  if (proto.h2o().has_recent_fraction()) {
    config.h2o.recent_fraction = proto.h2o().recent_fraction();
  }
  if (proto.has_streaming_sinks()) {
    config.streaming_sinks = proto.streaming_sinks();
  }
  config.seed = proto.seed();
  if (proto.protection().has_sinks()) {
    config.protection.sinks = proto.protection().sinks();
  }
  if (proto.protection().has_recent()) {
    config.protection.recent = proto.protection().recent();
  }
  if (proto.has_block_size()) config.block_size = proto.block_size();
  config.block_reduce = proto.block_reduce() == v1::BLOCK_REDUCE_MAX
                            ? BlockReduce::kMax
                            : BlockReduce::kMean;
  config.placement = FromProto(proto.placement());
  return config;
}

SessionStats StatsFromProto(const v1::SessionStats& proto) {
  SessionStats stats;
  stats.live = proto.live();
  stats.peak_live = proto.peak_live();
  stats.budget = proto.budget();
  stats.steps = proto.steps();
  if (proto.has_last_step()) stats.last_step = proto.last_step();
  stats.appended = proto.appended();
  stats.evicted = proto.evicted();
  stats.bytes_held = proto.bytes_held();
  stats.placement = proto.placement() == v1::PLACEMENT_GPU ? Placement::kGpu
                                                           : Placement::kCpu;
  return stats;
}

SessionInfo InfoFromProto(const v1::SessionInfo& proto) {
  SessionInfo info;
  info.id = proto.session_id();
  info.config = ConfigFromProto(proto.config());
  info.stats = StatsFromProto(proto.stats());
  info.attached = proto.attached();
  info.idle = absl::Milliseconds(proto.idle_ms());
  return info;
}

absl::Status FromGrpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::Status FromProto(const v1::Status& status) {
  if (status.code() == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.code()),
                      status.message());
}

}  // namespace entrokv::client_internal
