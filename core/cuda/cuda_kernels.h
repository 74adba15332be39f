// The CUDA backend's device kernels, behind plain launch functions.
//
// This header is internal to core/cuda: it is included by the session's host
// C++ (cuda_session.cc, cuda_step.cc) and defined, by concern, in
// cuda_kernels_store.cu (append, compaction), cuda_kernels_score.cu (scores,
// softmax statistics) and cuda_kernels_select.cu (keep scores, ordering,
// selection), all nvcc, so it carries no Abseil and no device code. Every
// launcher enqueues its work on `stream` and returns the launch status
// (cudaGetLastError after the launch); errors of the work itself surface at
// the next synchronisation. Launchers with nothing to do (zero items) enqueue
// nothing and return cudaSuccess.
//
// Layouts (docs/cuda.md):
//  - keys: [plane = layer·kv_heads + kv_head][capacity][head_dim], element
//  type;
//  - per-entry state: one array per field, indexed by position 0..live-1;
//  - z: [row = layer·q_heads + q_head][live], float;
//  - sort keys: SortKey, ordered by (hi, lo) as unsigned integers.
//
// Thread-safety: launchers are thread-safe; concurrent launches on distinct
// streams touching distinct buffers are independent.

#ifndef ENTROKV_CORE_CUDA_CUDA_KERNELS_H_
#define ENTROKV_CORE_CUDA_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "entrokv/core/element_type.h"
#include "entrokv/core/rule.h"  // Ranking and the keep scores, without Abseil.

