#include "simulation.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/metrics.h"
#include "entrokv/core/session.h"
#include "entrokv/core/sketch.h"
#include "entrokv/core/status_macros.h"
#include "eval/lib/budget_search.h"
#include "eval/lib/interpolate.h"
#include "eval/lib/overlap.h"

namespace entrokv::sim {

SessionConfig SessionFor(const RunOptions& options) {
  SessionConfig config = options.session;
  const Shape& wanted = options.session.shape;
  config.shape = options.stream.shape;
  config.shape.sketch_dim = wanted.sketch_dim;
  config.shape.query_form = wanted.query_form;
  if (!config.scored_layers.empty()) {
    config.shape.layers = static_cast<int32_t>(config.scored_layers.size());
  }
  return config;
}

absl::StatusOr<RunResult> Run(const RunOptions& options) {
  ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                           CreateBackend(BackendKind::kCpu));
  const SessionConfig config = SessionFor(options);
  for (const int32_t l : config.scored_layers) {
    if (l >= options.stream.shape.layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("scored_layers: layer ", l, " is beyond the stream's ",
                       options.stream.shape.layers, " layers"));
    }
  }
  ENTROKV_ASSIGN_OR_RETURN(std::unique_ptr<SessionState> session,
                           backend->CreateSession(config, {}));
  ENTROKV_ASSIGN_OR_RETURN(const Sketcher sketcher, Sketcher::Create(config));
  // The stream produces what an engine holds: every layer, full head_dim,
  // one query per q head. The metric reads those; core gets the session's
  // wire form (scored layers, sketched, group-summed).
  SyntheticParams stream_params = options.stream;
  Shape& full = stream_params.shape;
  full.sketch_dim = 0;
  full.query_form = QueryForm::kPerHead;
  SyntheticStream stream(stream_params);
  const ElementType type = full.element_type;
  const int64_t per_entry = full.key_elements();
  const size_t esize = ElementSize(type);

  RunResult out;
  std::vector<float> keys, values;  // Every entry ever appended (floats).
  std::vector<uint8_t> live;
  SyntheticStep step;
  std::vector<std::byte> scratch(std::max(per_entry, full.query_elements()) *
                                 esize);
  std::vector<float> rounded_key(per_entry),
      rounded_query(full.query_elements());
  std::vector<float> selected, wire;
  std::vector<std::byte> key_bytes, query_bytes;
  auto round = [&](const std::vector<float>& in, std::vector<float>* rounded) {
    EncodeElements(type, in.data(), in.size(), scratch.data());
    DecodeElements(type, scratch.data(), in.size(), rounded->data());
  };
  auto encode = [&](const std::vector<float>& in,
                    std::vector<std::byte>* bytes) {
    bytes->resize(in.size() * esize);
    EncodeElements(type, in.data(), in.size(), bytes->data());
  };
  StepResult result;
  double live_sum = 0.0;
  for (int64_t t = 0; t < options.steps; ++t) {
    stream.Next(&step);
    // The engine holds keys and queries rounded to the element type; what it
    // sends is derived from those.
    round(step.key, &rounded_key);
    round(step.query, &rounded_query);
    ENTROKV_RETURN_IF_ERROR(SelectScoredLayers(
        config.scored_layers, int64_t{full.kv_heads} * full.head_dim,
        rounded_key, &selected));
    sketcher.Keys(selected, 1, &wire);
    encode(wire, &key_bytes);
    ENTROKV_RETURN_IF_ERROR(SelectScoredLayers(
        config.scored_layers, int64_t{full.q_heads} * full.head_dim,
        rounded_query, &selected));
    sketcher.Queries(selected, &wire);
    encode(wire, &query_bytes);
    const uint64_t slot = static_cast<uint64_t>(t);
    StepInput input;
    input.step = static_cast<uint64_t>(t);
    input.append.slot_ids = absl::MakeConstSpan(&slot, 1);
    input.append.keys = key_bytes;
    input.queries = query_bytes;
    input.entropy = step.entropy;
    ENTROKV_RETURN_IF_ERROR(session->Step(input, &result));
    keys.insert(keys.end(), rounded_key.begin(), rounded_key.end());
    values.insert(values.end(), step.value.begin(), step.value.end());
    live.push_back(1);
    for (uint64_t id : result.evicted) {
      live[id] = 0;
      out.evicted.push_back(id);
      out.evicted_step.push_back(t);
    }
    live_sum += static_cast<double>(result.live);
    out.peak_live = std::max(out.peak_live, result.live);
    if (options.quality) {
      const QualityMetrics q =
          ComputeQuality(full, keys, values, rounded_query, live);
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

// The mean live of `*o`'s run at a budget (which it sets in o->session).
eval::MeanLiveAt MeanLiveOf(RunOptions* o) {
  return [o](int64_t budget) -> absl::StatusOr<double> {
    o->session.budget = budget;
    ENTROKV_ASSIGN_OR_RETURN(RunResult r, Run(*o));
    return r.mean_live;
  };
}

// Standard error of the mean of `e` by batch means (√n batches of √n
// steps): the per-step errors are autocorrelated over a topic's dwell time,
// so consecutive steps are not independent.
double BatchMeansStandardError(const std::vector<double>& e) {
  const size_t batches = std::max<size_t>(
      4, static_cast<size_t>(std::sqrt(static_cast<double>(e.size()))));
  const size_t len = std::max<size_t>(1, e.size() / batches);
  std::vector<double> means;
  for (size_t b = 0; b + len <= e.size() && means.size() < batches; b += len) {
    means.push_back(std::accumulate(e.begin() + b, e.begin() + b + len, 0.0) /
                    static_cast<double>(len));
  }
  const Summary bm = Summarize(means);
  return std::sqrt(bm.variance / static_cast<double>(means.size()));
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
    check.means.push_back(Summarize(r.memory_error).mean);
    check.standard_errors.push_back(BatchMeansStandardError(r.memory_error));
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
      // A threshold's tau is on its ranking's scale: not in the sweep.
      if (c == BudgetControl::kThreshold) continue;
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
    if (base.session.shape.query_form == QueryForm::kGroupSum &&
        RankingNeedsPerHeadQueries(v.ranking)) {
      continue;
    }
    RunOptions o = base;
    o.session.ranking = v.ranking;
    o.session.budget_control = v.control;
    o.session.affinity.update = v.update;
    o.quality = false;
    // Bisection on the nominal budget: mean live grows with it.
    const int64_t lo = MinBudget(o.session);
    const int64_t hi =
        std::max<int64_t>(lo + 1, static_cast<int64_t>(4 * target));
    ENTROKV_ASSIGN_OR_RETURN(
        const int64_t best,
        eval::BisectNearestBudget(target, lo, hi, MeanLiveOf(&o)));
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

absl::StatusOr<Calibration> Calibrate(const RunOptions& options,
                                      double target) {
  RunOptions o = options;
  o.quality = false;
  const eval::MeanLiveAt mean_live_at = MeanLiveOf(&o);
  // Mean live grows with the budget; at `steps` nothing is ever evicted.
  const int64_t min_budget = MinBudget(o.session);
  const int64_t max_budget = std::max(o.steps, min_budget + 1);
  Calibration c;
  // Both ends first; when they bracket the target, bisection between them
  // (no secant step, no hit) to the adjacent pair with
  // mean(lo) <= target < mean(hi).
  ENTROKV_ASSIGN_OR_RETURN(const double at_min, mean_live_at(min_budget));
  ENTROKV_ASSIGN_OR_RETURN(const double at_max, mean_live_at(max_budget));
  if (at_min > target || at_max <= target) return c;
  std::map<int64_t, double> known = {{min_budget, at_min},
                                     {max_budget, at_max}};
  ENTROKV_ASSIGN_OR_RETURN(const eval::BudgetSearchResult found,
                           eval::SearchBudget({.target = target,
                                               .tolerance = -1.0,
                                               .min_budget = min_budget,
                                               .max_budget = max_budget,
                                               .secant_iterations = 0},
                                              mean_live_at, &known));
  if (!found.found()) return c;
  const int64_t lo = found.lo, hi = found.hi;
  o.quality = true;
  o.session.budget = lo;
  ENTROKV_ASSIGN_OR_RETURN(c.lo, Run(o));
  o.session.budget = hi;
  ENTROKV_ASSIGN_OR_RETURN(c.hi, Run(o));
  c.found = true;
  c.lo_budget = lo;
  c.hi_budget = hi;
  const double w =
      eval::InterpolationWeight(c.lo.mean_live, c.hi.mean_live, target);
  c.memory_error = eval::LerpEach(c.lo.memory_error, c.hi.memory_error, w);
  c.mean_error = Summarize(c.memory_error).mean;
  c.recall =
      eval::Lerp(Summarize(c.lo.recall).mean, Summarize(c.hi.recall).mean, w);
  return c;
}

absl::StatusOr<FidelityRow> MeasureFidelity(const RunOptions& variant,
                                            double target) {
  RunOptions exact = variant;
  exact.session = ExactScoring(variant.session);
  return MeasureFidelity(exact, variant, target);
}

absl::StatusOr<FidelityRow> MeasureFidelity(const RunOptions& exact,
                                            const RunOptions& variant,
                                            double target) {
  FidelityRow row;
  row.policy = PolicyName(variant.session);
  row.variant = VariantName(variant.session);
  row.target_mean_live = target;
  ENTROKV_ASSIGN_OR_RETURN(row.exact, Calibrate(exact, target));
  ENTROKV_ASSIGN_OR_RETURN(row.cheap, Calibrate(variant, target));
  if (!row.exact.found || !row.cheap.found) return row;
  std::vector<double> diff(row.exact.memory_error.size());
  for (size_t t = 0; t < diff.size(); ++t) {
    diff[t] = row.cheap.memory_error[t] - row.exact.memory_error[t];
  }
  row.diff_pct = 100.0 * (row.cheap.mean_error / row.exact.mean_error - 1.0);
  row.diff_se_pct =
      100.0 * BatchMeansStandardError(diff) / row.exact.mean_error;

  const bool lo_nearer = eval::LowerIsNearer(row.exact.lo.mean_live,
                                             row.exact.hi.mean_live, target);
  row.same_budget = lo_nearer ? row.exact.lo_budget : row.exact.hi_budget;
  const RunResult& a = lo_nearer ? row.exact.lo : row.exact.hi;
  RunOptions o = variant;
  o.quality = false;
  o.session.budget = row.same_budget;
  ENTROKV_ASSIGN_OR_RETURN(const RunResult b, Run(o));
  // Step at which each entry was evicted (steps: never).
  auto evicted_at = [&](const RunResult& r) {
    std::vector<int64_t> at(static_cast<size_t>(o.steps), o.steps);
    for (size_t k = 0; k < r.evicted.size(); ++k) {
      at[r.evicted[k]] = r.evicted_step[k];
    }
    return at;
  };
  const std::vector<int64_t> x = evicted_at(a), y = evicted_at(b);
  row.evicted_jaccard = eval::EvictedSetJaccard(x, y, o.steps);
  double sum = 0.0;
  eval::AddLiveSetJaccards(x, y, &sum);
  row.live_jaccard = o.steps > 0 ? sum / static_cast<double>(o.steps) : 0.0;
  return row;
}

}  // namespace entrokv::sim
