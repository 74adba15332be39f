#include "tinyllama/model.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "entrokv/core/status_macros.h"
#include "tinyllama/ops.h"

namespace entrokv::tinyllama {

namespace {

constexpr size_t kHeaderInts = 7;

}  // namespace

absl::StatusOr<Model> Model::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("model: cannot open '", path, "'"));
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  auto model = FromBytes(bytes);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat(path, ": ", model.status().message()));
  }
  return model;
}

absl::StatusOr<Model> Model::FromBytes(absl::Span<const char> bytes) {
  if (bytes.size() < kHeaderInts * sizeof(int32_t)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: ", bytes.size(), " bytes is shorter than the 28-byte header"));
  }
  int32_t header[kHeaderInts];
  std::memcpy(header, bytes.data(), sizeof(header));
  Model model;
  ModelConfig& c = model.config_;
  c.dim = header[0];
  c.hidden_dim = header[1];
  c.layers = header[2];
  c.heads = header[3];
  c.kv_heads = header[4];
  c.vocab_size = header[5];
  c.seq_len = header[6];
  const char* names[] = {"dim",        "hidden_dim", "n_layers", "n_heads",
                         "n_kv_heads", "vocab_size", "seq_len"};
  for (size_t i = 0; i < kHeaderInts; ++i) {
    // Bounds keep the size arithmetic below far from overflow.
    if (header[i] <= 0 || header[i] > (1 << 16)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model: header field ", names[i], " = ", header[i],
          " is out of range (the classifier must be shared: vocab_size > 0)"));
    }
  }
  if (c.dim % c.heads != 0 || c.heads % c.kv_heads != 0 ||
      c.head_dim() % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: dim ", c.dim, ", n_heads ", c.heads, ", n_kv_heads ",
        c.kv_heads, " do not give an even head size shared by GQA groups"));
  }
  const size_t dim = c.dim, hidden = c.hidden_dim, layers = c.layers;
  const size_t kv_dim = c.kv_dim(), half_head = c.head_dim() / 2;
  size_t offset = 0;
  auto take = [&offset](size_t n) {
    const size_t at = offset;
    offset += n;
    return at;
  };
  model.token_embedding_ =
      take(size_t{static_cast<size_t>(c.vocab_size)} * dim);
  model.rms_att_ = take(layers * dim);
  model.wq_ = take(layers * dim * dim);
  model.wk_ = take(layers * kv_dim * dim);
  model.wv_ = take(layers * kv_dim * dim);
  model.wo_ = take(layers * dim * dim);
  model.rms_ffn_ = take(layers * dim);
  model.w1_ = take(layers * hidden * dim);
  model.w2_ = take(layers * dim * hidden);
  model.w3_ = take(layers * hidden * dim);
  model.rms_final_ = take(dim);
  model.freq_cis_real_ = take(static_cast<size_t>(c.seq_len) * half_head);
  model.freq_cis_imag_ = take(static_cast<size_t>(c.seq_len) * half_head);
  const size_t expected = sizeof(header) + offset * sizeof(float);
  if (bytes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model: ", bytes.size(), " bytes, but the legacy llama2.c layout ",
        "(shared classifier, freq_cis tables) of this header needs ", expected,
        " bytes"));
  }
  model.weights_.resize(offset);
  std::memcpy(model.weights_.data(), bytes.data() + sizeof(header),
              offset * sizeof(float));
  for (float w : model.weights_) {
    if (!std::isfinite(w)) {
      return absl::InvalidArgumentError("model: a weight is NaN or infinite");
    }
  }
  return model;
}

KvCache Model::NewCache(int host_capacity) const {
  return KvCache(config_.layers, config_.kv_dim(), config_.seq_len,
                 host_capacity);
}

