// The summaries of entrokv-bench-core (summary_reporter.h).

#include "summary_reporter.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench_core.h"
#include "entrokv/core/config.h"

namespace entrokv::bench {

void SummaryReporter::ReportRuns(const std::vector<Run>& reports) {
  ConsoleReporter::ReportRuns(reports);
  for (const Run& run : reports) {
    if (run.error_occurred || run.run_type != Run::RT_Iteration) continue;
    if (run.iterations <= 0) continue;
    const double iterations = double(run.iterations);
    const double seconds_per_iter = run.real_accumulated_time / iterations;
    const double cpu_seconds_per_iter = run.cpu_accumulated_time / iterations;
    if (seconds_per_iter <= 0 || cpu_seconds_per_iter <= 0) continue;
    Entry entry{.name = run.benchmark_name(),
                .function = run.run_name.function_name,
                .args = run.run_name.args};
    entry.steps_per_iter = Counter(run, "steps_per_iter", 1.0);
    entry.s_per_step = seconds_per_iter / entry.steps_per_iter;
    entry.cpu_s_per_step = cpu_seconds_per_iter / entry.steps_per_iter;
    entry.copied_bytes_per_step = Counter(run, "copied_bytes_per_step", 0);
    if (Counter(run, "against_copy_median", -1) >= 0) {
      entry.kind = Kind::kAgainstCopy;
      entry.against_copy[0] = Counter(run, "against_copy_p25", 0);
      entry.against_copy[1] = Counter(run, "against_copy_median", 0);
      entry.against_copy[2] = Counter(run, "against_copy_p75", 0);
      entry.copy_rate = Counter(run, "copy_bytes_per_second_median", 0);
      entry.key_rate = Counter(run, "key_bytes_per_second_median", 0);
    } else if (Counter(run, "tier_capacity", -1) >= 0) {
      entry.kind = Kind::kTier;
      entry.tier_capacity = Counter(run, "tier_capacity", 0);
      entry.tier_held = Counter(run, "tier_held", 0);
      entry.demoted_per_step = Counter(run, "demoted_per_step", 0);
      entry.promoted_per_step = Counter(run, "promoted_per_step", 0);
      entry.evicted_per_step = Counter(run, "evicted_per_step", 0);
    } else if (Counter(run, "shadow_watched", -1) >= 0) {
      entry.kind = Kind::kShadow;
      entry.shadows = Counter(run, "shadow_watched", 0) > 0
                          ? static_cast<int>(Counter(run, "shadow_policies", 0))
                          : -1;
      entry.score_every = static_cast<int>(Counter(run, "score_every", 1));
      entry.reference_entries = Counter(run, "reference_entries", 0);
      entry.shadow_bytes = Counter(run, "shadow_bytes", 0);
    } else if (Counter(run, "kernel_bytes_per_iter", 0) > 0) {
      entry.kind = Kind::kKernel;
      entry.bytes_per_step = Counter(run, "kernel_bytes_per_iter", 0);
    } else if (Counter(run, "read_bytes_per_iter", 0) > 0) {
      entry.kind = Kind::kRead;
      entry.bytes_per_step = Counter(run, "read_bytes_per_iter", 0);
    } else if (Counter(run, "copy_bytes_per_iter", 0) > 0) {
      entry.kind = Kind::kCopy;
      entry.bytes_per_step = Counter(run, "copy_bytes_per_iter", 0);
    } else if (Counter(run, "wire_bytes_per_token", 0) > 0) {
      entry.kind = Kind::kModel;
      entry.bytes_per_step = Counter(run, "key_bytes_per_step", 0);
      entry.wire_bytes_per_token = Counter(run, "wire_bytes_per_token", 0);
      entry.held_bytes_per_token = Counter(run, "held_bytes_per_token", 0);
    } else if (Counter(run, "tokens_per_iter", 0) > 0) {
      entry.kind = Kind::kSketchKeys;
      entry.s_per_step /= Counter(run, "tokens_per_iter", 1);
      entry.cpu_s_per_step /= Counter(run, "tokens_per_iter", 1);
    } else if (Counter(run, "queries_per_iter", 0) > 0) {
      entry.kind = Kind::kSketchQueries;
    } else if (Counter(run, "key_bytes_per_step", 0) > 0) {
      entry.kind = Kind::kStep;
      entry.bytes_per_step = Counter(run, "key_bytes_per_step", 0);
    } else {
      continue;
    }
    auto found =
        std::find_if(entries_.begin(), entries_.end(),
                     [&](const Entry& e) { return e.name == entry.name; });
    if (found == entries_.end()) {
      entries_.push_back(std::move(entry));
    } else {
      *found = std::move(entry);
    }
  }
}

void SummaryReporter::PrintSummary() const {
  double copy = 0, copy_cpu = 0;
  for (const Entry& entry : entries_) {
    if (entry.kind != Kind::kCopy) continue;
    copy = std::max(copy, entry.bytes_per_step / entry.s_per_step);
    copy_cpu = std::max(copy_cpu, entry.bytes_per_step / entry.cpu_s_per_step);
  }
  std::printf(
      "\nentrokv-bench-core summary (f16 keys, %d layers x %d kv "
      "heads x d=%d, %d q heads, 1 thread)\n",
      kLayers, kKvHeads, kHeadDim, kQHeads);
  // Real time is the headline; on a shared machine the CPU-time figures
  // (the process's own time) show what contention hides.
  std::printf("STREAM copy bandwidth: %.2f GB/s (%.2f GB/s by CPU time)\n",
              copy / 1e9, copy_cpu / 1e9);
  double read = 0;
  for (const Entry& entry : entries_) {
    if (entry.kind == Kind::kRead) {
      read = std::max(read, entry.bytes_per_step / entry.s_per_step);
    }
  }
  if (read > 0) {
    // A step only reads its keys: the read stream is its ceiling.
    std::printf(
        "read-only bandwidth, one thread: %.2f GB/s (%.2f of copy): a key "
        "read can reach at most that share of copy\n",
        read / 1e9, copy > 0 ? read / copy : 0.0);
  }
  for (const Entry& entry : entries_) {
    if (entry.kind != Kind::kKernel) continue;
    // The summed-query kernel alone (BM_SumKernel): its keys' rate.
    const double rate = entry.bytes_per_step / entry.s_per_step;
    std::printf(
        "summed-query kernel alone, sketched 8B planes, %s live: %.2f GB/s",
        entry.args.c_str(), rate / 1e9);
    if (copy > 0) std::printf(" (%.2f of copy)", rate / copy);
    std::printf("\n");
  }
  std::printf("%-34s %10s %14s %12s %14s %14s\n", "benchmark", "ms/step",
              "key GB/s", "of copy bw", "(by CPU time)", "copied B/step");
  for (const Entry& entry : entries_) {
    if (entry.kind != Kind::kStep) continue;
    if (entry.name.find("Window") != std::string::npos) {
      std::printf("%-34s %10.3f %14s %12s %14s %14.0f\n", entry.name.c_str(),
                  entry.s_per_step * 1e3, "no scoring", "-", "-",
                  entry.copied_bytes_per_step);
      continue;
    }
    std::printf("%-34s %10.3f", entry.name.c_str(), entry.s_per_step * 1e3);
    PrintBandwidth(entry, copy, copy_cpu);
    std::printf(" %14.0f\n", entry.copied_bytes_per_step);
  }
  PrintModelTable(copy, copy_cpu);
  PrintAgainstCopyTable();
  PrintShadowTable();
  PrintTierTable();
}

void SummaryReporter::PrintTierTable() const {
  if (!Has(Kind::kTier)) return;
  std::printf(
      "\nDemote tier (docs/step-semantics.md section 12): the same session "
      "without a tier and with a full one of D = B entries (margin 0, P = "
      "8); the decision scores B + D entries. x: ms/step with / without.\n");
  std::printf("%-44s %10s %10s %8s %10s %10s %10s %9s\n", "benchmark",
              "ms/step", "(CPU)", "x", "dem/step", "prom/step", "evict/step",
              "tier");
  for (const Entry& entry : entries_) {
    if (entry.kind != Kind::kTier) continue;
    // Its pair without a tier: the same function name ending in "/none".
    const std::string base =
        entry.function.substr(0, entry.function.rfind('/'));
    const Entry* none = nullptr;
    for (const Entry& other : entries_) {
      if (other.kind == Kind::kTier && other.function == base + "/none") {
        none = &other;
      }
    }
    std::printf("%-44s %10.3f %10.3f", entry.function.c_str(),
                entry.s_per_step * 1e3, entry.cpu_s_per_step * 1e3);
    if (none != nullptr && entry.tier_capacity > 0) {
      std::printf(" %8.2f", entry.s_per_step / none->s_per_step);
    } else {
      std::printf(" %8s", "-");
    }
    std::printf(" %10.3f %10.3f %10.3f %9.0f\n", entry.demoted_per_step,
                entry.promoted_per_step, entry.evicted_per_step,
                entry.tier_held);
  }
}

void SummaryReporter::PrintAgainstCopyTable() const {
  if (!Has(Kind::kAgainstCopy)) return;
  std::printf(
      "\nInterleaved with the copy (K = 1, budget = live): each round times "
      "one copy pass, then steps for as long; of copy: the per-round ratio "
      "of the key read's rate to the copy's, median [quartiles]; GB/s: the "
      "median rates.\n");
  std::printf("%-42s %8s %17s %10s %10s\n", "benchmark", "of copy",
              "[p25, p75]", "key GB/s", "copy GB/s");
  for (const Entry& entry : entries_) {
    if (entry.kind != Kind::kAgainstCopy) continue;
    std::printf("%-42s %8.2f     [%4.2f, %4.2f] %10.2f %10.2f\n",
                entry.function.c_str(), entry.against_copy[1],
                entry.against_copy[0], entry.against_copy[2],
                entry.key_rate / 1e9, entry.copy_rate / 1e9);
  }
}

void SummaryReporter::PrintShadowTable() const {
  if (!Has(Kind::kShadow)) return;
  std::printf(
      "\nShadow policies (core/shadow.h, as the server runs them after each "
      "reply): policy entropy, budget = live = 4096, K = 1; shadows at the "
      "same budget: default 1 = h2o, 2 = + tova, 4 = + window, streaming; "
      "8B (group-sum queries) 1 = affinity, 2 = + keynorm, 4 = + window, "
      "streaming; recall = a ShadowSet without shadows (reference and "
      "scoring only).\n"
      "+ms/step: over the same shape's row without a ShadowSet; per shadow: "
      "(the row - recall) / shadows. reference: entries held after the run "
      "(f32 keys), shadow MB: the set's bytes (its shadows' states "
      "included).\n");
  std::printf("%-40s %10s %10s %10s %12s %11s %11s\n", "benchmark",
              "ms/step", "(CPU)", "+ms/step", "per shadow", "reference",
              "shadow MB");
  for (const Entry& entry : entries_) {
    if (entry.kind != Kind::kShadow) continue;
    // The same shape's rows: the name up to the last case component.
    const std::string shape = entry.name.substr(
        0, entry.name.find('/', std::string("BM_Shadows/").size()));
    const Entry* none = nullptr;
    const Entry* recall = nullptr;
    for (const Entry& other : entries_) {
      if (other.kind != Kind::kShadow ||
          other.name.rfind(shape + "/", 0) != 0) {
        continue;
      }
      if (other.shadows < 0) none = &other;
      if (other.shadows == 0) recall = &other;
    }
    std::printf("%-40s %10.3f %10.3f", entry.function.c_str(),
                entry.s_per_step * 1e3, entry.cpu_s_per_step * 1e3);
    if (none != nullptr && entry.shadows >= 0) {
      std::printf(" %10.3f", (entry.s_per_step - none->s_per_step) * 1e3);
    } else {
      std::printf(" %10s", "-");
    }
    if (recall != nullptr && entry.shadows > 0 && entry.score_every == 1) {
      std::printf(" %12.3f", (entry.s_per_step - recall->s_per_step) * 1e3 /
                                 entry.shadows);
    } else {
      std::printf(" %12s", "-");
    }
    if (entry.shadows >= 0) {
      std::printf(" %11.0f %11.1f\n", entry.reference_entries,
                  entry.shadow_bytes / 1e6);
    } else {
      std::printf(" %11s %11s\n", "-", "-");
    }
  }
}

bool SummaryReporter::Has(Kind kind) const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [kind](const Entry& entry) { return entry.kind == kind; });
}

