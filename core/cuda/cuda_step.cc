// The step of a CUDA session: validation, the device's share of the step
// enqueued on the session's stream in the order of docs/step-semantics.md,
// then the commit to the host mirror (cuda_session.h, docs/cuda.md).

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cpu_kernels.h"
#include "cuda_kernels.h"
#include "cuda_memory.h"
#include "cuda_session.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"
#include "entrokv/core/status_macros.h"
#include "slot_table.h"
#include "step_common.h"

namespace entrokv::internal {
namespace {

int BitWidth(uint64_t x) {
  int bits = 0;
  while (x != 0) {
    ++bits;
    x >>= 1;
  }
  return bits;
}

}  // namespace

absl::Status CudaSession::Step(const StepInput& input, StepResult* result,
                               StepTrace* trace) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "session: its device state was lost to an earlier CUDA error (",
        broken_.message(), "); close it and open a new one"));
  }
  const ScoreNeeds needs = StepScoreNeeds(config_, trace != nullptr);
  const bool need_mean = needs.mean;
  const bool need_attention = needs.attention;
  // LaunchScoring reads the queries as sent; only the expected ranking's
  // statistics want them decoded (unscaled) on their own.
  StepRules rules = BackendStepRules(config_, needs);
  rules.decode_queries = config_.ranking == Ranking::kExpected;
  ENTROKV_RETURN_IF_ERROR(
      ValidateAndDecode(config_, limits_, counters_.last_step,
                        table_.live_slots(), live(), input, &decoded_, rules));
  const int64_t added_bytes = decoded_.appended * bytes_per_entry_;
  if (!account_->TryReserve(added_bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "append: ", decoded_.appended, " entries (", added_bytes,
        " bytes) would exceed the backend's byte limit ", account_->limit()));
  }
  counters_.bytes_copied += decoded_.bytes_written;
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

  // 1. Append: the keys as sent, copied once; norms and state on the device.
  if (n_new > 0) {
    ENTROKV_RETURN_IF_ERROR(UploadAppend(input, n_old, n_new));
  }

  // 2. Scores z, and per-row softmax statistics.
  // keydiff's steps may come without queries (section 1): nothing to score.
  const bool scores =
      (need_mean || need_attention) && n > 0 && decoded_.has_queries;
  // s_i and a_i average over every (layer, q head), whatever the query form.
  const double inv_rows =
      1.0 / static_cast<double>(int64_t{shape.layers} * shape.q_heads);
  if (scores) {
    ENTROKV_RETURN_IF_ERROR(
        LaunchScoring(input.queries.data(), n, need_attention, inv_rows));
  }

  // 3. The budget, on the host (it depends on the entropy only).
  const double h = decoded_.entropy;
  const int64_t budget = budget_.Next(h);
  const int64_t need = n - budget;
  const std::optional<double> threshold = EvictionThreshold(config_);
  // Whether this step may evict (the selection and what it reads run).
  const bool selects = need > 0 || threshold.has_value();

  // 3b. keydiff and expected, whose keep scores read the stored keys; like
  // the CPU backend, only when something is evicted or traced.
  const Ranking ranking = config_.ranking;
  if (ranking == Ranking::kExpected) {
    query_stats_.Update(decoded_.queries.data(), decoded_.queries.size(),
                        config_.expected.ema_rate);
  }
  const bool ranked =
      (ranking == Ranking::kKeyDiff || ranking == Ranking::kExpected ||
       ranking == Ranking::kRkv) &&
      n > 0 && (selects || trace != nullptr);
  if (ranked) ENTROKV_RETURN_IF_ERROR(LaunchKeyRanking(n));

  // 4. Append order on the device, when the h2o window or blocks need it.
  ENTROKV_RETURN_IF_ERROR(LaunchAppendOrder(n, next_index, budget, selects));

  // 5. Aggregation, ranking state update, keep scores and protection.
  ENTROKV_RETURN_IF_ERROR(LaunchFinishStep(input, n, next_index, scores,
                                           need_mean, need_attention, inv_rows,
                                           h, ranked));

  // 6. Selection of the k lowest unprotected entries (or blocks).
  int64_t out_count = 0;
  if (selects && n > 0) {
    ENTROKV_RETURN_IF_ERROR(SelectEvictions(n, need, threshold, &out_count));
  }

  // 7. The trace, when asked (tests and backend comparisons).
  TraceCopy copy;
  if (trace != nullptr && n > 0) {
    ENTROKV_RETURN_IF_ERROR(DownloadTrace(n, &copy));
  }
  ENTROKV_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_),
                               "running the step");

  // The device part succeeded: commit the append to the host mirror.
  *committed = true;
  return CommitStep(input, n, budget, h, out_count, copy, result, trace);
}