namespace entrokv::internal::cuda {

// A 128-bit selection key: (hi, lo) compared as unsigned integers, hi first.
// Candidates: hi = OrderedBits(score), lo = append or block index; excluded
// entries: hi = lo = UINT64_MAX.
struct SortKey {
  uint64_t hi;
  uint64_t lo;
};

// Per-position entry state on the device.
struct EntryState {
  int64_t* index = nullptr;    // Append index.
  uint8_t* pinned = nullptr;   // 1 when the engine pinned the entry.
  double* key_norm = nullptr;  // Mean over planes of the key's L2 norm.
  // Ω (seed) or its logit a (logit_ema); birth: the entropy at birth.
  double* affinity = nullptr;
  double* h2o_acc = nullptr;   // H2O accumulated attention.
};

struct AppendArgs {
  ElementType type;
  const std::byte* staged;  // n × planes × head_dim elements, as sent.
  std::byte* keys;          // The key store.
  int64_t capacity;
  int32_t planes;  // layers × kv_heads.
  int32_t head_dim;
  int64_t first_pos;      // Position of the first new entry.
  int64_t n;              // New entries.
  int64_t first_index;    // Append index of the first new entry.
  const uint8_t* pinned;  // n flags on the device, or nullptr.
  // 0.5 (seed) or 0 (logit_ema); for the birth ranking, the entropy the new
  // entries are born under (docs/step-semantics.md section 2).
  double affinity_init;
  double* plane_norms;    // Scratch, n × planes doubles.
  EntryState state;
};

// Copies the staged keys into the store, computes each new entry's key norm
// (in double, in the CPU backend's order, so it is bit-identical) and
// initialises its state.
cudaError_t LaunchAppend(const AppendArgs& args, cudaStream_t stream);

struct ScoreArgs {
  ElementType type;
  const std::byte* keys;
  int64_t capacity;
  int32_t layers;
  int32_t kv_heads;
  int32_t group;  // q heads per kv head.
  int32_t head_dim;
  int64_t live;
  const float* queries;  // [layer][q_head][head_dim], times 1/sqrt(head_dim).
  float* z;              // [row][live].
};

// z for every (row, live position); each key is read once for its group.
cudaError_t LaunchScore(const ScoreArgs& args, cudaStream_t stream);

// True when LaunchScore uses its vectorised kernel for this shape (else a
// simple, slower one).
bool ScoreUsesFastPath(ElementType type, int32_t head_dim, int32_t group);

// Per row: max_j z and inv[row] = inv_rows / Σ_j exp(z − max) (the sum in
// double, each term a float exp, as the CPU backend computes it).
cudaError_t LaunchRowStats(const float* z, int64_t rows, int64_t live,
                           double inv_rows, float* row_max, double* row_inv,
                           cudaStream_t stream);

// Positions 0..n-1 as int32 values (the payload of index sorts).
cudaError_t LaunchIota(int32_t* out, int64_t n, cudaStream_t stream);

// Temporary bytes the sorts below need for `n` items.
cudaError_t SortTempBytes(int64_t n, size_t* index_sort, size_t* key_sort);

// Sorts (append index → position) ascending; `index_bits` bounds the indices.
cudaError_t SortByIndex(void* temp, size_t temp_bytes, const int64_t* index,
                        const int32_t* pos_in, int64_t* index_out,
                        int32_t* pos_out, int64_t n, int index_bits,
                        cudaStream_t stream);

// Sorts selection keys ascending with their int32 payload.
cudaError_t SortKeys(void* temp, size_t temp_bytes, const SortKey* keys_in,
                     SortKey* keys_out, const int32_t* val_in, int32_t* val_out,
                     int64_t n, cudaStream_t stream);

// *out = the append index from which the h2o ranking keeps everything: the
// ceil(recent_fraction·budget) newest live entries (step_common's
// H2oRecentFrom), given the live indices sorted ascending.
cudaError_t LaunchH2oRecentFrom(const int64_t* sorted_index, int64_t n,
                                int64_t keep, int64_t* out,
                                cudaStream_t stream);

struct KeyDiffArgs {
  ElementType type;
  const std::byte* keys;
  int64_t capacity;
  int32_t planes;  // layers × kv_heads.
  int32_t dim;     // Elements per stored key row.
  int64_t live;
  double* inv_norm;     // Scratch, planes × live.
  double* anchor;       // Scratch, planes × dim.
  double* anchor_norm;  // Scratch, planes.
  double* out;          // Per position: keydiff's keep score −c_i.
};

// keydiff's keep score of every live entry (docs/step-semantics.md section
// 3), bit-identical to the CPU backend's.
cudaError_t LaunchKeyDiff(const KeyDiffArgs& args, cudaStream_t stream);

struct RedundancyArgs {
  ElementType type;
  const std::byte* keys;
  int64_t capacity;
  int32_t planes;  // layers × kv_heads.
  int32_t dim;     // Elements per stored key row.
  int64_t live;
  const int64_t* index;  // Per position: the append index.
  const int32_t* rows;   // The reference rows' positions (RedundancyRows).
  int32_t row_count;
  double* inv_norm;  // Scratch, planes × live.
  int32_t* retain;   // Scratch, planes × row_count.
  double* r;         // Scratch, planes × live.
  double* stats;     // Scratch, planes × 2: the softmax's max and sum.
  double* out;       // Per position: R_i.
};

// rkv's redundancy R_i of every live entry (docs/step-semantics.md section
// 3), in the CPU backend's order (core/src/key_stats.cc); exp may differ from
// the host's in the last place.
cudaError_t LaunchRedundancy(const RedundancyArgs& args, cudaStream_t stream);

struct VarianceTermArgs {
  ElementType type;
  const std::byte* keys;
  int64_t capacity;
  int32_t layers;
  int32_t kv_heads;
  int32_t group;     // q heads per kv head.
  int32_t dim;       // Elements per stored key row.
  int32_t head_dim;  // The model's (the scale's) head size.
  int64_t live;
  const double* var;  // [layer][q_head][dim]: the queries' variance.
  float* z;           // [row][live]: expected's logits, the μ term in.
};

// Adds expected's variance term to its logits (docs/step-semantics.md
// section 3), in double, the sum rounded to float, as the CPU backend does.
cudaError_t LaunchVarianceTerm(const VarianceTermArgs& args,
                               cudaStream_t stream);

struct FinishArgs {
  int64_t live;
  int64_t rows;          // 0 when no scores were computed this step.
  const float* z;        // [row][live] when rows > 0.
  const float* row_max;  // Per row, when attention is needed.
  const double* row_inv;
  bool need_mean;
  bool need_attention;
  double inv_rows;
  // Ranking and its parameters (docs/step-semantics.md sections 5 and 7).
  Ranking ranking;
  bool seed_rule;  // Affinity update rule kSeed.
  double beta_h;   // β·H.
  double lambda;
  int64_t streaming_sinks;
  uint64_t seed;
  uint64_t step;
  const int64_t* h2o_recent_from;  // Device scalar; kH2o only.
  // keydiff: its keep score per position, or null when not computed.
  const double* key_diff = nullptr;
  // expected: its logits [row][live] and their softmax statistics, over
  // `expected_rows` rows (0 when not computed).
  int64_t expected_rows = 0;
  const float* expected_z = nullptr;
  const float* expected_max = nullptr;
  const double* expected_inv = nullptr;
  // Protection.
  int64_t sinks;
  int64_t recent;
  int64_t next_index;
  EntryState state;
  // Outputs, per position.
  double* mean_logit;  // Written when need_mean.
  double* attention;   // Written when need_attention.
  double* keep;
  uint8_t* protect;
  double birth_weight = 0.0;  // birth: η.
  // rkv: R_i per position, or null when not computed; λ.
  const double* redundancy = nullptr;
  double rkv_lambda = 0.0;
};

// Aggregates s_i and a_i, updates the ranking state, writes keep scores and
// protection flags.
cudaError_t LaunchFinish(const FinishArgs& args, cudaStream_t stream);

// Token selection keys: unprotected positions get (score, append index),
// protected ones the excluded key; the payload is the position.
cudaError_t LaunchTokenKeys(const double* keep, const uint8_t* protect,
                            const int64_t* index, int64_t live, SortKey* keys,
                            int32_t* vals, cudaStream_t stream);

// Block selection keys, one per live token in append order (`sorted_index`,
// `sorted_pos`): the first token of each full, live, unprotected block gets
// (block score, block index) with payload its rank t in append order; every
// other token the excluded key.
cudaError_t LaunchBlockKeys(const int64_t* sorted_index,
                            const int32_t* sorted_pos, const double* keep,
                            const uint8_t* protect, int64_t live,
                            int32_t block_size, bool reduce_max, SortKey* keys,
                            int32_t* vals, cudaStream_t stream);

// Which of the sorted candidates go: the first `take`, and under the
// threshold budget control (use_tau) also every one scoring below tau.
struct EmitLimit {
  int64_t take = 0;
  bool use_tau = false;
  double tau = 0.0;
};

// Writes the evicted positions: out[i] for i < count is the position of the
// i-th smallest token candidate when `limit` chooses it, else -1 (also past
// the last candidate).
cudaError_t LaunchEmitTokens(const SortKey* sorted_keys,
                             const int32_t* sorted_vals, int64_t count,
                             const EmitLimit& limit, int32_t* out,
                             cudaStream_t stream);

// Block granularity: out[i·N + j] is the position of token j of the i-th
// smallest candidate block when `limit` chooses it (take counts blocks), else
// -1; i < blocks.
cudaError_t LaunchEmitBlocks(const SortKey* sorted_keys,
                             const int32_t* sorted_vals,
                             const int32_t* sorted_pos, int64_t blocks,
                             const EmitLimit& limit, int32_t block_size,
                             int32_t* out, cudaStream_t stream);

// Moves entries: for each i < count, position moves[2i+1] → moves[2i] (keys
// in every plane and state). Sources and destinations are disjoint.
cudaError_t LaunchMoves(const int32_t* moves, int64_t count, std::byte* keys,
                        int64_t capacity, int32_t planes, int64_t row_bytes,
                        EntryState state, cudaStream_t stream);

}  // namespace entrokv::internal::cuda

#endif  // ENTROKV_CORE_CUDA_CUDA_KERNELS_H_
