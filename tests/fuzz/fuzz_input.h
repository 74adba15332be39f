// The byte format the wire fuzzer reads, shared by the fuzz target and the
// seed-corpus generator.
//
// An input is a sequence of chunks, each a little-endian uint16 length and
// that many bytes (a length past the end takes what is left). The first chunk
// is a serialized entrokv.v1.CreateSessionRequest; each later chunk is a
// serialized entrokv.v1.DecodeRequest, whose steps all go to the one session
// the first chunk created (their session_id is ignored). A chunk the wire
// cannot parse is skipped, as the server answers it INVALID_ARGUMENT.

#ifndef ENTROKV_TESTS_FUZZ_FUZZ_INPUT_H_
#define ENTROKV_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace entrokv::fuzz {

// Splits `data` into its chunks (empty chunks included).
inline std::vector<std::string_view> SplitChunks(const uint8_t* data,
                                                 size_t size) {
  std::vector<std::string_view> chunks;
  size_t at = 0;
  while (at + 2 <= size) {
    size_t length = size_t{data[at]} | (size_t{data[at + 1]} << 8);
    at += 2;
    if (length > size - at) length = size - at;
    chunks.emplace_back(reinterpret_cast<const char*>(data + at), length);
    at += length;
  }
  return chunks;
}

// Appends one chunk. REQUIRES: bytes.size() < 65536.
inline void AppendChunk(std::string_view bytes, std::string* out) {
  out->push_back(static_cast<char>(bytes.size() & 0xff));
  out->push_back(static_cast<char>((bytes.size() >> 8) & 0xff));
  out->append(bytes);
}

}  // namespace entrokv::fuzz

#endif  // ENTROKV_TESTS_FUZZ_FUZZ_INPUT_H_