absl::Status Model::Forward(int token, int position, KvCache* cache,
                            ForwardOutput* out) const {
  const ModelConfig& c = config_;
  if (token < 0 || token >= c.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forward: token ", token, " is outside [0, ", c.vocab_size, ")"));
  }
  if (position < 0 || position >= c.seq_len) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forward: position ", position, " is outside [0, ", c.seq_len, ")"));
  }
  if (cache->layers() != c.layers || cache->kv_dim() != c.kv_dim()) {
    return absl::InvalidArgumentError("forward: cache shape does not match");
  }
  ENTROKV_ASSIGN_OR_RETURN(const int slot, cache->Append(position));
  out->slot = slot;

  const size_t dim = c.dim, hidden = c.hidden_dim, kv_dim = c.kv_dim();
  const int head_dim = c.head_dim();
  const int group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  out->logits.resize(c.vocab_size);
  out->queries.resize(c.layers * dim);
  out->keys.resize(c.layers * kv_dim);

  std::vector<float> x(Tensor(token_embedding_ + token * dim, dim).begin(),
                       Tensor(token_embedding_ + token * dim, dim).end());
  std::vector<float> xb(dim), xb2(dim), hb(hidden), hb2(hidden);
  std::vector<float> att(cache->capacity());
  const auto rope_cos =
      Tensor(freq_cis_real_ + position * (head_dim / 2), head_dim / 2);
  const auto rope_sin =
      Tensor(freq_cis_imag_ + position * (head_dim / 2), head_dim / 2);
  const std::vector<int>& live = cache->live();

  for (int l = 0; l < c.layers; ++l) {
    RmsNorm(x, Tensor(rms_att_ + l * dim, dim), absl::MakeSpan(xb));
    absl::Span<float> q = absl::MakeSpan(out->queries).subspan(l * dim, dim);
    absl::Span<float> k = cache->Key(l, slot);
    absl::Span<float> v = cache->Value(l, slot);
    MatVec(Tensor(wq_ + l * dim * dim, dim * dim), xb, q);
    MatVec(Tensor(wk_ + l * kv_dim * dim, kv_dim * dim), xb, k);
    MatVec(Tensor(wv_ + l * kv_dim * dim, kv_dim * dim), xb, v);
    ApplyRope(q, head_dim, rope_cos, rope_sin);
    ApplyRope(k, head_dim, rope_cos, rope_sin);
    std::copy(k.begin(), k.end(), out->keys.begin() + l * kv_dim);

    // Attention of every query head over the live entries, in append order.
    for (int h = 0; h < c.heads; ++h) {
      const float* qh = q.data() + h * head_dim;
      const int kv_offset = (h / group) * head_dim;
      const size_t n = live.size();
      for (size_t i = 0; i < n; ++i) {
        const float* kh = cache->Key(l, live[i]).data() + kv_offset;
        float score = 0.0f;
        for (int d = 0; d < head_dim; ++d) score += qh[d] * kh[d];
        att[i] = score * scale;
      }
      Softmax(absl::MakeSpan(att.data(), n));
      float* xh = xb.data() + h * head_dim;
      std::fill(xh, xh + head_dim, 0.0f);
      for (size_t i = 0; i < n; ++i) {
        const float* vh = cache->Value(l, live[i]).data() + kv_offset;
        for (int d = 0; d < head_dim; ++d) xh[d] += att[i] * vh[d];
      }
    }
    MatVec(Tensor(wo_ + l * dim * dim, dim * dim), xb, absl::MakeSpan(xb2));
    for (size_t i = 0; i < dim; ++i) x[i] += xb2[i];

    RmsNorm(x, Tensor(rms_ffn_ + l * dim, dim), absl::MakeSpan(xb));
    MatVec(Tensor(w1_ + l * hidden * dim, hidden * dim), xb,
           absl::MakeSpan(hb));
    MatVec(Tensor(w3_ + l * hidden * dim, hidden * dim), xb,
           absl::MakeSpan(hb2));
    Swiglu(absl::MakeSpan(hb), hb2);
    MatVec(Tensor(w2_ + l * dim * hidden, dim * hidden), hb,
           absl::MakeSpan(xb));
    for (size_t i = 0; i < dim; ++i) x[i] += xb[i];
  }
  RmsNorm(x, Tensor(rms_final_, dim), absl::MakeSpan(x));
  MatVec(Tensor(token_embedding_, c.vocab_size * dim), x,
         absl::MakeSpan(out->logits));
  return absl::OkStatus();
}

}  // namespace entrokv::tinyllama