absl::Status CudaSession::UploadAppend(const StepInput& input, int64_t n_old,
                                       int64_t n_new) {
  const Shape& shape = config_.shape;
  const size_t key_bytes = input.append.keys.size();
  const std::byte* src = input.append.keys.data();
  if (h_staged_.bytes() >= key_bytes) {
    std::memcpy(h_staged_.as<std::byte>(), src, key_bytes);
    src = h_staged_.as<std::byte>();
    counters_.bytes_copied += static_cast<int64_t>(key_bytes);
  }
  // To the device's staging buffer, then by the append kernel into storage.
  counters_.bytes_copied += 2 * static_cast<int64_t>(key_bytes);
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_staged_.as<std::byte>(), src, key_bytes,
                      cudaMemcpyHostToDevice, stream_),
      "copying appended keys");
  const uint8_t* d_pinned = nullptr;
  if (!input.append.pinned.empty()) {
    std::memcpy(h_pinned_.as<uint8_t>(), input.append.pinned.data(),
                static_cast<size_t>(n_new));
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(d_append_pinned_.as<uint8_t>(), h_pinned_.as<uint8_t>(),
                        static_cast<size_t>(n_new), cudaMemcpyHostToDevice,
                        stream_),
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
               config_.ranking == Ranking::kBirth
                   ? last_entropy_.value_or(decoded_.entropy)
                   : (config_.affinity.update == AffinityUpdate::kSeed ? 0.5
                                                                       : 0.0),
           .plane_norms = d_plane_norms_.as<double>(),
           .state = State()},
          stream_),
      "appending");
  return absl::OkStatus();
}

absl::Status CudaSession::LaunchScoring(const std::byte* raw, int64_t n,
                                        bool need_attention, double inv_rows) {
  const Shape& shape = config_.shape;
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  // Decoded and scaled from the bytes as sent into pinned memory in one pass
  // (the CPU backend's PrepareQueries, bit for bit decode-then-scale), then
  // to the device. A group-sum query is one vector per kv head already.
  const int32_t group =
      shape.query_form == QueryForm::kGroupSum ? 1 : shape.group_size();
  const int64_t planes = int64_t{shape.layers} * shape.kv_heads;
  const size_t elements = static_cast<size_t>(shape.query_elements());
  PrepareQueries(shape.element_type, raw, planes, group, shape.vector_dim(),
                 scale, h_queries_.as<float>(), nullptr);
  counters_.bytes_copied += static_cast<int64_t>(elements * sizeof(float));
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_queries_.as<float>(), h_queries_.as<float>(),
                      elements * sizeof(float), cudaMemcpyHostToDevice,
                      stream_),
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
  return absl::OkStatus();
}

absl::Status CudaSession::LaunchAppendOrder(int64_t n, int64_t next_index,
                                            int64_t budget, bool selects) {
  const Ranking ranking = config_.ranking;
  const bool blocks = config_.block_size > 1;
  int64_t h2o_keep = 0;
  if (ranking == Ranking::kH2o) {
    h2o_keep = static_cast<int64_t>(
        std::ceil(config_.h2o.recent_fraction * static_cast<double>(budget)));
  }
  const bool sort_index =
      n > 0 && ((ranking == Ranking::kH2o && h2o_keep > 0 && h2o_keep < n) ||
                (blocks && selects));
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
  return absl::OkStatus();
}

