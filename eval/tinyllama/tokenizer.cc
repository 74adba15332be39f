#include "tinyllama/tokenizer.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace entrokv::tinyllama {

absl::StatusOr<Tokenizer> Tokenizer::Load(const std::string& path,
                                          int vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer: cannot open '", path, "'"));
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  auto tokenizer = FromBytes(bytes, vocab_size);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat(path, ": ", tokenizer.status().message()));
  }
  return tokenizer;
}

absl::StatusOr<Tokenizer> Tokenizer::FromBytes(absl::Span<const char> bytes,
                                               int vocab_size) {
  if (vocab_size <= kFirstByteId + 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: vocab_size ", vocab_size,
                     " leaves no room for the ", "256 byte-fallback pieces"));
  }
  size_t at = 0;
  auto read = [&bytes, &at](void* dst, size_t n) {
    if (bytes.size() - at < n) return false;
    std::memcpy(dst, bytes.data() + at, n);
    at += n;
    return true;
  };
  int32_t max_token_length = 0;
  if (!read(&max_token_length, sizeof(max_token_length))) {
    return absl::InvalidArgumentError("tokenizer: file is empty");
  }
  Tokenizer t;
  t.pieces_.reserve(vocab_size);
  t.scores_.reserve(vocab_size);
  for (int id = 0; id < vocab_size; ++id) {
    float score = 0.0f;
    int32_t length = 0;
    if (!read(&score, sizeof(score)) || !read(&length, sizeof(length))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: truncated at record ", id, " of ", vocab_size));
    }
    if (length < 0 || length > max_token_length ||
        bytes.size() - at < static_cast<size_t>(length)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer: record ", id, " has a bad length ", length));
    }
    std::string piece(bytes.data() + at, length);
    at += length;
    t.ids_.emplace(piece, id);  // The first id wins for duplicate pieces.
    t.pieces_.push_back(std::move(piece));
    t.scores_.push_back(score);
  }
  if (at != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", bytes.size() - at, " bytes after the ",
                     vocab_size, " records"));
  }
  for (int b = 0; b < 256; ++b) {
    char expected[8];
    std::snprintf(expected, sizeof(expected), "<0x%02X>", b);
    if (t.pieces_[kFirstByteId + b] != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: id ", kFirstByteId + b, " is '",
          t.pieces_[kFirstByteId + b], "', expected byte piece ", expected));
    }
  }
  return t;
}

int Tokenizer::Lookup(std::string_view piece) const {
  auto it = ids_.find(absl::string_view(piece.data(), piece.size()));
  return it == ids_.end() ? -1 : it->second;
}

std::vector<int> Tokenizer::Encode(std::string_view text, bool bos) const {
  std::vector<int> ids;
  if (bos) ids.push_back(kBosId);
  if (text.empty()) return ids;
  const size_t first = ids.size();
  const int dummy = Lookup(" ");
  if (dummy >= 0) ids.push_back(dummy);

  // One piece per UTF-8 code point, or its bytes' fallback pieces.
  for (size_t i = 0; i < text.size();) {
    size_t end = i + 1;
    while (end < text.size() && end - i < 4 &&
           (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) {
      ++end;
    }
    const int id = Lookup(text.substr(i, end - i));
    if (id >= 0) {
      ids.push_back(id);
    } else {
      for (size_t j = i; j < end; ++j) {
        ids.push_back(kFirstByteId + static_cast<unsigned char>(text[j]));
      }
    }
    i = end;
  }

  // Merge the best-scoring adjacent pair until none merges.
  std::string merged;
  while (true) {
    float best_score = -1e10f;
    int best_id = -1;
    size_t best_at = 0;
    for (size_t i = first; i + 1 < ids.size(); ++i) {
      merged = pieces_[ids[i]];
      merged += pieces_[ids[i + 1]];
      const int id = Lookup(merged);
      if (id >= 0 && scores_[id] > best_score) {
        best_score = scores_[id];
        best_id = id;
        best_at = i;
      }
    }
    if (best_id < 0) break;
    ids[best_at] = best_id;
    ids.erase(ids.begin() + best_at + 1);
  }
  return ids;
}

std::string Tokenizer::Decode(absl::Span<const int> ids) const {
  std::string text;
  bool after_bos = false;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int id = ids[i];
    if (id < 0 || id >= vocab_size()) continue;
    if (id == kBosId) {
      after_bos = true;
      continue;
    }
    if (id == kEosId || id == 0) continue;
    if (id >= kFirstByteId && id < kFirstByteId + 256) {
      text.push_back(static_cast<char>(id - kFirstByteId));
    } else {
      std::string_view piece = pieces_[id];
      if (after_bos && !piece.empty() && piece[0] == ' ') {
        piece.remove_prefix(1);
      }
      text.append(piece);
    }
    after_bos = false;
  }
  return text;
}

}  // namespace entrokv::tinyllama
