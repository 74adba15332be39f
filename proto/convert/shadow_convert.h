// Conversions between core's shadowing structs (entrokv/core/shadow.h) and
// the wire's Shadowing and ShadowStats (entrokv.v1), for the server and the
// client library, as config_convert.h does for the session's own config.
// Pure functions, thread-safe.

#ifndef ENTROKV_PROTO_CONVERT_SHADOW_CONVERT_H_
#define ENTROKV_PROTO_CONVERT_SHADOW_CONVERT_H_

#include "absl/status/status.h"
#include "entrokv/core/config.h"
#include "entrokv/core/shadow.h"
#include "entrokv/v1/entrokv.pb.h"

namespace entrokv::proto {

// Reads a CreateSessionRequest's shadowing for a session of `primary` (its
// effective config): each policy as FromProto(SessionConfig) reads one, then
// what it must share with the session taken from `primary` where the wire
// leaves it absent (shape, decide_every, hard_ceiling) and always
// (scored_layers, projection_seed); placement is CPU. Absent score_every: 1.
// Errors: InvalidArgument naming the field
// ("shadowing.policies[1].policy: ..."). On error `out` is unchanged.
absl::Status FromProto(const v1::Shadowing& proto,
                       const SessionConfig& primary, ShadowRequest* out);
// Writes `request` for the server to read as above: each policy without
// the fields the session's own config decides (shape, decide_every,
// hard_ceiling, scored_layers, projection_seed), so that a client's shadows
// always take the session's.
void ToProto(const ShadowRequest& request, v1::Shadowing* out);

void ToProto(const ShadowStats& stats, v1::ShadowStats* out);
// Errors: those of FromProto(SessionConfig) for a report's config.
absl::Status FromProto(const v1::ShadowStats& proto, ShadowStats* out);

}  // namespace entrokv::proto

#endif  // ENTROKV_PROTO_CONVERT_SHADOW_CONVERT_H_