absl::Status CudaSession::LaunchKeyRanking(int64_t n) {
  const Shape& shape = config_.shape;
  if (config_.ranking == Ranking::kRkv) return LaunchRedundancy(n);
  if (config_.ranking == Ranking::kKeyDiff) {
    double* anchor = d_kd_anchor_.as<double>();
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::LaunchKeyDiff(
            {.type = shape.element_type,
             .keys = keys_.as<std::byte>(),
             .capacity = capacity_,
             .planes = planes_,
             .dim = shape.vector_dim(),
             .live = n,
             .inv_norm = d_kd_norm_.as<double>(),
             .anchor = anchor,
             .anchor_norm = anchor + int64_t{planes_} * shape.vector_dim(),
             .out = d_ranked_.as<double>()},
            stream_),
        "keydiff scores");
    return absl::OkStatus();
  }
  // expected: the μ term as section 3's z with float(μ)/sqrt(head_dim) as
  // the query, then σ²'s term, then the rows' softmax statistics.
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const std::vector<double>& mean = query_stats_.mean();
  const std::vector<double>& var = query_stats_.var();
  float* hmu = h_mu_.as<float>();
  for (size_t i = 0; i < mean.size(); ++i) {
    hmu[i] = static_cast<float>(mean[i]) * scale;
  }
  std::memcpy(h_var_.as<double>(), var.data(), var.size() * sizeof(double));
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_mu_.as<float>(), hmu, mean.size() * sizeof(float),
                      cudaMemcpyHostToDevice, stream_),
      "copying the query mean");
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_var_.as<double>(), h_var_.as<double>(),
                      var.size() * sizeof(double), cudaMemcpyHostToDevice,
                      stream_),
      "copying the query variance");
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cuda::LaunchScore({.type = shape.element_type,
                         .keys = keys_.as<std::byte>(),
                         .capacity = capacity_,
                         .layers = shape.layers,
                         .kv_heads = shape.kv_heads,
                         .group = shape.group_size(),
                         .head_dim = shape.vector_dim(),
                         .live = n,
                         .queries = d_mu_.as<float>(),
                         .z = d_ez_.as<float>()},
                        stream_),
      "expected logits");
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cuda::LaunchVarianceTerm({.type = shape.element_type,
                                .keys = keys_.as<std::byte>(),
                                .capacity = capacity_,
                                .layers = shape.layers,
                                .kv_heads = shape.kv_heads,
                                .group = shape.group_size(),
                                .dim = shape.vector_dim(),
                                .head_dim = shape.head_dim,
                                .live = n,
                                .var = d_var_.as<double>(),
                                .z = d_ez_.as<float>()},
                               stream_),
      "expected variance term");
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cuda::LaunchRowStats(d_ez_.as<float>(), rows_, n,
                           1.0 / static_cast<double>(rows_),
                           d_ez_max_.as<float>(), d_ez_inv_.as<double>(),
                           stream_),
      "expected softmax statistics");
  return absl::OkStatus();
}

absl::Status CudaSession::LaunchRedundancy(int64_t n) {
  // The reference rows from the host mirror's append indices (the step's
  // appends are at positions n_old.. with the next indices).
  const int64_t n_old = live();
  rkv_index_.assign(table_.indices().begin(), table_.indices().end());
  for (int64_t p = n_old; p < n; ++p) {
    rkv_index_.push_back(table_.next_index() + (p - n_old));
  }
  RedundancyRows(rkv_index_.data(), n, config_.rkv.sample, &rkv_rows_);
  const size_t row_bytes = rkv_rows_.size() * sizeof(int32_t);
  std::memcpy(h_rkv_rows_.as<int32_t>(), rkv_rows_.data(), row_bytes);
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_rkv_rows_.as<int32_t>(), h_rkv_rows_.as<int32_t>(),
                      row_bytes, cudaMemcpyHostToDevice, stream_),
      "copying the reference rows");
  const Shape& shape = config_.shape;
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cuda::LaunchRedundancy(
          {.type = shape.element_type,
           .keys = keys_.as<std::byte>(),
           .capacity = capacity_,
           .planes = planes_,
           .dim = shape.vector_dim(),
           .live = n,
           .index = d_index_.as<int64_t>(),
           .rows = d_rkv_rows_.as<int32_t>(),
           .row_count = static_cast<int32_t>(rkv_rows_.size()),
           .inv_norm = d_kd_norm_.as<double>(),
           .retain = d_rkv_retain_.as<int32_t>(),
           .r = d_rkv_r_.as<double>(),
           .stats = d_rkv_stats_.as<double>(),
           .out = d_ranked_.as<double>()},
          stream_),
      "rkv redundancy");
  return absl::OkStatus();
}

