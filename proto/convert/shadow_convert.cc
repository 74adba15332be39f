#include "proto/convert/shadow_convert.h"

#include <string>

#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "proto/convert/config_convert.h"

namespace entrokv::proto {
namespace {

// "config.policy: ..." (FromProto's naming for the session's own config) as
// "<at>.policy: ...".
absl::Status Renamed(absl::string_view at, const absl::Status& status) {
  absl::string_view message = status.message();
  absl::ConsumePrefix(&message, "config.");
  return absl::Status(status.code(), absl::StrCat(at, ".", message));
}

void SummaryToProto(const RecallSummary& in, v1::RecallSummary* out) {
  out->set_steps(in.steps);
  out->set_mean(in.mean);
  out->set_p10(in.p10);
  out->set_min(in.min);
}

void ReportToProto(const PolicyReport& in, v1::PolicyReport* out) {
  out->set_policy(in.policy);
  ToProto(in.config, out->mutable_config());
  SummaryToProto(in.recall, out->mutable_recall());
  out->set_mean_jaccard(in.mean_jaccard);
  out->set_live(in.live);
  if (!in.status.ok()) {
    out->mutable_status()->set_code(static_cast<int32_t>(in.status.code()));
    out->mutable_status()->set_message(std::string(in.status.message()));
  }
}

absl::Status ReportFromProto(const v1::PolicyReport& in, absl::string_view at,
                             PolicyReport* out) {
  PolicyReport report;
  if (absl::Status s = FromProto(in.config(), &report.config); !s.ok()) {
    return Renamed(at, s);
  }
  report.policy = in.policy();
  report.recall.steps = in.recall().steps();
  report.recall.mean = in.recall().mean();
  report.recall.p10 = in.recall().p10();
  report.recall.min = in.recall().min();
  report.mean_jaccard = in.mean_jaccard();
  report.live = in.live();
  if (in.status().code() != 0) {
    report.status = absl::Status(
        static_cast<absl::StatusCode>(in.status().code()), in.status().message());
  }
  *out = std::move(report);
  return absl::OkStatus();
}

}  // namespace

absl::Status FromProto(const v1::Shadowing& proto,
                       const SessionConfig& primary, ShadowRequest* out) {
  ShadowRequest request;
  for (int i = 0; i < proto.policies_size(); ++i) {
    const v1::SessionConfig& p = proto.policies(i);
    SessionConfig c;
    if (absl::Status s = FromProto(p, &c); !s.ok()) {
      return Renamed(absl::StrCat("shadowing.policies[", i, "]"), s);
    }
    if (!p.has_shape()) c.shape = primary.shape;
    if (!p.has_decide_every()) c.decide_every = primary.decide_every;
    if (!p.has_hard_ceiling()) c.hard_ceiling = primary.hard_ceiling;
    c.scored_layers = primary.scored_layers;
    c.projection_seed = primary.projection_seed;
    c.placement = Placement::kCpu;
    request.policies.push_back(std::move(c));
  }
  if (proto.has_score_every()) request.score_every = proto.score_every();
  if (proto.has_max_reference_entries()) {
    request.max_reference_entries = proto.max_reference_entries();
  }
  *out = std::move(request);
  return absl::OkStatus();
}

void ToProto(const ShadowRequest& request, v1::Shadowing* out) {
  out->Clear();
  for (const SessionConfig& c : request.policies) {
    v1::SessionConfig* p = out->add_policies();
    ToProto(c, p);
    p->clear_shape();
    p->clear_decide_every();
    p->clear_hard_ceiling();
    p->clear_scored_layers();
    p->clear_projection_seed();
    p->clear_placement();
  }
  out->set_score_every(request.score_every);
  out->set_max_reference_entries(request.max_reference_entries);
}

void ToProto(const ShadowStats& stats, v1::ShadowStats* out) {
  out->Clear();
  ReportToProto(stats.primary, out->mutable_primary());
  ReportToProto(stats.oracle, out->mutable_oracle());
  for (const PolicyReport& r : stats.shadows) {
    ReportToProto(r, out->add_shadows());
  }
  out->set_reference_entries(stats.reference_entries);
  out->set_reference_capacity(stats.reference_capacity);
  out->set_reference_bytes(stats.reference_bytes);
  out->set_reference_full(stats.reference_full);
  out->set_steps_observed(stats.steps_observed);
  out->set_score_every(stats.score_every);
  out->set_bytes_held(stats.bytes_held);
}

absl::Status FromProto(const v1::ShadowStats& proto, ShadowStats* out) {
  ShadowStats stats;
  if (absl::Status s = ReportFromProto(proto.primary(), "shadows.primary",
                                       &stats.primary);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ReportFromProto(proto.oracle(), "shadows.oracle", &stats.oracle);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < proto.shadows_size(); ++i) {
    PolicyReport r;
    if (absl::Status s = ReportFromProto(
            proto.shadows(i), absl::StrCat("shadows.shadows[", i, "]"), &r);
        !s.ok()) {
      return s;
    }
    stats.shadows.push_back(std::move(r));
  }
  stats.reference_entries = proto.reference_entries();
  stats.reference_capacity = proto.reference_capacity();
  stats.reference_bytes = proto.reference_bytes();
  stats.reference_full = proto.reference_full();
  stats.steps_observed = proto.steps_observed();
  stats.score_every = proto.score_every();
  stats.bytes_held = proto.bytes_held();
  *out = std::move(stats);
  return absl::OkStatus();
}

}  // namespace entrokv::proto
