// The CUDA backend: session state in device memory, the whole step on the
// device (docs/cuda.md).
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

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cpu_backend.h"
#include "cuda_kernels.h"
#include "cuda_memory.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/status_macros.h"
#include "layered_session.h"
#include "slot_table.h"
#include "step_common.h"

namespace entrokv::internal {
namespace {

// Appends up to this many key bytes go through the session's pinned staging
// buffer (a truly asynchronous copy); larger prefill chunks are copied from
// the caller's memory directly.
constexpr size_t kMaxPinnedStagingBytes = size_t{16} << 20;

int BitWidth(uint64_t x) {
  int bits = 0;
  while (x != 0) {
    ++bits;
    x >>= 1;
  }
  return bits;
}

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
        &d_queries_,     &d_staged_,  &d_plane_norms_, &d_append_pinned_};
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
  // Pinned host staging.
  PinnedBuffer h_staged_, h_pinned_, h_queries_, h_out_, h_moves_;
  int64_t scratch_capacity_ = 0;
  int64_t z_entries_ = 0;  // Live entries d_z_ has room for.

  // Host scratch.
  DecodedStep decoded_;
  std::vector<int32_t> evict_;
  std::vector<SlotTable::Move> moves_;
};

absl::Status CudaSession::GrowState(int64_t needed) {
  if (needed <= capacity_) return absl::OkStatus();
  int64_t new_cap = std::max<int64_t>({needed, 2 * capacity_, 64});
  if (account_->limit() > 0) {
    // Never hold storage for more entries than the byte limit admits.
    new_cap = std::min(new_cap,
                       std::max(needed, account_->limit() / bytes_per_entry_));
  }
  const size_t n = static_cast<size_t>(new_cap);
  ENTROKV_ASSIGN_OR_RETURN(
      DeviceBuffer keys,
      DeviceBuffer::Make(pool_.get(), planes_ * n * row_bytes_, "keys"));
  ENTROKV_ASSIGN_OR_RETURN(
      DeviceBuffer index,
      DeviceBuffer::Make(pool_.get(), n * sizeof(int64_t), "append indices"));
  ENTROKV_ASSIGN_OR_RETURN(DeviceBuffer pinned,
                           DeviceBuffer::Make(pool_.get(), n, "pinned flags"));
  ENTROKV_ASSIGN_OR_RETURN(
      DeviceBuffer key_norm,
      DeviceBuffer::Make(pool_.get(), n * sizeof(double), "key norms"));
  ENTROKV_ASSIGN_OR_RETURN(
      DeviceBuffer affinity,
      DeviceBuffer::Make(pool_.get(), n * sizeof(double), "affinity"));
  ENTROKV_ASSIGN_OR_RETURN(
      DeviceBuffer h2o,
      DeviceBuffer::Make(pool_.get(), n * sizeof(double), "h2o accumulators"));
  const size_t live_n = static_cast<size_t>(live());
  if (live_n > 0) {
    const size_t new_pitch = n * static_cast<size_t>(row_bytes_);
    const size_t old_pitch = static_cast<size_t>(capacity_ * row_bytes_);
    const size_t width = live_n * static_cast<size_t>(row_bytes_);
    if (new_pitch < (size_t{1} << 31)) {
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cudaMemcpy2DAsync(keys.as<std::byte>(), new_pitch,
                            keys_.as<std::byte>(), old_pitch, width, planes_,
                            cudaMemcpyDeviceToDevice, stream_),
          "growing keys");
    } else {
      // Pitches past cudaMemcpy2D's limit: one copy per plane.
      for (int64_t plane = 0; plane < planes_; ++plane) {
        ENTROKV_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(keys.as<std::byte>() + plane * new_pitch,
                            keys_.as<std::byte>() + plane * old_pitch, width,
                            cudaMemcpyDeviceToDevice, stream_),
            "growing keys");
      }
    }
    const std::pair<DeviceBuffer*, DeviceBuffer*> arrays[] = {
        {&index, &d_index_},
        {&key_norm, &d_key_norm_},
        {&affinity, &d_affinity_},
        {&h2o, &d_h2o_}};
    for (const auto& [to, from] : arrays) {
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(to->as<std::byte>(), from->as<std::byte>(),
                          live_n * 8, cudaMemcpyDeviceToDevice, stream_),
          "growing entry state");
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pinned.as<std::byte>(), d_pinned_.as<std::byte>(),
                        live_n, cudaMemcpyDeviceToDevice, stream_),
        "growing entry state");
    ENTROKV_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                                 "growing session state");
  }
  keys_ = std::move(keys);
  d_index_ = std::move(index);
  d_pinned_ = std::move(pinned);
  d_key_norm_ = std::move(key_norm);
  d_affinity_ = std::move(affinity);
  d_h2o_ = std::move(h2o);
  capacity_ = new_cap;
  return absl::OkStatus();
}

