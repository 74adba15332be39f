// CUDA errors as a Status (cuda_memory.h).

#include "cuda_memory.h"

#include <cuda_runtime_api.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace entrokv::internal {

absl::Status CudaStatus(cudaError_t err, absl::string_view what) {
  if (err == cudaSuccess) return absl::OkStatus();
  // Clear the (non-sticky) error so that later launch checks do not see it.
  cudaGetLastError();
  std::string message =
      absl::StrCat("cuda: ", what, ": ", cudaGetErrorName(err), " (",
                   cudaGetErrorString(err), ")");
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(std::move(message));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return absl::UnavailableError(std::move(message));
    default:
      return absl::InternalError(std::move(message));
  }
}

}  // namespace entrokv::internal
