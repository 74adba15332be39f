#include "proto/convert/config_convert.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "entrokv/core/status_macros.h"

namespace entrokv::proto {
namespace {

absl::Status UnknownEnum(absl::string_view field, int value) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": unknown value ", value));
}

absl::Status FromProto(v1::ElementType in, ElementType* out) {
  switch (in) {
    case v1::ELEMENT_TYPE_UNSPECIFIED:
      return absl::OkStatus();
    case v1::ELEMENT_TYPE_F32:
      *out = ElementType::kF32;
      return absl::OkStatus();
    case v1::ELEMENT_TYPE_F16:
      *out = ElementType::kF16;
      return absl::OkStatus();
    case v1::ELEMENT_TYPE_BF16:
      *out = ElementType::kBf16;
      return absl::OkStatus();
    default:
      return UnknownEnum("config.shape.element_type", in);
  }
}

absl::Status FromProto(v1::Ranking in, Ranking* out) {
  switch (in) {
    case v1::RANKING_UNSPECIFIED:
      return absl::OkStatus();
    case v1::RANKING_WINDOW:
      *out = Ranking::kWindow;
      return absl::OkStatus();
    case v1::RANKING_STREAMING:
      *out = Ranking::kStreaming;
      return absl::OkStatus();
    case v1::RANKING_H2O:
      *out = Ranking::kH2o;
      return absl::OkStatus();
    case v1::RANKING_TOVA:
      *out = Ranking::kTova;
      return absl::OkStatus();
    case v1::RANKING_KEYNORM:
      *out = Ranking::kKeyNorm;
      return absl::OkStatus();
    case v1::RANKING_RANDOM:
      *out = Ranking::kRandom;
      return absl::OkStatus();
    case v1::RANKING_AFFINITY:
      *out = Ranking::kAffinity;
      return absl::OkStatus();
    case v1::RANKING_KEYDIFF:
      *out = Ranking::kKeyDiff;
      return absl::OkStatus();
    case v1::RANKING_EXPECTED:
      *out = Ranking::kExpected;
      return absl::OkStatus();
    case v1::RANKING_BIRTH:
      *out = Ranking::kBirth;
      return absl::OkStatus();
    case v1::RANKING_RKV:
      *out = Ranking::kRkv;
      return absl::OkStatus();
    default:
      return UnknownEnum("config.ranking", in);
  }
}

absl::Status FromProto(v1::BudgetControl in, BudgetControl* out) {
  switch (in) {
    case v1::BUDGET_CONTROL_UNSPECIFIED:
      return absl::OkStatus();
    case v1::BUDGET_CONTROL_FIXED:
      *out = BudgetControl::kFixed;
      return absl::OkStatus();
    case v1::BUDGET_CONTROL_ENTROPY:
      *out = BudgetControl::kEntropy;
      return absl::OkStatus();
    case v1::BUDGET_CONTROL_THRESHOLD:
      *out = BudgetControl::kThreshold;
      return absl::OkStatus();
    default:
      return UnknownEnum("config.budget_control", in);
  }
}

absl::Status FromProto(v1::AffinityUpdate in, AffinityUpdate* out) {
  switch (in) {
    case v1::AFFINITY_UPDATE_UNSPECIFIED:
      return absl::OkStatus();
    case v1::AFFINITY_UPDATE_SEED:
      *out = AffinityUpdate::kSeed;
      return absl::OkStatus();
    case v1::AFFINITY_UPDATE_LOGIT_EMA:
      *out = AffinityUpdate::kLogitEma;
      return absl::OkStatus();
    default:
      return UnknownEnum("config.affinity.update", in);
  }
}

absl::Status FromProto(v1::BlockReduce in, BlockReduce* out) {
  switch (in) {
    case v1::BLOCK_REDUCE_UNSPECIFIED:
      return absl::OkStatus();
    case v1::BLOCK_REDUCE_MEAN:
      *out = BlockReduce::kMean;
      return absl::OkStatus();
    case v1::BLOCK_REDUCE_MAX:
      *out = BlockReduce::kMax;
      return absl::OkStatus();
    default:
      return UnknownEnum("config.block_reduce", in);
  }
}