absl::Status CudaSession::Prepare(int64_t n_after, int64_t n_new,
                                  size_t key_bytes, bool scores) {
  ENTROKV_RETURN_IF_ERROR(GrowState(n_after));
  DevicePool* pool = pool_.get();
  const size_t cap = static_cast<size_t>(capacity_);
  const size_t bs = static_cast<size_t>(config_.block_size);
  if (scratch_capacity_ < capacity_) {
    ENTROKV_RETURN_IF_ERROR(d_mean_.Ensure(pool, cap * 8, "mean logits"));
    ENTROKV_RETURN_IF_ERROR(d_attention_.Ensure(pool, cap * 8, "attention"));
    ENTROKV_RETURN_IF_ERROR(d_keep_.Ensure(pool, cap * 8, "keep scores"));
    ENTROKV_RETURN_IF_ERROR(d_protect_.Ensure(pool, cap, "protection"));
    ENTROKV_RETURN_IF_ERROR(d_iota_.Ensure(pool, cap * 4, "positions"));
    ENTROKV_RETURN_IF_ERROR(
        d_sorted_index_.Ensure(pool, cap * 8, "sorted indices"));
    ENTROKV_RETURN_IF_ERROR(
        d_sorted_pos_.Ensure(pool, cap * 4, "sorted positions"));
    const size_t key_size = sizeof(cuda::SortKey);
    ENTROKV_RETURN_IF_ERROR(
        d_keys_a_.Ensure(pool, cap * key_size, "sort keys"));
    ENTROKV_RETURN_IF_ERROR(
        d_keys_b_.Ensure(pool, cap * key_size, "sort keys"));
    ENTROKV_RETURN_IF_ERROR(d_vals_a_.Ensure(pool, cap * 4, "sort values"));
    ENTROKV_RETURN_IF_ERROR(d_vals_b_.Ensure(pool, cap * 4, "sort values"));
    ENTROKV_RETURN_IF_ERROR(d_out_.Ensure(pool, (cap + bs) * 4, "evictions"));
    ENTROKV_RETURN_IF_ERROR(d_moves_.Ensure(pool, cap * 8, "moves"));
    ENTROKV_RETURN_IF_ERROR(d_recent_from_.Ensure(pool, 8, "h2o window"));
    ENTROKV_RETURN_IF_ERROR(h_out_.Ensure((cap + bs) * 4, "evictions"));
    ENTROKV_RETURN_IF_ERROR(h_moves_.Ensure(cap * 8, "moves"));
    size_t index_sort = 0;
    size_t key_sort = 0;
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::SortTempBytes(capacity_, &index_sort, &key_sort),
        "sizing sort storage");
    ENTROKV_RETURN_IF_ERROR(
        d_temp_.Ensure(pool, std::max(index_sort, key_sort), "sort storage"));
    scratch_capacity_ = capacity_;
  }
  if (scores && z_entries_ < n_after) {
    // z is sized by the live count (doubling), not by the capacity, so that a
    // refused large append leaves later small steps possible.
    const int64_t entries =
        std::min(capacity_, std::max(n_after, 2 * z_entries_));
    ENTROKV_RETURN_IF_ERROR(d_z_.Ensure(
        pool, static_cast<size_t>(rows_) * static_cast<size_t>(entries) * 4,
        "scores"));
    z_entries_ = entries;
  }
  if (scores && d_queries_.bytes() == 0) {
    ENTROKV_RETURN_IF_ERROR(
        d_row_max_.Ensure(pool, static_cast<size_t>(rows_) * 4, "row maxima"));
    ENTROKV_RETURN_IF_ERROR(
        d_row_inv_.Ensure(pool, static_cast<size_t>(rows_) * 8, "row sums"));
    const size_t qbytes =
        static_cast<size_t>(config_.shape.query_elements()) * sizeof(float);
    ENTROKV_RETURN_IF_ERROR(h_queries_.Ensure(qbytes, "queries"));
    ENTROKV_RETURN_IF_ERROR(d_queries_.Ensure(pool, qbytes, "queries"));
  }
  if (n_new > 0) {
    const size_t n = static_cast<size_t>(n_new);
    ENTROKV_RETURN_IF_ERROR(d_staged_.Ensure(pool, key_bytes, "appended keys"));
    ENTROKV_RETURN_IF_ERROR(d_plane_norms_.Ensure(
        pool, n * static_cast<size_t>(planes_) * 8, "key norms"));
    ENTROKV_RETURN_IF_ERROR(d_append_pinned_.Ensure(pool, n, "pinned flags"));
    ENTROKV_RETURN_IF_ERROR(h_pinned_.Ensure(n, "pinned flags"));
    if (key_bytes <= kMaxPinnedStagingBytes) {
      ENTROKV_RETURN_IF_ERROR(h_staged_.Ensure(key_bytes, "appended keys"));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaSession::Step(const StepInput& input, StepResult* result,
                               StepTrace* trace) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session: its device state was lost to an earlier CUDA error (",
        broken_.message(), "); close it and open a new one"));
  }
  ENTROKV_RETURN_IF_ERROR(ValidateAndDecode(
      config_, limits_, counters_.last_step, table_.live_slots(), live(), input,
      &decoded_, BackendStepRules(config_)));
  const int64_t added_bytes = decoded_.appended * bytes_per_entry_;
  if (!account_->TryReserve(added_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "append: ", decoded_.appended, " entries (", added_bytes,
        " bytes) would exceed the backend's byte limit ", account_->limit()));
  }
  const bool need_mean =
      RankingNeedsMeanLogit(config_.ranking) || trace != nullptr;
  // A kGroupSum query gives no per-head softmax: a trace's attention stays 0.
  const bool need_attention =
      RankingNeedsAttention(config_.ranking) ||
      (trace != nullptr && config_.shape.query_form == QueryForm::kPerHead);
  absl::Status st = CudaStatus(cudaSetDevice(device_), "selecting the device");
  // The previous step's compaction may still run; its errors surface here.
  if (st.ok()) {
    st = CudaStatus(cudaStreamSynchronize(stream_), "finishing the last step");
    if (!st.ok()) broken_ = st;
  }
  if (st.ok()) {
    st = Prepare(live() + decoded_.appended, decoded_.appended,
                 input.append.keys.size(), need_mean || need_attention);
  }
  if (!st.ok()) {
    // Nothing has changed yet.
    account_->Release(added_bytes);
    return st;
  }
  bool committed = false;
  st = Run(input, need_mean, need_attention, result, trace, &committed);
  if (!st.ok()) {
    if (!committed) account_->Release(added_bytes);
    broken_ = st;
    return st;
  }
  return absl::OkStatus();
}

