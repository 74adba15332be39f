#include "simulation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/metrics.h"
#include "entrokv/core/session.h"
#include "entrokv/core/status_macros.h"

namespace entrokv::sim {

absl::StatusOr<RunResult> Run(const RunOptions& options) {
  ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                           CreateBackend(BackendKind::kCpu));
  SessionConfig config = options.session;
  config.shape = options.stream.shape;
  ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<SessionState> session,
                           backend->CreateSession(config, {}));
  SyntheticStream stream(options.stream);
  const Shape& shape = config.shape;
  const int64_t per_entry = shape.key_elements();
  const size_t esize = ElementSize(shape.element_type);

  RunResult out;
  std::vector<float> keys, values;  // Every entry ever appended (floats).
  std::vector<uint8_t> live;
  SyntheticStep step;
  std::vector<std::byte> key_bytes(per_entry * esize);
  std::vector<std::byte> query_bytes(shape.query_elements() * esize);
  std::vector<float> rounded_key(per_entry),
      rounded_query(shape.query_elements());
  StepResult result;
  double live_sum = 0.0;
  for (int64_t t = 0; t < options.steps; ++t) {
    stream.Next(&step);
    EncodeElements(shape.element_type, step.key.data(), per_entry,
                   key_bytes.data());
    EncodeElements(shape.element_type, step.query.data(), step.query.size(),
                   query_bytes.data());
    const uint64_t slot = static_cast<uint64_t>(t);
    StepInput input;
    input.step = static_cast<uint64_t>(t);
    input.append.slot_ids = absl::MakeConstSpan(&slot, 1);
    input.append.keys = key_bytes;
    input.queries = query_bytes;
    input.entropy = step.entropy;
    ENTROKV_RETURN_IF_ERROR(session->Step(input, &result));
    // The metric sees what the engine has: keys as rounded to the element type.
    DecodeElements(shape.element_type, key_bytes.data(), per_entry,
                   rounded_key.data());
    keys.insert(keys.end(), rounded_key.begin(), rounded_key.end());
    values.insert(values.end(), step.value.begin(), step.value.end());
    live.push_back(1);
    for (uint64_t id : result.evicted) {
      live[id] = 0;
      out.evicted.push_back(id);
    }
    live_sum += static_cast<double>(result.live);
    out.peak_live = std::max(out.peak_live, result.live);
    if (options.quality) {
      DecodeElements(shape.element_type, query_bytes.data(),
                     rounded_query.size(), rounded_query.data());
      const QualityMetrics q =
          ComputeQuality(shape, keys, values, rounded_query, live);
      out.memory_error.push_back(q.memory_error);
      out.recall.push_back(q.attention_recall);
      out.first_order_error.push_back(q.first_order_error);
    }
  }
  out.mean_live = options.steps > 0 ? live_sum / options.steps : 0.0;
  return out;
}

Summary Summarize(const std::vector<double>& v) {
  Summary s;
  if (v.empty()) return s;
  const double n = static_cast<double>(v.size());
  s.mean = std::accumulate(v.begin(), v.end(), 0.0) / n;
  double ss = 0.0, lag = 0.0;
  for (size_t i = 0; i < v.size(); ++i) {
    ss += (v[i] - s.mean) * (v[i] - s.mean);
    if (i > 0) lag += (v[i] - s.mean) * (v[i - 1] - s.mean);
  }
  s.variance = v.size() > 1 ? ss / (n - 1.0) : 0.0;
  s.lag1 = ss > 0.0 ? lag / ss : 0.0;
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  s.min = *lo;
  s.max = *hi;
  std::vector<double> sorted = v;
  const size_t k = static_cast<size_t>(std::ceil(0.95 * n)) - 1;
  std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end());
  s.p95 = sorted[k];
  return s;
}

Audit MakeAudit(const RunResult& run) {
  Audit a;
  a.error = Summarize(run.memory_error);
  a.analytical_mean = Summarize(run.first_order_error).mean;
  a.divergence =
      a.error.mean > 0.0
          ? std::fabs(a.analytical_mean - a.error.mean) / a.error.mean
          : 0.0;
  return a;
}

namespace {

// Upper quantile of chi-square with k degrees of freedom at p = 0.001, by the
// Wilson–Hilferty approximation (z = 3.0902).
double ChiSquareCritical(int k) {
  const double z = 3.090232;
  const double c = 2.0 / (9.0 * k);
  const double t = 1.0 - c + z * std::sqrt(c);
  return k * t * t * t;
}

}  // namespace