absl::Status FromProto(v1::Placement in, absl::string_view field,
                       Placement* out) {
  switch (in) {
    case v1::PLACEMENT_UNSPECIFIED:
      return absl::OkStatus();
    case v1::PLACEMENT_CPU:
      *out = Placement::kCpu;
      return absl::OkStatus();
    case v1::PLACEMENT_GPU:
      *out = Placement::kGpu;
      return absl::OkStatus();
    case v1::PLACEMENT_AUTO:
      *out = Placement::kAuto;
      return absl::OkStatus();
    default:
      return UnknownEnum(field, in);
  }
}

}  // namespace

absl::Status FromProto(const v1::SessionConfig& proto, SessionConfig* out) {
  SessionConfig config;  // Core's defaults.

  const v1::Shape& shape = proto.shape();
  if (shape.has_layers()) config.shape.layers = shape.layers();
  if (shape.has_kv_heads()) config.shape.kv_heads = shape.kv_heads();
  if (shape.has_q_heads()) config.shape.q_heads = shape.q_heads();
  if (shape.has_head_dim()) config.shape.head_dim = shape.head_dim();
  if (shape.has_sketch_dim()) config.shape.sketch_dim = shape.sketch_dim();
  switch (shape.query_form()) {
    case v1::QUERY_FORM_UNSPECIFIED:
      break;
    case v1::QUERY_FORM_PER_HEAD:
      config.shape.query_form = QueryForm::kPerHead;
      break;
    case v1::QUERY_FORM_GROUP_SUM:
      config.shape.query_form = QueryForm::kGroupSum;
      break;
    default:
      return UnknownEnum("config.shape.query_form", shape.query_form());
  }
  ENTROKV_RETURN_IF_ERROR(
      FromProto(shape.element_type(), &config.shape.element_type));

  if (proto.has_budget()) config.budget = proto.budget();

  ENTROKV_RETURN_IF_ERROR(FromProto(proto.ranking(), &config.ranking));
  ENTROKV_RETURN_IF_ERROR(
      FromProto(proto.budget_control(), &config.budget_control));
  if (!proto.policy().empty()) {
    SessionConfig named = config;
    const absl::Status status = ApplyPolicyName(proto.policy(), &named);
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.policy: ", status.message()));
    }
    if (proto.ranking() != v1::RANKING_UNSPECIFIED &&
        named.ranking != config.ranking) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.policy: \"", proto.policy(),
                       "\" conflicts with config.ranking ",
                       std::string(RankingName(config.ranking))));
    }
    if (proto.budget_control() != v1::BUDGET_CONTROL_UNSPECIFIED &&
        named.budget_control != config.budget_control) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.policy: \"", proto.policy(),
                       "\" conflicts with config.budget_control ",
                       std::string(BudgetControlName(config.budget_control))));
    }
    config.ranking = named.ranking;
    config.budget_control = named.budget_control;
  }

  const v1::AffinityParams& affinity = proto.affinity();
  ENTROKV_RETURN_IF_ERROR(
      FromProto(affinity.update(), &config.affinity.update));
  if (affinity.has_beta()) config.affinity.beta = affinity.beta();
  if (affinity.has_lambda()) config.affinity.lambda = affinity.lambda();

  const v1::EntropyBudgetParams& eb = proto.entropy_budget();
  if (eb.has_gamma()) config.entropy_budget.gamma = eb.gamma();
  if (eb.has_ema_rate()) config.entropy_budget.ema_rate = eb.ema_rate();
  if (eb.has_epsilon()) config.entropy_budget.epsilon = eb.epsilon();
  if (eb.has_min_budget()) config.entropy_budget.min_budget = eb.min_budget();
  if (eb.has_max_budget()) config.entropy_budget.max_budget = eb.max_budget();

  if (proto.birth().has_weight()) {
    config.birth.weight = proto.birth().weight();
  }
  if (proto.rkv().has_lambda()) config.rkv.lambda = proto.rkv().lambda();
  if (proto.rkv().has_sample()) config.rkv.sample = proto.rkv().sample();
  if (proto.threshold().has_tau()) {
    config.threshold.tau = proto.threshold().tau();
  }
  const v1::TierParams& tier = proto.tier();
  if (tier.has_capacity()) config.tier.capacity = tier.capacity();
  if (tier.has_promote_margin()) {
    config.tier.promote_margin = tier.promote_margin();
  }
  if (tier.has_max_promotions()) {
    config.tier.max_promotions = tier.max_promotions();
  }
  if (proto.expected().has_ema_rate()) {
    config.expected.ema_rate = proto.expected().ema_rate();
  }
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
  ENTROKV_RETURN_IF_ERROR(
      FromProto(proto.block_reduce(), &config.block_reduce));
  ENTROKV_RETURN_IF_ERROR(
      FromProto(proto.placement(), "config.placement", &config.placement));
  config.block_summary = proto.block_summary();
  if (proto.has_decide_every()) config.decide_every = proto.decide_every();
  if (proto.has_hard_ceiling()) config.hard_ceiling = proto.hard_ceiling();
  config.scored_layers.assign(proto.scored_layers().begin(),
                              proto.scored_layers().end());
  config.projection_seed = proto.projection_seed();

  *out = config;
  return absl::OkStatus();
}

