// Backend: where session state lives (host memory or a CUDA device).
//
// Every backend implements the same SessionState contract and must agree with
// the CPU backend: the same evictions on the same input (ties broken by the
// same rule: lower keep score first, then older entry first) and scores within
// float tolerance. This header mentions no CUDA type; CreateBackend(kCuda)
// answers Unavailable when CUDA was not built or no device is present.
//
// Thread-safety: CreateSession() and bytes_held() are thread-safe. Sessions are
// owned by their callers and may outlive nothing: destroy them before the
// backend.

#ifndef ENTROKV_CORE_BACKEND_H_
#define ENTROKV_CORE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "entrokv/core/config.h"
#include "entrokv/core/session.h"

namespace entrokv {

enum class BackendKind : uint8_t { kCpu, kCuda };

std::string_view BackendKindName(BackendKind kind);

struct BackendOptions {
  // Bytes of session state the backend may hold in all; 0: unlimited. Steps
  // that would exceed it fail with ResourceExhausted.
  int64_t max_bytes = 0;
  int device = 0;  // kCuda: the device ordinal.
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual BackendKind kind() const = 0;
  // A line for logs, e.g. "cpu" or "cuda:0 NVIDIA H200 (141 GiB)".
  virtual std::string Describe() const = 0;
  // Bytes held by all of this backend's live sessions.
  virtual int64_t bytes_held() const = 0;

  // Validates `config` (InvalidArgument naming the field) and creates an empty
  // session.
  virtual absl::StatusOr<std::unique_ptr<SessionState>> CreateSession(
      const SessionConfig& config, const SessionLimits& limits) = 0;
};

// kCpu always succeeds; kCuda answers Unavailable without CUDA or a device.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    BackendKind kind, const BackendOptions& options = {});

// True when this build contains the CUDA backend (a device may still be
// absent).
bool CudaBackendCompiled();

}  // namespace entrokv

#endif  // ENTROKV_CORE_BACKEND_H_
