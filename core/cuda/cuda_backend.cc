// The CUDA backend: CreateCudaBackend and the Backend that opens CudaSessions
// (docs/cuda.md). The session is in cuda_session.h; device memory in
// cuda_memory.h.

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cpu_backend.h"
#include "cuda_memory.h"
#include "cuda_session.h"
#include "entrokv/core/backend.h"
#include "entrokv/core/config.h"
#include "entrokv/core/status_macros.h"
#include "layered_session.h"

namespace entrokv::internal {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(const BackendOptions& options, std::string description)
      : device_(options.device),
        description_(std::move(description)),
        account_(std::make_shared<ByteAccount>(options.max_bytes)),
        pool_(std::make_shared<DevicePool>()) {}

  BackendKind kind() const override { return BackendKind::kCuda; }
  std::string Describe() const override { return description_; }
  int64_t bytes_held() const override { return account_->held(); }

  absl::StatusOr<std::unique_ptr<SessionState>> CreateSession(
      const SessionConfig& config, const SessionLimits& limits) override {
    ENTROKV_RETURN_IF_ERROR(ValidateSessionConfig(config));
    if (config.tier.capacity > 0) {
      // docs/step-semantics.md section 12 runs on the CPU backend only, for
      // now.
      return absl::UnimplementedError(
          "tier.capacity: the CUDA backend has no demote tier yet; place "
          "the session on the CPU");
    }
    ENTROKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_),
                                 "selecting the device");
    cudaStream_t stream = nullptr;
    ENTROKV_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
        "creating the session's stream");
    // Cadence and block summaries are host-side layers shared with the CPU
    // backend (layered_session.h), so both decide alike by construction.
    return CreateLayeredSession(
        config, limits, account_,
        [&](const SessionConfig& c, const SessionLimits& l) {
          return std::make_unique<CudaSession>(c, l, account_, pool_, device_,
                                               stream);
        });
  }

 private:
  const int device_;
  const std::string description_;
  std::shared_ptr<ByteAccount> account_;
  std::shared_ptr<DevicePool> pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    const BackendOptions& options) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::UnavailableError(absl::StrCat(
        "cuda: no usable device (cudaGetDeviceCount: ", cudaGetErrorName(err),
        ", ", cudaGetErrorString(err), ")"));
  }
  if (count == 0) {
    return absl::UnavailableError("cuda: no device present");
  }
  if (options.device < 0 || options.device >= count) {
    return absl::UnavailableError(
        absl::StrCat("cuda: device ", options.device, " not present (", count,
                     count == 1 ? " device)" : " devices)"));
  }
  ENTROKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device),
                               "selecting the device");
  cudaDeviceProp prop{};
  ENTROKV_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options.device),
                               "reading device properties");
  std::string description =
      absl::StrCat("cuda:", options.device, " ", prop.name, " (",
                   (prop.totalGlobalMem + (size_t{1} << 29)) >> 30, " GiB, sm_",
                   prop.major, prop.minor, ")");
  return std::make_unique<CudaBackend>(options, std::move(description));
}

}  // namespace entrokv::internal