absl::Status CudaSession::Run(const StepInput& input, bool need_mean,
                              bool need_attention, StepResult* result,
                              StepTrace* trace, bool* committed) {
  const Shape& shape = config_.shape;
  const int64_t n_old = live();
  const int64_t n_new = decoded_.appended;
  const int64_t n = n_old + n_new;
  const int64_t next_index = table_.next_index() + n_new;
  const Ranking ranking = config_.ranking;

  // 1. Append: the keys as sent, copied once; norms and state on the device.
  if (n_new > 0) {
    const size_t key_bytes = input.append.keys.size();
    const std::byte* src = input.append.keys.data();
    if (h_staged_.bytes() >= key_bytes) {
      std::memcpy(h_staged_.as<std::byte>(), src, key_bytes);
      src = h_staged_.as<std::byte>();
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d_staged_.as<std::byte>(), src, key_bytes,
                        cudaMemcpyHostToDevice, stream_),
        "copying appended keys");
    const uint8_t* d_pinned = nullptr;
    if (!input.append.pinned.empty()) {
      std::memcpy(h_pinned_.as<uint8_t>(), input.append.pinned.data(),
                  static_cast<size_t>(n_new));
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(d_append_pinned_.as<uint8_t>(),
                          h_pinned_.as<uint8_t>(), static_cast<size_t>(n_new),
                          cudaMemcpyHostToDevice, stream_),
          "copying pinned flags");
      d_pinned = d_append_pinned_.as<uint8_t>();
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::LaunchAppend(
            {.type = shape.element_type,
             .staged = d_staged_.as<std::byte>(),
             .keys = keys_.as<std::byte>(),
             .capacity = capacity_,
             .planes = planes_,
             .head_dim = shape.vector_dim(),
             .first_pos = n_old,
             .n = n_new,
             .first_index = table_.next_index(),
             .pinned = d_pinned,
             .affinity_init =
                 config_.affinity.update == AffinityUpdate::kSeed ? 0.5 : 0.0,
             .plane_norms = d_plane_norms_.as<double>(),
             .state = State()},
            stream_),
        "appending");
  }

  // 2. Scores z, and per-row softmax statistics.
  const bool scores = (need_mean || need_attention) && n > 0;
  // s_i and a_i average over every (layer, q head), whatever the query form.
  const double inv_rows =
      1.0 / static_cast<double>(int64_t{shape.layers} * shape.q_heads);
  if (scores) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
    float* hq = h_queries_.as<float>();
    for (size_t i = 0; i < decoded_.queries.size(); ++i) {
      hq[i] = decoded_.queries[i] * scale;
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d_queries_.as<float>(), hq,
                        decoded_.queries.size() * sizeof(float),
                        cudaMemcpyHostToDevice, stream_),
        "copying queries");
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::LaunchScore({.type = shape.element_type,
                           .keys = keys_.as<std::byte>(),
                           .capacity = capacity_,
                           .layers = shape.layers,
                           .kv_heads = shape.kv_heads,
                           .group = shape.query_form == QueryForm::kGroupSum
                                        ? 1
                                        : shape.group_size(),
                           .head_dim = shape.vector_dim(),
                           .live = n,
                           .queries = d_queries_.as<float>(),
                           .z = d_z_.as<float>()},
                          stream_),
        "scoring");
    if (need_attention) {
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cuda::LaunchRowStats(d_z_.as<float>(), rows_, n, inv_rows,
                               d_row_max_.as<float>(), d_row_inv_.as<double>(),
                               stream_),
          "softmax statistics");
    }
  }

  // 3. The budget, on the host (it depends on the entropy only).
  const double h = decoded_.entropy;
  const int64_t budget = budget_.Next(h);
  const int64_t need = n - budget;
  const bool blocks = config_.block_size > 1;

  // 4. Append order on the device, when the h2o window or blocks need it.
  int64_t h2o_keep = 0;
  if (ranking == Ranking::kH2o) {
    h2o_keep = static_cast<int64_t>(
        std::ceil(config_.h2o.recent_fraction * static_cast<double>(budget)));
  }
  const bool sort_index =
      n > 0 && ((ranking == Ranking::kH2o && h2o_keep > 0 && h2o_keep < n) ||
                (blocks && need > 0));
  if (sort_index) {
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::LaunchIota(d_iota_.as<int32_t>(), n, stream_), "ordering");
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::SortByIndex(d_temp_.as<void>(), d_temp_.bytes(),
                          d_index_.as<int64_t>(), d_iota_.as<int32_t>(),
                          d_sorted_index_.as<int64_t>(),
                          d_sorted_pos_.as<int32_t>(), n,
                          BitWidth(static_cast<uint64_t>(next_index)), stream_),
        "sorting by append index");
  }
  if (ranking == Ranking::kH2o && n > 0) {
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::LaunchH2oRecentFrom(d_sorted_index_.as<int64_t>(), n, h2o_keep,
                                  d_recent_from_.as<int64_t>(), stream_),
        "h2o window");
  }

  // 5. Aggregation, ranking state update, keep scores and protection.
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cuda::LaunchFinish(
          {.live = n,
           .rows = scores ? rows_ : 0,
           .z = d_z_.as<float>(),
           .row_max = d_row_max_.as<float>(),
           .row_inv = d_row_inv_.as<double>(),
           .need_mean = need_mean,
           .need_attention = need_attention,
           .inv_rows = inv_rows,
           .ranking = ranking,
           .seed_rule = config_.affinity.update == AffinityUpdate::kSeed,
           .beta_h = config_.affinity.beta * h,
           .lambda = config_.affinity.lambda,
           .streaming_sinks = config_.streaming_sinks,
           .seed = config_.seed,
           .step = input.step,
           .h2o_recent_from = d_recent_from_.as<int64_t>(),
           .sinks = config_.protection.sinks,
           .recent = config_.protection.recent,
           .next_index = next_index,
           .state = State(),
           .mean_logit = d_mean_.as<double>(),
           .attention = d_attention_.as<double>(),
           .keep = d_keep_.as<double>(),
           .protect = d_protect_.as<uint8_t>()},
          stream_),
      "updating the ranking");

  // 6. Selection of the k lowest unprotected entries (or blocks).
  int64_t out_count = 0;
  if (need > 0 && n > 0) {
    cuda::SortKey* keys_a = d_keys_a_.as<cuda::SortKey>();
    cuda::SortKey* keys_b = d_keys_b_.as<cuda::SortKey>();
    int32_t* vals_a = d_vals_a_.as<int32_t>();
    int32_t* vals_b = d_vals_b_.as<int32_t>();
    if (!blocks) {
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cuda::LaunchTokenKeys(d_keep_.as<double>(), d_protect_.as<uint8_t>(),
                                d_index_.as<int64_t>(), n, keys_a, vals_a,
                                stream_),
          "selection keys");
    } else {
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cuda::LaunchBlockKeys(
              d_sorted_index_.as<int64_t>(), d_sorted_pos_.as<int32_t>(),
              d_keep_.as<double>(), d_protect_.as<uint8_t>(), n,
              config_.block_size, config_.block_reduce == BlockReduce::kMax,
              keys_a, vals_a, stream_),
          "block selection keys");
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::SortKeys(d_temp_.as<void>(), d_temp_.bytes(), keys_a, keys_b,
                       vals_a, vals_b, n, stream_),
        "selection sort");
    if (!blocks) {
      out_count = need;
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cuda::LaunchEmitTokens(keys_b, vals_b, out_count,
                                 d_out_.as<int32_t>(), stream_),
          "emitting evictions");
    } else {
      const int64_t bs = config_.block_size;
      const int64_t block_count = (need + bs - 1) / bs;
      out_count = block_count * bs;
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cuda::LaunchEmitBlocks(keys_b, vals_b, d_sorted_pos_.as<int32_t>(),
                                 block_count, config_.block_size,
                                 d_out_.as<int32_t>(), stream_),
          "emitting block evictions");
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h_out_.as<int32_t>(), d_out_.as<int32_t>(),
                        static_cast<size_t>(out_count) * 4,
                        cudaMemcpyDeviceToHost, stream_),
        "copying evictions back");
  }

  // 7. The trace, when asked (tests and backend comparisons).
  std::vector<double> t_mean, t_attention, t_keep;
  std::vector<uint8_t> t_protect;
  if (trace != nullptr && n > 0) {
    const size_t count = static_cast<size_t>(n);
    t_mean.resize(count);
    t_attention.resize(count);
    t_keep.resize(count);
    t_protect.resize(count);
    const std::pair<void*, const DeviceBuffer*> copies[] = {
        {t_mean.data(), &d_mean_},
        {t_attention.data(), &d_attention_},
        {t_keep.data(), &d_keep_}};
    for (const auto& [to, from] : copies) {
      ENTROKV_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(to, from->as<void>(), count * 8,
                          cudaMemcpyDeviceToHost, stream_),
          "copying the trace");
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(t_protect.data(), d_protect_.as<void>(), count,
                        cudaMemcpyDeviceToHost, stream_),
        "copying the trace");
  }
  ENTROKV_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                               "running the step");

  // The device part succeeded: commit the append to the host mirror.
  *committed = true;
  for (int64_t e = 0; e < n_new; ++e) {
    table_.Append(input.append.slot_ids[e],
                  !input.append.pinned.empty() && input.append.pinned[e] != 0);
  }
  if (trace != nullptr) {
    trace->slots.clear();
    trace->mean_logit.clear();
    trace->attention.clear();
    trace->rank_score.clear();
    trace->protected_.clear();
    if (n > 0) {
      for (int32_t p : table_.AppendOrder()) {
        trace->slots.push_back(table_.slots()[p]);
        trace->mean_logit.push_back(static_cast<float>(t_mean[p]));
        // Group-sum queries give no per-head softmax (step-semantics §3).
        trace->attention.push_back(config_.shape.query_form ==
                                           QueryForm::kPerHead
                                       ? static_cast<float>(t_attention[p])
                                       : 0.0f);
        trace->rank_score.push_back(t_keep[p]);
        trace->protected_.push_back(t_protect[p]);
      }
    }
  }

  // Evicted positions, answered in append order.
  evict_.clear();
  const int32_t* out = h_out_.as<int32_t>();
  for (int64_t i = 0; i < out_count; ++i) {
    if (out[i] >= 0) evict_.push_back(out[i]);
  }
  table_.SortByAppendOrder(&evict_);
  result->evicted.clear();
  for (int32_t p : evict_) result->evicted.push_back(table_.slots()[p]);

  // Compaction (slot_table.h): the mirror moves at once; the device gets the
  // net moves, whose sources (>= the new live count) and destinations (below
  // it) are disjoint, so they run in parallel.
  table_.Remove(&evict_, &moves_);
  const int64_t evicted = static_cast<int64_t>(result->evicted.size());
  account_->Release(evicted * bytes_per_entry_);
  counters_.Record(input.step, n, evicted, budget);
  result->live = live();
  result->budget = budget;
  result->entropy = h;
  result->deferred = false;

  if (!moves_.empty()) {
    int32_t* moves = h_moves_.as<int32_t>();
    int64_t count = 0;
    for (const SlotTable::Move& m : moves_) {
      moves[2 * count] = m.dst;
      moves[2 * count + 1] = m.src;
      ++count;
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d_moves_.as<int32_t>(), moves,
                        static_cast<size_t>(count) * 8, cudaMemcpyHostToDevice,
                        stream_),
        "copying moves");
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::LaunchMoves(d_moves_.as<int32_t>(), count, keys_.as<std::byte>(),
                          capacity_, planes_, row_bytes_, State(), stream_),
        "compacting");
  }
  return absl::OkStatus();
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const BackendOptions& options, std::string description)
      : device_(options.device),
        description_(std::move(description)),
        account_(std::make_shared<ByteAccount>(options.max_bytes)),
        pool_(std::make_shared<DevicePool>()) {}

  BackendKind kind() const override { return BackendKind::kCuda; }
  std::string Describe() const override { return description_; }
  int64_t bytes_held() const override { return account_->held(); }

  absl::StatusOr<std::unique_ptr<SessionState>> CreateSession(
      const SessionConfig& config, const SessionLimits& limits) override {
    ENTROKV_RETURN_IF_ERROR(ValidateSessionConfig(config));
    ENTROKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_),
                                 "selecting the device");
    cudaStream_t stream = nullptr;
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
        "creating the session's stream");
    // Cadence and block summaries are host-side layers shared with the CPU
    // backend (layered_session.h), so both decide alike by construction.
    return CreateLayeredSession(
        config, limits, account_,
        [&](const SessionConfig& c, const SessionLimits& l) {
          return std::make_unique<CudaSession>(c, l, account_, pool_, device_,
                                               stream);
        });
  }

 private:
  const int device_;
  const std::string description_;
  std::shared_ptr<ByteAccount> account_;
  std::shared_ptr<DevicePool> pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const BackendOptions& options) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat(
        "cuda: no usable device (cudaGetDeviceCount: ", cudaGetErrorName(err),
        ", ", cudaGetErrorString(err), ")"));
  }
  if (count == 0) {
    return absl::UnavailableError("cuda: no device present");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::UnavailableError(
        absl::StrCat("cuda: device ", options.device, " not present (", count,
                     count == 1 ? " device)" : " devices)"));
  }
  ENTROKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device),
                               "selecting the device");
  cudaDeviceProp prop{};
  ENTROKV_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device),
                               "reading device properties");
  std::string description =
      absl::StrCat("cuda:", options.device, " ", prop.name, " (",
                   (prop.totalGlobalMem + (size_t{1} << 29)) >> 30, " GiB, sm_",
                   prop.major, prop.minor, ")");
  return std::make_unique<CudaBackend>(options, std::move(description));
}

}  // namespace entrokv::internal