absl::Status FromProto(const v1::SessionStats& proto, SessionStats* out) {
  SessionStats stats;
  stats.live = proto.live();
  stats.peak_live = proto.peak_live();
  stats.budget = proto.budget();
  stats.steps = proto.steps();
  if (proto.has_last_step()) stats.last_step = proto.last_step();
  stats.appended = proto.appended();
  stats.evicted = proto.evicted();
  stats.bytes_held = proto.bytes_held();
  stats.tier_held = proto.tier_held();
  stats.demoted = proto.demoted();
  stats.promoted = proto.promoted();
  ENTROKV_RETURN_IF_ERROR(
      FromProto(proto.placement(), "stats.placement", &stats.placement));

  *out = stats;
  return absl::OkStatus();
}

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
    case Ranking::kKeyDiff:
      return v1::RANKING_KEYDIFF;
    case Ranking::kExpected:
      return v1::RANKING_EXPECTED;
    case Ranking::kBirth:
      return v1::RANKING_BIRTH;
    case Ranking::kRkv:
      return v1::RANKING_RKV;
  }
  return v1::RANKING_UNSPECIFIED;
}

v1::BudgetControl ToProto(BudgetControl control) {
  switch (control) {
    case BudgetControl::kFixed:
      return v1::BUDGET_CONTROL_FIXED;
    case BudgetControl::kEntropy:
      return v1::BUDGET_CONTROL_ENTROPY;
    case BudgetControl::kThreshold:
      return v1::BUDGET_CONTROL_THRESHOLD;
  }
  return v1::BUDGET_CONTROL_UNSPECIFIED;
}

v1::AffinityUpdate ToProto(AffinityUpdate update) {
  switch (update) {
    case AffinityUpdate::kSeed:
      return v1::AFFINITY_UPDATE_SEED;
    case AffinityUpdate::kLogitEma:
      return v1::AFFINITY_UPDATE_LOGIT_EMA;
  }
  return v1::AFFINITY_UPDATE_UNSPECIFIED;
}

