// entrokv-bench-core: the cost of one session step on the CPU backend, as a
// fraction of the machine's memory bandwidth (docs/design.md "Performance
// model"), and the cost, wire bytes and server memory of the sketch, cadence
// and block-summary settings at the Llama-3-8B shape (issue #8 item 6).
//
// A step (append 1, score every live key, update, select) must read every live
// key once: live · layers · kv_heads · dim · sizeof(elem) bytes. The step
// benchmarks report that read as bytes per second; a STREAM-style copy of
// large arrays, measured in the same run, gives the bandwidth the read is
// compared with. The summaries printed at the end give the ratio.
//
// Every session runs the `entropy` policy with budget = live and a constant
// entropy, so B_t = B at every step: each decision evicts what was appended
// since the previous one, and the live count returns to `live` after every
// period (one step; K steps under decide_every = K; a block of N steps with
// block summaries). Single thread, one session.
//
// 1. BM_*Step: 4 layers, 8 kv heads, 32 q heads, head_dim 128, f16 keys. The
//    attention rankings (tova, h2o) with a fixed budget show the cost of the
//    softmax they need.
// 2. BM_Llama8B/<variant>/K<K>: the 8B shape (32 layers, 8 kv heads, 32 q
//    heads, head_dim 128, f16) at 4k and 32k live entries:
//      exact                    all 32 layers, per-head queries;
//      project:16+gsum          project:16 sketches of the 4 default scored
//                               layers (4, 12, 20, 28), group-sum queries;
//      exact+block16            as exact, with block_size 16 summaries;
//      project:16+gsum+block16  both;
//    each with decide_every 1 and 16 (15 of 16 steps send no queries and no
//    entropy). Times are per step, amortized over the period.
// 3. BM_Sketch*: the engine's side of project:16 (Sketcher), which the
//    engine pays, not the server.
// 3a. BM_AgainstCopy/<case>/32768: the entropy step at the default shape
//    and the 8B exact and project:16+gsum steps (K = 1), each interleaved
//    with the copy: every round times one copy pass, then steps for as
//    long, and the summary gives the median and quartiles of the per-round
//    ratio of the two rates.
// 3b. BM_SumKernel/<live>: the summed-query kernel alone at the sketched 8B
//    planes, with its keys in L2 (256), L3 (4k) or DRAM (32k): what its
//    instructions allow, against what the memory does.
// 4. BM_Shadows/<shape>/<case>: what shadow policies add to a step
//    (core/shadow.h; the server runs the same after each reply): the
//    default shape and the 8B shape with project:16+gsum, 4k live, K = 1,
//    with no ShadowSet (none), one without shadows (recall: the reference
//    and the scoring only), 1, 2 and 4 shadows at the same budget (h2o,
//    tova, window, streaming; at the group-sum 8B shape, which the attention
//    rankings cannot use, affinity, keynorm, window, streaming), and 4
//    scoring one step in 16.
// 5. BM_Tier/<shape>/<policy>/<live>/<tier>: a decision with a demote tier
//    (docs/step-semantics.md section 12) of D = B entries, full, against
//    the same session without one: the default shape with tova and entropy
//    at 8k live, and the 8B shape with project:16+gsum and entropy at 4k.
//    Each step demotes one entry, may swap up to P = 8 (margin 0), and
//    evicts one from the tier; the decision scores B + D entries.

// The files: bench_core.h (what they share), steady_session.cc (the session
// the cases time), bench_cases.cc (the cases, and the Llama-3-8B and
// against-copy registrations), shadow_tier_cases.cc (the shadow and demote
// tier cases), summary_reporter.{h,cc} (the summaries).

#include "bench_core.h"

#include <benchmark/benchmark.h>

#include "summary_reporter.h"

int main(int argc, char** argv) {
  entrokv::bench::RegisterModelBenchmarks();
  entrokv::bench::RegisterAgainstCopyBenchmarks();
  entrokv::bench::RegisterShadowBenchmarks();
  entrokv::bench::RegisterTierBenchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  entrokv::bench::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  benchmark::Shutdown();
  return 0;
}
