// Typed views of the key and query vectors an engine hands to a Session, and
// their conversion to a session's element type.
//
// An engine holds its vectors as f32, f16 or bf16 (the latter two as uint16_t
// bit patterns, which C++ cannot tell apart by type). VectorView names the
// element type next to the span, so that a Session converts them to its wire
// element type exactly once: a copy when the types agree, else a decode to
// float and a round-to-nearest-even encode (core's element_type.h). Views do
// not own their data; they must outlive the call they are passed to. All
// functions are pure and thread-safe. Hosts are assumed little-endian, as the
// wire is.

#ifndef ENTROKV_CLIENT_VECTORS_H_
#define ENTROKV_CLIENT_VECTORS_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "entrokv/core/element_type.h"

namespace entrokv {

class VectorView {
 public:
  // An empty f32 view.
  VectorView() = default;

  static VectorView F32(absl::Span<const float> values) {
    return VectorView(ElementType::kF32, values.data(), values.size());
  }
  // `bits` are IEEE binary16 bit patterns.
  static VectorView F16(absl::Span<const uint16_t> bits) {
    return VectorView(ElementType::kF16, bits.data(), bits.size());
  }
  // `bits` are bfloat16 bit patterns (the upper half of a binary32).
  static VectorView Bf16(absl::Span<const uint16_t> bits) {
    return VectorView(ElementType::kBf16, bits.data(), bits.size());
  }

  ElementType type() const { return type_; }
  // Number of elements (not bytes).
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const std::byte* bytes() const { return bytes_; }
  size_t byte_size() const { return size_ * ElementSize(type_); }

 private:
  VectorView(ElementType type, const void* data, size_t size)
      : type_(type), bytes_(static_cast<const std::byte*>(data)), size_(size) {}

  ElementType type_ = ElementType::kF32;
  const std::byte* bytes_ = nullptr;
  size_t size_ = 0;
};

// Appends `view`'s elements to `out` as little-endian `target` elements.
void AppendConverted(const VectorView& view, ElementType target,
                     std::string* out);

// The entropy, in nats, of softmax(logits): computed on the engine side so that
// logits (vocabulary-sized) need not travel. InvalidArgument on empty logits or
// a NaN / infinity. Thread-safe.
absl::StatusOr<double> EntropyOfLogits(absl::Span<const float> logits);
// The same for f16 or bf16 logits (bit patterns).
absl::StatusOr<double> EntropyOfLogits(absl::Span<const uint16_t> bits,
                                       ElementType type);

}  // namespace entrokv

#endif  // ENTROKV_CLIENT_VECTORS_H_