v1::BlockReduce ToProto(BlockReduce reduce) {
  switch (reduce) {
    case BlockReduce::kMean:
      return v1::BLOCK_REDUCE_MEAN;
    case BlockReduce::kMax:
      return v1::BLOCK_REDUCE_MAX;
  }
  return v1::BLOCK_REDUCE_UNSPECIFIED;
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

void ToProto(const SessionConfig& config, v1::SessionConfig* out) {
  out->Clear();
  v1::Shape* shape = out->mutable_shape();
  shape->set_layers(config.shape.layers);
  shape->set_kv_heads(config.shape.kv_heads);
  shape->set_q_heads(config.shape.q_heads);
  shape->set_head_dim(config.shape.head_dim);
  shape->set_element_type(ToProto(config.shape.element_type));
  shape->set_sketch_dim(config.shape.sketch_dim);
  shape->set_query_form(config.shape.query_form == QueryForm::kGroupSum
                            ? v1::QUERY_FORM_GROUP_SUM
                            : v1::QUERY_FORM_PER_HEAD);
  out->set_budget(config.budget);
  out->set_ranking(ToProto(config.ranking));
  out->set_budget_control(ToProto(config.budget_control));
  v1::AffinityParams* affinity = out->mutable_affinity();
  affinity->set_update(ToProto(config.affinity.update));
  affinity->set_beta(config.affinity.beta);
  affinity->set_lambda(config.affinity.lambda);
  v1::EntropyBudgetParams* eb = out->mutable_entropy_budget();
  eb->set_gamma(config.entropy_budget.gamma);
  eb->set_ema_rate(config.entropy_budget.ema_rate);
  eb->set_epsilon(config.entropy_budget.epsilon);
  eb->set_min_budget(config.entropy_budget.min_budget);
  eb->set_max_budget(config.entropy_budget.max_budget);
  out->mutable_h2o()->set_recent_fraction(config.h2o.recent_fraction);
  out->mutable_expected()->set_ema_rate(config.expected.ema_rate);
  out->mutable_birth()->set_weight(config.birth.weight);
  out->mutable_threshold()->set_tau(config.threshold.tau);
  out->mutable_rkv()->set_lambda(config.rkv.lambda);
  out->mutable_rkv()->set_sample(config.rkv.sample);
  // The tier only when it differs from the default (no tier, default
  // margin and promotions): a session without one is then written as before
  // the tier existed, byte for byte, and the reader's defaults equal it.
  const TierParams no_tier;
  if (config.tier.capacity != no_tier.capacity ||
      config.tier.promote_margin != no_tier.promote_margin ||
      config.tier.max_promotions != no_tier.max_promotions) {
    v1::TierParams* tier = out->mutable_tier();
    tier->set_capacity(config.tier.capacity);
    tier->set_promote_margin(config.tier.promote_margin);
    tier->set_max_promotions(config.tier.max_promotions);
  }
  out->set_streaming_sinks(config.streaming_sinks);
  out->set_seed(config.seed);
  out->mutable_protection()->set_sinks(config.protection.sinks);
  out->mutable_protection()->set_recent(config.protection.recent);
  out->set_block_size(config.block_size);
  out->set_block_reduce(ToProto(config.block_reduce));
  out->set_placement(ToProto(config.placement));
  out->set_policy(PolicyName(config));
  out->set_block_summary(config.block_summary);
  out->set_decide_every(config.decide_every);
  out->set_hard_ceiling(config.hard_ceiling);
  out->mutable_scored_layers()->Add(config.scored_layers.begin(),
                                    config.scored_layers.end());
  out->set_projection_seed(config.projection_seed);
}

void ToProto(const SessionStats& stats, v1::SessionStats* out) {
  out->Clear();
  out->set_live(stats.live);
  out->set_peak_live(stats.peak_live);
  out->set_budget(stats.budget);
  out->set_steps(stats.steps);
  if (stats.last_step.has_value()) out->set_last_step(*stats.last_step);
  out->set_appended(stats.appended);
  out->set_evicted(stats.evicted);
  out->set_bytes_held(stats.bytes_held);
  out->set_placement(ToProto(stats.placement));
  // Zero without a tier, so absent on the wire (proto3 scalars).
  out->set_tier_held(stats.tier_held);
  out->set_demoted(stats.demoted);
  out->set_promoted(stats.promoted);
}

}  // namespace entrokv::proto
