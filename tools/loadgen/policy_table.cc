#include "policy_table.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace entrokv::loadgen {
namespace {

// Accumulates one policy's reports over sessions.
struct Accumulator {
  PolicyRow row;
  double recall_sum = 0.0;   // mean x steps.
  double jaccard_sum = 0.0;  // mean_jaccard x steps.
  double p10_sum = 0.0;
  int scored_sessions = 0;

  void Add(const PolicyReport& r) {
    ++row.sessions;
    if (!r.status.ok()) {
      if (row.stopped++ == 0) row.error = r.status.ToString();
    }
    if (r.recall.steps == 0) return;
    row.steps += r.recall.steps;
    recall_sum += r.recall.mean * static_cast<double>(r.recall.steps);
    jaccard_sum += r.mean_jaccard * static_cast<double>(r.recall.steps);
    p10_sum += r.recall.p10;
    row.min = scored_sessions++ == 0 ? r.recall.min
                                     : std::min(row.min, r.recall.min);
  }

  PolicyRow Finish() const {
    PolicyRow out = row;
    if (out.steps > 0) {
      out.mean = recall_sum / static_cast<double>(out.steps);
      out.jaccard = jaccard_sum / static_cast<double>(out.steps);
      out.p10 = p10_sum / scored_sessions;
    }
    return out;
  }
};

Accumulator Start(const std::string& role, const PolicyReport& first) {
  Accumulator a;
  a.row.role = role;
  a.row.policy = first.policy;
  a.row.budget = first.config.budget;
  return a;
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::vector<PolicyRow> SummarizePolicies(
    const std::vector<ShadowStats>& stats) {
  if (stats.empty()) return {};
  std::vector<Accumulator> rows;
  rows.push_back(Start("session", stats[0].primary));
  for (const PolicyReport& r : stats[0].shadows) {
    rows.push_back(Start("shadow", r));
  }
  rows.push_back(Start("oracle", stats[0].oracle));
  for (const ShadowStats& s : stats) {
    rows.front().Add(s.primary);
    for (size_t i = 0; i < s.shadows.size() && i + 2 < rows.size(); ++i) {
      rows[i + 1].Add(s.shadows[i]);
    }
    rows.back().Add(s.oracle);
  }
  std::vector<PolicyRow> out;
  for (const Accumulator& a : rows) out.push_back(a.Finish());
  for (PolicyRow& r : out) r.vs_session = r.mean - out.front().mean;
  out.back().jaccard = 0.0;  // The oracle's set is not kept.
  return out;
}

std::string PolicyTableText(const std::vector<PolicyRow>& rows) {
  if (rows.empty()) return "";
  std::string out = absl::StrFormat(
      "\npolicies: attention recall (share of each scored step's attention "
      "mass the live set holds) over %d sessions: mean over all scored steps, "
      "p10 averaged over sessions, min the lowest; "
      "docs/choosing-a-policy.md\n"
      "%-8s %-20s %8s %8s %8s %8s %8s %11s %8s\n",
      rows.front().sessions, "role", "policy", "budget", "steps", "mean",
      "p10", "min", "vs session", "jaccard");
  for (const PolicyRow& r : rows) {
    const std::string vs = r.role == "session"
                               ? std::string("-")
                               : absl::StrFormat("%+.4f", r.vs_session);
    const std::string jaccard = r.role == "oracle"
                                    ? std::string("-")
                                    : absl::StrFormat("%.3f", r.jaccard);
    absl::StrAppendFormat(&out, "%-8s %-20s %8d %8d %8.4f %8.4f %8.4f %11s %8s",
                          r.role, r.policy, r.budget, r.steps, r.mean, r.p10,
                          r.min, vs, jaccard);
    if (r.stopped > 0) {
      absl::StrAppendFormat(&out, "  stopped in %d sessions: %s", r.stopped,
                            r.error);
    }
    out += "\n";
  }
  return out;
}

std::string PolicyTableJson(const std::vector<PolicyRow>& rows) {
  std::vector<std::string> parts;
  for (const PolicyRow& r : rows) {
    parts.push_back(absl::StrFormat(
        "{\"role\": %s, \"policy\": %s, \"budget\": %d, \"sessions\": %d, "
        "\"steps\": %d, \"recall_mean\": %.6f, \"recall_p10\": %.6f, "
        "\"recall_min\": %.6f, \"vs_session\": %.6f, \"jaccard\": %s, "
        "\"stopped\": %d, \"error\": %s}",
        JsonString(r.role), JsonString(r.policy), r.budget, r.sessions,
        r.steps, r.mean, r.p10, r.min, r.vs_session,
        // The oracle's set is not kept, so it has no Jaccard.
        r.role == "oracle" ? std::string("null")
                           : absl::StrFormat("%.6f", r.jaccard),
        r.stopped, JsonString(r.error)));
  }
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

}  // namespace entrokv::loadgen