void CudaSession::AddKeyRanking(bool ranked, cuda::FinishArgs* args) const {
  args->rkv_lambda = config_.rkv.lambda;
  if (!ranked) return;
  if (config_.ranking == Ranking::kRkv) {
    args->redundancy = d_ranked_.as<double>();
  } else if (config_.ranking == Ranking::kKeyDiff) {
    args->key_diff = d_ranked_.as<double>();
  } else if (config_.ranking == Ranking::kExpected) {
    args->expected_rows = rows_;
    args->expected_z = d_ez_.as<float>();
    args->expected_max = d_ez_max_.as<float>();
    args->expected_inv = d_ez_inv_.as<double>();
  }
}

absl::Status CudaSession::LaunchFinishStep(const StepInput& input, int64_t n,
                                           int64_t next_index, bool scores,
                                           bool need_mean, bool need_attention,
                                           double inv_rows, double h,
                                           bool ranked) {
  const Ranking ranking = config_.ranking;
  cuda::FinishArgs args{.live = n,
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
           .protect = d_protect_.as<uint8_t>()};
  args.birth_weight = config_.birth.weight;
  AddKeyRanking(ranked, &args);
  ENTROKV_CUDA_RETURN_IF_ERROR(cuda::LaunchFinish(args, stream_),
                               "updating the ranking");
  return absl::OkStatus();
}

absl::Status CudaSession::SelectEvictions(int64_t n, int64_t need,
                                          std::optional<double> threshold,
                                          int64_t* out_count) {
  const bool blocks = config_.block_size > 1;
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
        cuda::LaunchBlockKeys(d_sorted_index_.as<int64_t>(),
                              d_sorted_pos_.as<int32_t>(), d_keep_.as<double>(),
                              d_protect_.as<uint8_t>(), n, config_.block_size,
                              config_.block_reduce == BlockReduce::kMax, keys_a,
                              vals_a, stream_),
        "block selection keys");
  }
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cuda::SortKeys(d_temp_.as<void>(), d_temp_.bytes(), keys_a, keys_b,
                     vals_a, vals_b, n, stream_),
      "selection sort");
  // Under a threshold, how many go is known only on the device: every
  // candidate is emitted, as -1 when it stays (the host skips those).
  cuda::EmitLimit limit{.use_tau = threshold.has_value(),
                        .tau = threshold.value_or(0.0)};
  if (!blocks) {
    limit.take = std::max<int64_t>(need, 0);
    *out_count = threshold ? n : limit.take;
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::LaunchEmitTokens(keys_b, vals_b, *out_count, limit,
                               d_out_.as<int32_t>(), stream_),
        "emitting evictions");
  } else {
    const int64_t bs = config_.block_size;
    limit.take = need > 0 ? (need + bs - 1) / bs : 0;
    // At most n / bs blocks are whole, and candidates sort first.
    const int64_t block_count = threshold ? n / bs : limit.take;
    *out_count = block_count * bs;
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cuda::LaunchEmitBlocks(keys_b, vals_b, d_sorted_pos_.as<int32_t>(),
                               block_count, limit, config_.block_size,
                               d_out_.as<int32_t>(), stream_),
        "emitting block evictions");
  }
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(h_out_.as<int32_t>(), d_out_.as<int32_t>(),
                      static_cast<size_t>(*out_count) * 4,
                      cudaMemcpyDeviceToHost, stream_),
      "copying evictions back");
  return absl::OkStatus();
}

