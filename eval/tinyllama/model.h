// Model: the stories260K Llama (llama2.c checkpoint) and its forward pass.
//
// The checkpoint is llama2.c's legacy (version 0) export: a header of 7 int32
// (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a
// positive vocab_size means the classifier shares the token embedding), then
// float32 tensors: token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2,
// w3, rms_final, freq_cis_real, freq_cis_imag (docs/results-tinystories.md,
// "Data", gives the shapes). Load() accepts exactly that layout and answers
// InvalidArgument, naming what is wrong, for any other file.
//
// Forward() runs one token at one absolute position: RMSNorm (eps 1e-5), RoPE
// from the checkpoint's freq_cis tables, grouped-query attention over the live
// entries of a KvCache (the new token's own entry included), SwiGLU feed
// forward, final RMSNorm and the shared classifier. It can hand out the
// post-RoPE query and key of every layer, which is what an eviction decider
// scores.
//
// Thread-safety: a loaded Model is immutable; Forward() is const and may run on
// several threads with distinct caches and outputs.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_MODEL_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tinyllama/kv_cache.h"

namespace entrokv::tinyllama {

struct ModelConfig {
  int dim = 0;
  int hidden_dim = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int vocab_size = 0;
  int seq_len = 0;

  int head_dim() const { return dim / heads; }
  int kv_dim() const { return kv_heads * head_dim(); }
};

// What one Forward() produces. Vectors are resized by Forward().
struct ForwardOutput {
  std::vector<float> logits;  // vocab_size
  // Post-RoPE queries, [layer][head][head_dim].
  std::vector<float> queries;  // layers · dim
  // Post-RoPE keys of the new token, [layer][kv_head][head_dim].
  std::vector<float> keys;  // layers · kv_dim
  int slot = -1;            // The cache slot the token was written to.
};

class Model {
 public:
  // Reads and validates a checkpoint.
  static absl::StatusOr<Model> Load(const std::string& path);
  // Builds a model from a checkpoint's bytes (as Load reads them).
  static absl::StatusOr<Model> FromBytes(absl::Span<const char> bytes);

  const ModelConfig& config() const { return config_; }

  // A cache sized for this model: seq_len device rows, and `host_capacity`
  // host rows (a host tier, kv_cache.h; 0: none).
  KvCache NewCache(int host_capacity = 0) const;

  // Runs `token` at absolute `position`: appends its keys and values to
  // `cache` (one new slot), attends over every live entry of `cache`, and
  // writes the next-token logits (and queries and keys) to `out`.
  // InvalidArgument for a token or position out of range, ResourceExhausted
  // when the cache is full.
  absl::Status Forward(int token, int position, KvCache* cache,
                       ForwardOutput* out) const;

 private:
  Model() = default;

  // Views into weights_ for one layer.
  absl::Span<const float> Tensor(size_t offset, size_t size) const {
    return absl::MakeConstSpan(weights_.data() + offset, size);
  }

  ModelConfig config_;
  std::vector<float> weights_;  // Every tensor, as in the file.
  size_t token_embedding_ = 0, rms_att_ = 0, wq_ = 0, wk_ = 0, wv_ = 0, wo_ = 0,
         rms_ffn_ = 0, w1_ = 0, w2_ = 0, w3_ = 0, rms_final_ = 0,
         freq_cis_real_ = 0, freq_cis_imag_ = 0;
};

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_MODEL_H_
