// Internal factories and accounting shared by the backends.

#ifndef ENTROKV_CORE_SRC_CPU_BACKEND_H_
#define ENTROKV_CORE_SRC_CPU_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "entrokv/core/backend.h"

namespace entrokv::internal {

// Bytes held by a backend's sessions against its limit (0: unlimited).
// Thread-safe.
class ByteAccount {
 public:
  explicit ByteAccount(int64_t limit) : limit_(limit) {}
  // Adds `bytes` unless that would pass the limit; false then.
  bool TryReserve(int64_t bytes);
  // Adds `bytes` whatever the limit: gives back a reservation that was
  // released a moment before (so it fitted then).
  void Restore(int64_t bytes) {
    held_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void Release(int64_t bytes) {
    held_.fetch_sub(bytes, std::memory_order_relaxed);
  }
  int64_t held() const { return held_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> held_{0};
};

std::unique_ptr<Backend> CreateCpuBackend(const BackendOptions& options);

// Defined in core/cuda/ when the CUDA backend is built: Unavailable when no
// device is present.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const BackendOptions& options);

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_SRC_CPU_BACKEND_H_