absl::Status CudaSession::DownloadTrace(int64_t n, TraceCopy* copy) {
  const size_t count = static_cast<size_t>(n);
  copy->mean.resize(count);
  copy->attention.resize(count);
  copy->keep.resize(count);
  copy->protect.resize(count);
  const std::pair<void*, const DeviceBuffer*> copies[] = {
      {copy->mean.data(), &d_mean_},
      {copy->attention.data(), &d_attention_},
      {copy->keep.data(), &d_keep_}};
  for (const auto& [to, from] : copies) {
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(to, from->as<void>(), count * 8, cudaMemcpyDeviceToHost,
                        stream_),
        "copying the trace");
  }
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(copy->protect.data(), d_protect_.as<void>(), count,
                      cudaMemcpyDeviceToHost, stream_),
      "copying the trace");
  return absl::OkStatus();
}

absl::Status CudaSession::CommitStep(const StepInput& input, int64_t n,
                                     int64_t budget, double h,
                                     int64_t out_count, const TraceCopy& copy,
                                     StepResult* result, StepTrace* trace) {
  const int64_t n_new = decoded_.appended;
  last_entropy_ = h;
  for (int64_t e = 0; e < n_new; ++e) {
    table_.Append(input.append.slot_ids[e],
                  !input.append.pinned.empty() && input.append.pinned[e] != 0);
  }
  if (trace != nullptr) {
    FillTrace(n, copy, trace);
  }

  // Evicted positions, answered in append order.
  evict_.clear();
  const int32_t* out = h_out_.as<int32_t>();
  for (int64_t i = 0; i < out_count; ++i) {
    if (out[i] >= 0) evict_.push_back(out[i]);
  }
  table_.SortByAppendOrder(&evict_);
  result->evicted.clear();
  result->demoted.clear();  // No demote tier here (CreateSession refuses one).
  result->promoted.clear();
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
    ENTROKV_RETURN_IF_ERROR(LaunchCompaction());
  }
  return absl::OkStatus();
}

void CudaSession::FillTrace(int64_t n, const TraceCopy& copy,
                            StepTrace* trace) {
  trace->slots.clear();
  trace->mean_logit.clear();
  trace->attention.clear();
  trace->rank_score.clear();
  trace->protected_.clear();
  trace->demoted.clear();
  if (n > 0) {
    for (int32_t p : table_.AppendOrder()) {
      trace->slots.push_back(table_.slots()[p]);
      trace->mean_logit.push_back(static_cast<float>(copy.mean[p]));
      // Group-sum queries give no per-head softmax (step-semantics §3).
      trace->attention.push_back(config_.shape.query_form == QueryForm::kPerHead
                                     ? static_cast<float>(copy.attention[p])
                                     : 0.0f);
      trace->rank_score.push_back(copy.keep[p]);
      trace->protected_.push_back(copy.protect[p]);
    }
  }
}

absl::Status CudaSession::LaunchCompaction() {
  int32_t* moves = h_moves_.as<int32_t>();
  int64_t count = 0;
  for (const SlotTable::Move& m : moves_) {
    moves[2 * count] = m.dst;
    moves[2 * count + 1] = m.src;
    ++count;
  }
  ENTROKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_moves_.as<int32_t>(), moves,
                                               static_cast<size_t>(count) * 8,
                                               cudaMemcpyHostToDevice, stream_),
                               "copying moves");
  ENTROKV_CUDA_RETURN_IF_ERROR(
      cuda::LaunchMoves(d_moves_.as<int32_t>(), count, keys_.as<std::byte>(),
                        capacity_, planes_, row_bytes_, State(), stream_),
      "compacting");
  counters_.bytes_copied += count * planes_ * row_bytes_;
  return absl::OkStatus();
}

}  // namespace entrokv::internal
