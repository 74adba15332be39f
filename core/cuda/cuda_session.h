// A session of the CUDA backend: session state in device memory, the whole
// step on the device (docs/cuda.md).
//
// A session keeps its keys in the session's element type, laid out
// [layer·kv_head][capacity][head_dim] like the CPU backend's, and its
// per-entry state (append index, pinned flag, key norm, affinity, H2O
// accumulator) in device arrays indexed by position. The host keeps only what
// validation and the answer need: slot ids, append indices and pinned flags by
// position, the live slot set, and the budget controller. Each step runs on
// the session's own stream and copies back only the evicted positions (and,
// when asked, the trace). Eviction moves the last entry into each freed
// position, exactly as the CPU backend does, so positions agree between the
// host mirror, the device and the CPU backend.
//
// Validation, the budget controller and the byte accounting are the CPU
// backend's own (step_common.h, ByteAccount), so both backends reject the same
// steps with the same messages and report the same bytes_held.
//
// The session's device state (its growth and the step's scratch) is in
// cuda_session.cc, the step in cuda_step.cc. Not thread-safe, like every
// SessionState.
//
// Internal to core/cuda: host C++ only.

#ifndef ENTROKV_CORE_CUDA_CUDA_SESSION_H_
#define ENTROKV_CORE_CUDA_CUDA_SESSION_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cpu_backend.h"
#include "cuda_kernels.h"
#include "cuda_memory.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "key_stats.h"
#include "slot_table.h"
#include "step_common.h"

namespace entrokv::internal {

class CudaSession final : public SessionState {
 public:
  CudaSession(const SessionConfig& config, const SessionLimits& limits,
              std::shared_ptr<ByteAccount> account,
              std::shared_ptr<DevicePool> pool, int device, cudaStream_t stream)
      : config_(config),
        limits_(limits),
        account_(std::move(account)),
        pool_(std::move(pool)),
        device_(device),
        stream_(stream),
        budget_(config),
        esize_(static_cast<int64_t>(ElementSize(config.shape.element_type))),
        bytes_per_entry_(BytesPerEntry(config.shape)),
        planes_(config.shape.layers * config.shape.kv_heads),
        row_bytes_(int64_t{config.shape.vector_dim()} * esize_),
        // One z row per query vector sent: per q head, or per kv head for
        // group-sum queries (whose z is already the group's sum).
        rows_(int64_t{config.shape.layers} * config.shape.query_heads()),
        counters_(config.budget) {}

  ~CudaSession() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    // Free every buffer before the stream goes.
    DeviceBuffer* buffers[] = {
        &keys_,          &d_index_,   &d_pinned_,      &d_key_norm_,
        &d_affinity_,    &d_h2o_,     &d_mean_,        &d_attention_,
        &d_keep_,        &d_protect_, &d_iota_,        &d_sorted_index_,
        &d_sorted_pos_,  &d_keys_a_,  &d_keys_b_,      &d_vals_a_,
        &d_vals_b_,      &d_out_,     &d_moves_,       &d_temp_,
        &d_recent_from_, &d_z_,       &d_row_max_,     &d_row_inv_,
        &d_queries_,     &d_staged_,  &d_plane_norms_, &d_append_pinned_,
        &d_ranked_,      &d_kd_norm_, &d_kd_anchor_,   &d_ez_,
        &d_ez_max_,      &d_ez_inv_,  &d_mu_,          &d_var_,
        &d_rkv_r_,       &d_rkv_rows_, &d_rkv_retain_, &d_rkv_stats_};
    for (DeviceBuffer* b : buffers) b->Reset();
    cudaStreamDestroy(stream_);
    account_->Release(live() * bytes_per_entry_);
  }

  const SessionConfig& config() const override { return config_; }

  absl::Status Step(const StepInput& input, StepResult* result,
                    StepTrace* trace) override;

  SessionStats Stats() const override {
    return counters_.ToStats(live(), table_.next_index(), bytes_per_entry_,
                             Placement::kGpu);
  }

  std::vector<uint64_t> LiveSlots() const override {
    return table_.LiveSlots();
  }

 private:
  int64_t live() const { return table_.live(); }
  cuda::EntryState State() const {
    return {.index = d_index_.as<int64_t>(),
            .pinned = d_pinned_.as<uint8_t>(),
            .key_norm = d_key_norm_.as<double>(),
            .affinity = d_affinity_.as<double>(),
            .h2o_acc = d_h2o_.as<double>()};
  }

  // Allocates everything the step needs; changes no session state.
  absl::Status Prepare(int64_t n_after, int64_t n_new, size_t key_bytes,
                       bool scores);
  absl::Status GrowState(int64_t needed);
  // Runs the step on the device and commits it to the host mirror;
  // `*committed` tells whether the commit happened before an error.
  absl::Status Run(const StepInput& input, bool need_mean, bool need_attention,
                   StepResult* result, StepTrace* trace, bool* committed);

