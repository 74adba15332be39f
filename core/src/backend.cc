#include "entrokv/core/backend.h"

#include "absl/status/status.h"
#include "cpu_backend.h"

namespace entrokv {

std::string_view BackendKindName(BackendKind kind) {
  return kind == BackendKind::kCpu ? "cpu" : "cuda";
}

bool CudaBackendCompiled() {
#ifdef ENTROKV_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    BackendKind kind, const BackendOptions& options) {
  if (options.max_bytes < 0) {
    return absl::InvalidArgumentError("max_bytes: is negative");
  }
  switch (kind) {
    case BackendKind::kCpu:
      return internal::CreateCpuBackend(options);
    case BackendKind::kCuda:
#ifdef ENTROKV_HAVE_CUDA
      return internal::CreateCudaBackend(options);
#else
      return absl::UnavailableError(
          "cuda: this build of entrokv has no CUDA backend (nvcc was not found "
          "at configure time)");
#endif
  }
  return absl::InvalidArgumentError("backend: unknown kind");
}

}  // namespace entrokv
