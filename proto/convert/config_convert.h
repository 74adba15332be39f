// Conversions between core's plain structs (SessionConfig, SessionStats and
// their enums) and the wire messages (entrokv.v1). The one place both the
// server and the client library translate them, so the two sides cannot drift.
//
// FromProto() reads a message: absent fields and *_UNSPECIFIED enums take
// core's defaults; an enum value this build does not know, or a `policy` name
// that conflicts with `ranking` / `budget_control`, is InvalidArgument naming
// the field ("config.ranking: ..."). Range checks are core's
// (ValidateSessionConfig), not repeated here. ToProto() clears the message and
// writes every field explicitly (no UNSPECIFIED), so the reader applies exactly
// this configuration; the one exception is `tier`, written only when it
// differs from the default (no tier), so that a session without a demote
// tier is written byte for byte as before the tier existed (the reader's
// defaults are the same configuration). Pure functions, thread-safe.

#ifndef ENTROKV_PROTO_CONVERT_CONFIG_CONVERT_H_
#define ENTROKV_PROTO_CONVERT_CONFIG_CONVERT_H_

#include "absl/status/status.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "entrokv/v1/entrokv.pb.h"

namespace entrokv::proto {

// REQUIRES: out != nullptr. On error `out` is unchanged.
absl::Status FromProto(const v1::SessionConfig& proto, SessionConfig* out);
absl::Status FromProto(const v1::SessionStats& proto, SessionStats* out);

void ToProto(const SessionConfig& config, v1::SessionConfig* out);
void ToProto(const SessionStats& stats, v1::SessionStats* out);

v1::ElementType ToProto(ElementType type);
v1::Ranking ToProto(Ranking ranking);
v1::BudgetControl ToProto(BudgetControl control);
v1::AffinityUpdate ToProto(AffinityUpdate update);
v1::BlockReduce ToProto(BlockReduce reduce);
v1::Placement ToProto(Placement placement);

}  // namespace entrokv::proto

#endif  // ENTROKV_PROTO_CONVERT_CONFIG_CONVERT_H_