absl::StatusOr<SanityCheck> RunSanityCheck(const RunOptions& options,
                                           const std::vector<uint64_t>& seeds) {
  SanityCheck check;
  check.seeds = seeds;
  std::vector<double> weights;
  for (uint64_t seed : seeds) {
    RunOptions o = options;
    o.stream.seed = seed;
    o.session.seed = seed;
    o.quality = true;
    ENTROKV_ASSIGN_OR_RETURN(RunResult r, Run(o));
    // Standard error by batch means: the per-step errors are autocorrelated
    // over a topic's dwell time, so consecutive steps are not independent.
    const std::vector<double>& e = r.memory_error;
    const size_t batches = std::max<size_t>(
        4, static_cast<size_t>(std::sqrt(static_cast<double>(e.size()))));
    const size_t len = std::max<size_t>(1, e.size() / batches);
    std::vector<double> means;
    for (size_t b = 0; b + len <= e.size() && means.size() < batches;
         b += len) {
      means.push_back(std::accumulate(e.begin() + b, e.begin() + b + len, 0.0) /
                      static_cast<double>(len));
    }
    const Summary bm = Summarize(means);
    check.means.push_back(Summarize(e).mean);
    check.standard_errors.push_back(
        std::sqrt(bm.variance / static_cast<double>(means.size())));
  }
  double wsum = 0.0, wmean = 0.0;
  for (size_t k = 0; k < seeds.size(); ++k) {
    const double w =
        1.0 /
        std::max(check.standard_errors[k] * check.standard_errors[k], 1e-30);
    wsum += w;
    wmean += w * check.means[k];
  }
  wmean /= wsum;
  for (size_t k = 0; k < seeds.size(); ++k) {
    const double d =
        (check.means[k] - wmean) / std::max(check.standard_errors[k], 1e-15);
    check.chi_square += d * d;
  }
  check.degrees_of_freedom = static_cast<int>(seeds.size()) - 1;
  check.critical = check.degrees_of_freedom > 0
                       ? ChiSquareCritical(check.degrees_of_freedom)
                       : 0.0;
  check.passed =
      check.degrees_of_freedom > 0 && check.chi_square <= check.critical;
  return check;
}

absl::StatusOr<std::vector<ComparisonRow>> Compare(const RunOptions& base,
                                                   double target) {
  struct Variant {
    Ranking ranking;
    BudgetControl control;
    AffinityUpdate update;
  };
  std::vector<Variant> variants;
  for (Ranking r : kAllRankings) {
    for (BudgetControl c : kAllBudgetControls) {
      variants.push_back({r, c, base.session.affinity.update});
      if (r == Ranking::kAffinity) {
        const AffinityUpdate other =
            base.session.affinity.update == AffinityUpdate::kSeed
                ? AffinityUpdate::kLogitEma
                : AffinityUpdate::kSeed;
        variants.push_back({r, c, other});
      }
    }
  }
  std::vector<ComparisonRow> rows;
  for (const Variant& v : variants) {
    RunOptions o = base;
    o.session.ranking = v.ranking;
    o.session.budget_control = v.control;
    o.session.affinity.update = v.update;
    o.quality = false;
    // Bisection on the nominal budget: mean live grows with it.
    auto mean_live_at = [&](int64_t b) -> absl::StatusOr<double> {
      o.session.budget = b;
      ENTROKV_ASSIGN_OR_RETURN(RunResult r, Run(o));
      return r.mean_live;
    };
    int64_t lo = 1, hi = std::max<int64_t>(2, static_cast<int64_t>(4 * target));
    int64_t best = lo;
    double best_gap = INFINITY;
    while (lo <= hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      ENTROKV_ASSIGN_OR_RETURN(double m, mean_live_at(mid));
      if (std::fabs(m - target) < best_gap) {
        best_gap = std::fabs(m - target);
        best = mid;
      }
      if (m < target) {
        lo = mid + 1;
      } else {
        hi = mid - 1;
      }
    }
    o.session.budget = best;
    o.quality = true;
    ENTROKV_ASSIGN_OR_RETURN(RunResult r, Run(o));
    const Summary err = Summarize(r.memory_error);
    ComparisonRow row;
    row.policy = PolicyName(o.session);
    if (v.ranking == Ranking::kAffinity) {
      absl::StrAppend(&row.policy, " (",
                      std::string(AffinityUpdateName(v.update)), ")");
    }
    row.nominal_budget = best;
    row.mean_error = err.mean;
    row.p95_error = err.p95;
    row.recall = Summarize(r.recall).mean;
    row.mean_live = r.mean_live;
    row.peak_live = r.peak_live;
    row.matched = std::fabs(r.mean_live - target) <= 0.01 * target;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace entrokv::sim
