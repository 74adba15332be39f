// The summaries of entrokv-bench-core: Google Benchmark's console output,
// then the step table against the STREAM copy bandwidth and the Llama-3-8B
// table (bench_core.cc). Single-threaded.

#ifndef ENTROKV_BENCH_SUMMARY_REPORTER_H_
#define ENTROKV_BENCH_SUMMARY_REPORTER_H_

#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "bench_core.h"

namespace entrokv::bench {

// Keeps each run's figures (from its real time, and its CPU time), to print
// the summaries after the console output.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& reports) override;

  // Prints the step table, the Llama-3-8B table, the interleaved
  // against-copy table, the shadow table and the demote-tier table from the
  // runs reported.
  void PrintSummary() const;

 private:
  enum class Kind {
    kStep,
    kCopy,
    kRead,
    kModel,
    kSketchKeys,
    kSketchQueries,
    kShadow,
    kTier,
    kAgainstCopy,
    kKernel
  };
  struct Entry {
    std::string name;      // Full benchmark name.
    std::string function;  // Name without arguments.
    std::string args;
    Kind kind = Kind::kStep;
    double steps_per_iter = 1;
    double s_per_step = 0;  // Real time (per token for kSketchKeys).
    double cpu_s_per_step = 0;
    double bytes_per_step = 0;  // Keys read (copied, for kCopy).
    double wire_bytes_per_token = 0;
    double held_bytes_per_token = 0;
    double copied_bytes_per_step = 0;  // SessionStats.bytes_copied.
    // kShadow: the case's shadows (-1: no ShadowSet), score_every, and the
    // set's reference entries and bytes after the run.
    int shadows = -1;
    int score_every = 1;
    double reference_entries = 0;
    double shadow_bytes = 0;
    // kTier: the tier's capacity (0: none), and the moves per step.
    double tier_capacity = 0;
    double tier_held = 0;
    double demoted_per_step = 0;
    double promoted_per_step = 0;
    double evicted_per_step = 0;
    // kAgainstCopy: the per-round ratio's quartiles, and the median rates.
    double against_copy[3] = {0, 0, 0};
    double copy_rate = 0;
    double key_rate = 0;
  };

  static double Counter(const Run& run, const char* key, double otherwise);

  // Whether any run reported was of `kind`.
  bool Has(Kind kind) const;

  // Prints key GB/s and its share of the copy bandwidth by real and by CPU
  // time.
  static void PrintBandwidth(const Entry& entry, double copy, double copy_cpu);

  void PrintModelTable(double copy, double copy_cpu) const;
  void PrintShadowTable() const;
  void PrintTierTable() const;
  void PrintAgainstCopyTable() const;

  // Issue #8 item 6, at 32k live.
  void PrintGoals(double copy) const;

  static const ModelRow* FindRow(const std::string& function);

  std::vector<Entry> entries_;  // In run order.
};

}  // namespace entrokv::bench

#endif  // ENTROKV_BENCH_SUMMARY_REPORTER_H_