double SummaryReporter::Counter(const Run& run, const char* key,
                                double otherwise) {
  auto it = run.counters.find(key);
  return it == run.counters.end() ? otherwise : it->second.value;
}

void SummaryReporter::PrintBandwidth(const Entry& entry, double copy,
                                     double copy_cpu) {
  const double rate = entry.bytes_per_step / entry.s_per_step;
  const double cpu_rate = entry.bytes_per_step / entry.cpu_s_per_step;
  std::printf(" %14.2f %11.1f%% %13.1f%%", rate / 1e9,
              copy > 0 ? 100.0 * rate / copy : 0.0,
              copy_cpu > 0 ? 100.0 * cpu_rate / copy_cpu : 0.0);
}

void SummaryReporter::PrintModelTable(double copy, double copy_cpu) const {
  if (!Has(Kind::kModel)) return;
  std::printf(
      "\nLlama-3-8B shape: %d layers x %d kv heads x d=%d, %d q heads, f16; "
      "policy entropy, budget = live; 1 thread, 1 session.\n"
      "project:%d sends the %d default scored layers; block%d keeps one "
      "summary per %d tokens; K = decide_every.\n"
      "ms/step: time over K consecutive steps / K (real time; CPU time in "
      "brackets). key B/step: keys a decision reads / K.\n"
      "wire B/token: key bytes + (query bytes + 8 B entropy) / K, payload "
      "only (no protobuf framing). held B/token: Stats().bytes_held / "
      "live. copied B/step: key and query bytes a step writes "
      "(Stats().bytes_copied).\n"
      "engine key bytes per token (all %d layers, f16): %lld.\n",
      kModelLayers, kKvHeads, kHeadDim, kQHeads, kSketchDim,
      static_cast<int>(DefaultScoredLayers(kModelLayers).size()), kBlockSize,
      kBlockSize, kModelLayers,
      static_cast<long long>(kEngineKeyBytesPerToken));
  std::printf(
      "%-24s %6s %3s %10s %10s %12s %9s %8s %8s %11s %11s %11s %13s\n",
      "variant", "live", "K", "ms/step", "(CPU)", "key B/step", "key GB/s",
      "of copy", "(CPU)", "wire B/tok", "held B/tok", "engine/held",
      "copied B/step");
  for (const Entry& entry : entries_) {
    if (entry.kind != Kind::kModel) continue;
    const ModelRow* row = FindRow(entry.function);
    if (row == nullptr) continue;
    const double rate = entry.bytes_per_step / entry.s_per_step;
    const double cpu_rate = entry.bytes_per_step / entry.cpu_s_per_step;
    std::printf(
        "%-24s %6s %3d %10.3f %10.3f %12.0f %9.2f %7.1f%% %7.1f%% %11.1f "
        "%11.1f %10.1fx %13.0f\n",
        row->variant.c_str(), entry.args.c_str(), row->decide_every,
        entry.s_per_step * 1e3, entry.cpu_s_per_step * 1e3,
        entry.bytes_per_step, rate / 1e9, copy > 0 ? 100 * rate / copy : 0.0,
        copy_cpu > 0 ? 100 * cpu_rate / copy_cpu : 0.0,
        entry.wire_bytes_per_token, entry.held_bytes_per_token,
        double(kEngineKeyBytesPerToken) / entry.held_bytes_per_token,
        entry.copied_bytes_per_step);
  }
  for (const Entry& entry : entries_) {
    if (entry.kind == Kind::kSketchKeys) {
      std::printf(
          "engine side, Sketcher::Keys (project:%d, %d layers): %.0f ns per "
          "appended token, batch %s (%.0f ns CPU)\n",
          kSketchDim,
          static_cast<int>(DefaultScoredLayers(kModelLayers).size()),
          entry.s_per_step * 1e9, entry.args.c_str(),
          entry.cpu_s_per_step * 1e9);
    } else if (entry.kind == Kind::kSketchQueries) {
      std::printf(
          "engine side, Sketcher::Queries (group sums): %.0f ns per "
          "decision, %.0f ns per token at K=%d (%.0f ns CPU per decision)\n",
          entry.s_per_step * 1e9, entry.s_per_step * 1e9 / kCadence, kCadence,
          entry.cpu_s_per_step * 1e9);
    }
  }
  PrintGoals(copy);
}

