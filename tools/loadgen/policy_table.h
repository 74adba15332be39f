// The load generator's table of policies (--shadows): what the server
// measured of the sessions' own policy, each shadow policy and the oracle,
// over every session of the run (proto's ShadowStats, one per session, read
// with GetSession before each session closes). Pure functions.
//
// Over sessions: recall and Jaccard are means weighted by each session's
// scored steps; p10 is the mean of the sessions' p10s; min is the lowest
// session's min. "vs session" is the row's mean recall less the session's
// own policy's: what switching to it would have kept of the attention mass.

#ifndef ENTROKV_TOOLS_LOADGEN_POLICY_TABLE_H_
#define ENTROKV_TOOLS_LOADGEN_POLICY_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "entrokv/core/shadow.h"

namespace entrokv::loadgen {

struct PolicyRow {
  std::string role;    // "session", "shadow" or "oracle".
  std::string policy;  // Canonical name.
  int64_t budget = 0;  // Configured (the oracle: the session's).
  int sessions = 0;    // Sessions that reported it.
  int64_t steps = 0;   // Steps scored, all sessions together.
  double mean = 0.0, p10 = 0.0, min = 0.0;
  double vs_session = 0.0;  // mean - the session row's mean.
  double jaccard = 0.0;     // With the session's live set.
  int stopped = 0;          // Sessions where the shadow stopped (an error).
  std::string error;        // The first such error.
};

// One row for the session's policy, one per shadow (in request order) and
// one for the oracle. REQUIRES: every element has the same shadows in the
// same order (one run's sessions). Empty input: no rows.
std::vector<PolicyRow> SummarizePolicies(const std::vector<ShadowStats>& stats);

// The table as text (empty for no rows) and as a JSON array.
std::string PolicyTableText(const std::vector<PolicyRow>& rows);
std::string PolicyTableJson(const std::vector<PolicyRow>& rows);

}  // namespace entrokv::loadgen

#endif  // ENTROKV_TOOLS_LOADGEN_POLICY_TABLE_H_
