// Tokenizer: llama2.c's BPE tokenizer over a tokenizer.bin vocabulary.
//
// File format (llama2.c, after tinyllamas commit 0bd21da): int32
// max_token_length, then vocab_size records of float32 score, int32 length and
// that many bytes. The byte-fallback pieces are written "<0x00>".."<0xFF>" and
// hold ids 3..258 (byte b → id b + 3); id 1 is BOS, id 2 EOS.
//
// Encode() follows run.c: a dummy-prefix piece " " before non-empty text, one
// piece per UTF-8 code point (or its bytes' fallback pieces when the code
// point has no piece), then repeatedly merges the adjacent pair whose
// concatenation is a piece with the highest score (the leftmost on a tie).
// Decode() inverts it: pieces are concatenated, fallback pieces become their
// byte, specials become nothing, and the leading space of the first piece after
// BOS (the dummy prefix) is dropped, so Decode(Encode(text, true)) == text.
//
// Thread-safety: immutable after Load(); every method is const.

#ifndef ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_TOKENIZER_H_
#define ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_TOKENIZER_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace entrokv::tinyllama {

inline constexpr int kBosId = 1;
inline constexpr int kEosId = 2;
inline constexpr int kFirstByteId = 3;

class Tokenizer {
 public:
  // Reads `path`, expecting exactly `vocab_size` records and nothing after.
  static absl::StatusOr<Tokenizer> Load(const std::string& path,
                                        int vocab_size);
  static absl::StatusOr<Tokenizer> FromBytes(absl::Span<const char> bytes,
                                             int vocab_size);

  int vocab_size() const { return static_cast<int>(pieces_.size()); }
  const std::string& piece(int id) const { return pieces_[id]; }
  float score(int id) const { return scores_[id]; }

  // Token ids of `text`, after BOS when `bos`.
  std::vector<int> Encode(std::string_view text, bool bos) const;
  // The text of `ids` (see above). Ids out of range decode to nothing.
  std::string Decode(absl::Span<const int> ids) const;

 private:
  Tokenizer() = default;
  int Lookup(std::string_view piece) const;  // -1 when absent.

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  absl::flat_hash_map<std::string, int> ids_;
};

}  // namespace entrokv::tinyllama

#endif  // ENTROKV_CLIENT_EXAMPLES_TINYLLAMA_TOKENIZER_H_
