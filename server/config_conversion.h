// Conversions between the wire messages (entrokv.v1) and core's plain structs.
//
// FromProto() turns a v1::SessionConfig into an entrokv::SessionConfig: absent
// fields and *_UNSPECIFIED enums take core's defaults; an enum value this
// build does not know, or a `policy` name that conflicts with `ranking` /
// `budget_control`, is InvalidArgument naming the field ("config.ranking:
// ..."). Range checks are core's (ValidateSessionConfig), not repeated here.
// ToProto() writes every field explicitly (the effective configuration).
// Pure functions, thread-safe.

#ifndef ENTROKV_SERVER_CONFIG_CONVERSION_H_
#define ENTROKV_SERVER_CONFIG_CONVERSION_H_

#include "absl/status/status.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "entrokv/v1/entrokv.pb.h"

namespace entrokv::server {

// REQUIRES: out != nullptr. On error `out` may be partly written.
absl::Status FromProto(const v1::SessionConfig& proto, SessionConfig* out);

void ToProto(const SessionConfig& config, v1::SessionConfig* out);
void ToProto(const SessionStats& stats, v1::SessionStats* out);

v1::ElementType ToProto(ElementType type);
v1::Ranking ToProto(Ranking ranking);
v1::BudgetControl ToProto(BudgetControl control);
v1::AffinityUpdate ToProto(AffinityUpdate update);
v1::BlockReduce ToProto(BlockReduce reduce);
v1::Placement ToProto(Placement placement);

}  // namespace entrokv::server

#endif  // ENTROKV_SERVER_CONFIG_CONVERSION_H_
