// A CUDA session's device state: growing the key store and the per-entry
// arrays, and sizing the step's scratch (cuda_session.h, docs/cuda.md).

#include "cuda_session.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "cuda_kernels.h"
#include "cuda_memory.h"
#include "entrokv/core/status_macros.h"

namespace entrokv::internal {
namespace {

// Appends up to this many key bytes go through the session's pinned staging
// buffer (a truly asynchronous copy); larger prefill chunks are copied from
// the caller's memory directly.
constexpr size_t kMaxPinnedStagingBytes = size_t{16} << 20;

}  // namespace

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
    counters_.bytes_copied += static_cast<int64_t>(width) * planes_;
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
    if (config_.ranking == Ranking::kKeyDiff ||
        config_.ranking == Ranking::kExpected ||
        config_.ranking == Ranking::kRkv) {
      ENTROKV_RETURN_IF_ERROR(d_ranked_.Ensure(pool, cap * 8, "keep scores"));
    }
    if (config_.ranking == Ranking::kRkv) {
      const size_t sample = static_cast<size_t>(config_.rkv.sample);
      const size_t planes = static_cast<size_t>(planes_);
      ENTROKV_RETURN_IF_ERROR(d_rkv_r_.Ensure(pool, cap * planes * 8,
                                              "redundancy sums"));
      ENTROKV_RETURN_IF_ERROR(
          d_rkv_rows_.Ensure(pool, sample * 4, "reference rows"));
      ENTROKV_RETURN_IF_ERROR(
          h_rkv_rows_.Ensure(sample * 4, "reference rows"));
      ENTROKV_RETURN_IF_ERROR(d_rkv_retain_.Ensure(pool, sample * planes * 4,
                                                   "duplicates"));
      ENTROKV_RETURN_IF_ERROR(
          d_rkv_stats_.Ensure(pool, planes * 16, "redundancy softmax"));
    }
    if (config_.ranking == Ranking::kKeyDiff ||
        config_.ranking == Ranking::kRkv) {
      ENTROKV_RETURN_IF_ERROR(d_kd_norm_.Ensure(
          pool, cap * static_cast<size_t>(planes_) * 8, "key norms"));
    }
    if (config_.ranking == Ranking::kExpected) {
      ENTROKV_RETURN_IF_ERROR(d_ez_.Ensure(
          pool, cap * static_cast<size_t>(rows_) * 4, "expected logits"));
    }
    scratch_capacity_ = capacity_;
  }
  if (config_.ranking == Ranking::kKeyDiff && d_kd_anchor_.bytes() == 0) {
    ENTROKV_RETURN_IF_ERROR(d_kd_anchor_.Ensure(
        pool,
        static_cast<size_t>(planes_) *
            (static_cast<size_t>(config_.shape.vector_dim()) + 1) * 8,
        "key anchors"));
  }
  if (config_.ranking == Ranking::kExpected && d_mu_.bytes() == 0) {
    const size_t q = static_cast<size_t>(config_.shape.query_elements());
    ENTROKV_RETURN_IF_ERROR(d_ez_max_.Ensure(
        pool, static_cast<size_t>(rows_) * 4, "expected row maxima"));
    ENTROKV_RETURN_IF_ERROR(d_ez_inv_.Ensure(
        pool, static_cast<size_t>(rows_) * 8, "expected row sums"));
    ENTROKV_RETURN_IF_ERROR(d_mu_.Ensure(pool, q * 4, "query mean"));
    ENTROKV_RETURN_IF_ERROR(d_var_.Ensure(pool, q * 8, "query variance"));
    ENTROKV_RETURN_IF_ERROR(h_mu_.Ensure(q * 4, "query mean"));
    ENTROKV_RETURN_IF_ERROR(h_var_.Ensure(q * 8, "query variance"));
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

}  // namespace entrokv::internal