  // The trace's per-position arrays, copied back before the commit.
  struct TraceCopy {
    std::vector<double> mean, attention, keep;
    std::vector<uint8_t> protect;
  };
  // The parts of Run, numbered as its steps (cuda_step.cc). Each enqueues
  // its work on stream_; only CommitStep changes the host mirror.
  // 1. Copies the appended keys (and pinned flags) up and appends them.
  // REQUIRES: n_new > 0.
  absl::Status UploadAppend(const StepInput& input, int64_t n_old,
                            int64_t n_new);
  // 2. Copies the scaled queries up and computes z (and the softmax row
  // statistics when `need_attention`). REQUIRES: n > 0.
  // `raw`: the step's queries as sent (StepInput::queries).
  absl::Status LaunchScoring(const std::byte* raw, int64_t n,
                             bool need_attention, double inv_rows);
  // 3b. The rankings that read the stored keys beyond z, when their keep
  // scores are needed: keydiff's score into d_ranked_, or expected's logits
  // (from query_stats_) and their softmax statistics. REQUIRES: n > 0.
  absl::Status LaunchKeyRanking(int64_t n);
  // rkv: the reference rows (from the host mirror, before the step's appends
  // are committed to it) and the redundancy into d_ranked_.
  absl::Status LaunchRedundancy(int64_t n);
  // The Finish arguments that carry 3b's results (none for other rankings,
  // or when `ranked` is false).
  void AddKeyRanking(bool ranked, cuda::FinishArgs* args) const;
  // 4. Sorts by append index when the h2o window or (on a step that
  // `selects`) blocks need it, and computes the h2o window.
  absl::Status LaunchAppendOrder(int64_t n, int64_t next_index, int64_t budget,
                                 bool selects);
  // 5. Aggregation, ranking state update, keep scores and protection.
  absl::Status LaunchFinishStep(const StepInput& input, int64_t n,
                                int64_t next_index, bool scores, bool need_mean,
                                bool need_attention, double inv_rows, double h,
                                bool ranked);
  // 6. Selects the `need` lowest unprotected entries (or blocks), and under
  // a `threshold` also those scoring below it, and copies the evicted
  // positions back into h_out_: `*out_count` of them, -1 for none.
  // REQUIRES: n > 0, need > 0 or a threshold.
  absl::Status SelectEvictions(int64_t n, int64_t need,
                               std::optional<double> threshold,
                               int64_t* out_count);
  // 7. Copies the trace's arrays back. REQUIRES: n > 0.
  absl::Status DownloadTrace(int64_t n, TraceCopy* copy);
  // After the stream is synchronised: commits the append, the trace, the
  // answer and the compaction to the host mirror, and launches the
  // compaction on the device.
  absl::Status CommitStep(const StepInput& input, int64_t n, int64_t budget,
                          double h, int64_t out_count, const TraceCopy& copy,
                          StepResult* result, StepTrace* trace);
  // Fills `trace` in append order from `copy`.
  void FillTrace(int64_t n, const TraceCopy& copy, StepTrace* trace);
  // Copies moves_ up and moves the entries on the device.
  // REQUIRES: !moves_.empty().
  absl::Status LaunchCompaction();

  const SessionConfig config_;
  const SessionLimits limits_;
  const std::shared_ptr<ByteAccount> account_;
  const std::shared_ptr<DevicePool> pool_;
  const int device_;
  const cudaStream_t stream_;
  BudgetController budget_;
  const int64_t esize_;
  const int64_t bytes_per_entry_;
  const int32_t planes_;
  const int64_t row_bytes_;
  const int64_t rows_;

  // Host mirror, per position 0..live-1.
  // Slot ids, append indices, pinned flags; the compaction rule shared with
  // the CPU backend.
  SlotTable table_;

  StepCounters counters_;
  // Set when a CUDA error struck after the step began changing state: the
  // session can no longer answer.
  absl::Status broken_;

  // Device state, `capacity_` entries.
  int64_t capacity_ = 0;
  DeviceBuffer keys_;
  DeviceBuffer d_index_, d_pinned_, d_key_norm_, d_affinity_, d_h2o_;
  // Device scratch, sized by capacity (selection) or by the step (append).
  DeviceBuffer d_mean_, d_attention_, d_keep_, d_protect_;
  DeviceBuffer d_iota_, d_sorted_index_, d_sorted_pos_;
  DeviceBuffer d_keys_a_, d_keys_b_, d_vals_a_, d_vals_b_;
  DeviceBuffer d_out_, d_moves_, d_temp_, d_recent_from_;
  DeviceBuffer d_z_, d_row_max_, d_row_inv_, d_queries_;
  DeviceBuffer d_staged_, d_plane_norms_, d_append_pinned_;
  // keydiff and expected (3b): the keep score per position; keydiff's norms
  // and anchors; expected's logits, their row statistics, μ and σ².
  DeviceBuffer d_ranked_, d_kd_norm_, d_kd_anchor_;
  DeviceBuffer d_ez_, d_ez_max_, d_ez_inv_, d_mu_, d_var_;
  // rkv (3b): the redundancy's sums, reference rows, duplicates and softmax
  // statistics; d_kd_norm_ holds its inverse norms.
  DeviceBuffer d_rkv_r_, d_rkv_rows_, d_rkv_retain_, d_rkv_stats_;
  PinnedBuffer h_rkv_rows_;
  std::vector<int64_t> rkv_index_;  // Host scratch: append index by position.
  std::vector<int32_t> rkv_rows_;
  // Pinned host staging.
  PinnedBuffer h_staged_, h_pinned_, h_queries_, h_out_, h_moves_;
  PinnedBuffer h_mu_, h_var_;
  QueryStats query_stats_;  // expected (section 5), on the host.
  // birth: the entropy used by the last decision step, if any.
  std::optional<double> last_entropy_;
  int64_t scratch_capacity_ = 0;
  int64_t z_entries_ = 0;  // Live entries d_z_ has room for.

  // Host scratch.
  DecodedStep decoded_;
  std::vector<int32_t> evict_;
  std::vector<SlotTable::Move> moves_;
};

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_CUDA_CUDA_SESSION_H_
