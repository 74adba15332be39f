// Device memory of the CUDA backend, and CUDA errors as a Status
// (docs/cuda.md).
//
// DevicePool counts every device allocation of one backend; DeviceBuffer and
// PinnedBuffer own one allocation each (device and page-locked host memory).
// A failed allocation is a Status (cudaErrorMemoryAllocation becomes
// ResourceExhausted), never an abort. DevicePool is thread-safe; the buffers
// are owned by one session and are not.
//
// Internal to core/cuda: host C++ only.

#ifndef ENTROKV_CORE_CUDA_CUDA_MEMORY_H_
#define ENTROKV_CORE_CUDA_CUDA_MEMORY_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "entrokv/core/status_macros.h"

namespace entrokv::internal {

// OK for cudaSuccess; otherwise clears the (non-sticky) error and returns a
// Status naming `what`: ResourceExhausted for a failed allocation,
// Unavailable for a missing device or driver, Internal for the rest.
absl::Status CudaStatus(cudaError_t err, absl::string_view what);

#define ENTROKV_CUDA_RETURN_IF_ERROR(expr, what) \
  ENTROKV_RETURN_IF_ERROR(CudaStatus((expr), (what)))

// Device allocations of one backend: every cudaMalloc goes through it, so the
// bytes it holds are known and a failed allocation is a Status. Thread-safe.
class DevicePool {
 public:
  absl::StatusOr<void*> Allocate(size_t bytes, absl::string_view what) {
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, std::max<size_t>(bytes, 1));
    if (err != cudaSuccess) {
      absl::Status st = CudaStatus(
          err, absl::StrCat("allocating ", bytes, " bytes for ", what));
      return st;
    }
    held_.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
    return ptr;
  }
  void Free(void* ptr, size_t bytes) {
    if (ptr == nullptr) return;
    cudaFree(ptr);
    held_.fetch_sub(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  }
  int64_t held() const { return held_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> held_{0};
};

// A device allocation owned by one session. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      pool_ = other.pool_;
      ptr_ = std::exchange(other.ptr_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { Reset(); }

  static absl::StatusOr<DeviceBuffer> Make(DevicePool* pool, size_t bytes,
                                           absl::string_view what) {
    ENTROKV_ASSIGN_OR_RETURN(void* ptr, pool->Allocate(bytes, what));
    DeviceBuffer b;
    b.pool_ = pool;
    b.ptr_ = ptr;
    b.bytes_ = bytes;
    return b;
  }

  // Reallocates (contents lost) when smaller than `bytes`.
  absl::Status Ensure(DevicePool* pool, size_t bytes, absl::string_view what) {
    if (ptr_ != nullptr && bytes_ >= bytes) return absl::OkStatus();
    ENTROKV_ASSIGN_OR_RETURN(DeviceBuffer fresh, Make(pool, bytes, what));
    *this = std::move(fresh);
    return absl::OkStatus();
  }

  void Reset() {
    if (pool_ != nullptr) pool_->Free(ptr_, bytes_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  DevicePool* pool_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory, for asynchronous copies. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { Reset(); }

  absl::Status Ensure(size_t bytes, absl::string_view what) {
    if (ptr_ != nullptr && bytes_ >= bytes) return absl::OkStatus();
    Reset();
    void* ptr = nullptr;
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(&ptr, std::max<size_t>(bytes, 1), cudaHostAllocDefault),
        absl::StrCat("allocating ", bytes, " pinned bytes for ", what));
    ptr_ = ptr;
    bytes_ = bytes;
    return absl::OkStatus();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace entrokv::internal

#endif  // ENTROKV_CORE_CUDA_CUDA_MEMORY_H_