void SummaryReporter::PrintGoals(double copy) const {
  std::printf("\ngoals at %d live (issue #8 item 6):\n", 32 << 10);
  const std::string live = std::to_string(32 << 10);
  for (const Entry& entry : entries_) {
    if (entry.kind != Kind::kModel || entry.args != live) continue;
    const ModelRow* row = FindRow(entry.function);
    if (row == nullptr) continue;
    if (row->sketch && row->decide_every > 1) {
      const double ms = entry.s_per_step * 1e3;
      const double cpu_ms = entry.cpu_s_per_step * 1e3;
      std::printf(
          "  %s K=%d: %.3f ms/step (%.3f CPU) <= 0.5: %s; wire %.1f B/token "
          "<= 2048: %s; held %.1f B/token <= %lld (1/16 of the engine's): "
          "%s\n",
          row->variant.c_str(), row->decide_every, ms, cpu_ms,
          ms <= 0.5 ? "yes" : "NO", entry.wire_bytes_per_token,
          entry.wire_bytes_per_token <= 2048 ? "yes" : "NO",
          entry.held_bytes_per_token,
          static_cast<long long>(kEngineKeyBytesPerToken / 16),
          entry.held_bytes_per_token * 16 <= kEngineKeyBytesPerToken ? "yes"
                                                                     : "NO");
    } else if (row->variant == "exact" && row->decide_every == 1) {
      const double share =
          copy > 0 ? entry.bytes_per_step / entry.s_per_step / copy : 0.0;
      std::printf("  exact K=1: %.1f%% of copy bandwidth >= 60%%: %s\n",
                  100 * share, share >= 0.6 ? "yes" : "NO");
    }
  }
}

const ModelRow* SummaryReporter::FindRow(const std::string& function) {
  for (const ModelRow& row : ModelRows()) {
    if (row.name == function) return &row;
  }
  return nullptr;
}

}  // namespace entrokv::bench
