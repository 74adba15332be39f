#include "entrokv/client/vectors.h"

#include <cstring>
#include <vector>

#include "entrokv/core/entropy.h"

namespace entrokv {

void AppendConverted(const VectorView& view, ElementType target,
                     std::string* out) {
  if (view.empty()) return;
  if (view.type() == target) {
    // One pass: resize() would first write the new bytes as zeros.
    out->append(reinterpret_cast<const char*>(view.bytes()), view.byte_size());
    return;
  }
  const size_t old_size = out->size();
  out->resize(old_size + view.size() * ElementSize(target));
  auto* dst = reinterpret_cast<std::byte*>(out->data() + old_size);
  // Decode in chunks so that a long prefill does not allocate its whole size
  // in floats.
  constexpr size_t kChunk = 4096;
  float buffer[kChunk];
  const size_t in_size = ElementSize(view.type());
  const size_t out_size = ElementSize(target);
  for (size_t begin = 0; begin < view.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, view.size() - begin);
    DecodeElements(view.type(), view.bytes() + begin * in_size, n, buffer);
    EncodeElements(target, buffer, n, dst + begin * out_size);
  }
}

absl::StatusOr<double> EntropyOfLogits(absl::Span<const float> logits) {
  return EntropyFromLogits(logits);
}

absl::StatusOr<double> EntropyOfLogits(absl::Span<const uint16_t> bits,
                                       ElementType type) {
  std::vector<float> values(bits.size());
  DecodeElements(type, reinterpret_cast<const std::byte*>(bits.data()),
                 bits.size(), values.data());
  return EntropyFromLogits(values);
}

}  // namespace entrokv
