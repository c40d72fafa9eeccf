// torch_info: queries LibTorch, its CUDA side and c10d's NCCL backend.
#include "exec/torch_info.hpp"

#include <ATen/Parallel.h>
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/NCCLUtils.hpp>
#include <torch/cuda.h>

namespace pipetwin::exec {

TorchInfo torch_info() {
  TorchInfo info;
  info.version = TORCH_VERSION;
  info.cuda_built = true;  // this build links libtorch_cuda (see cmake/Dependencies.cmake)
  info.cuda_available = torch::cuda::is_available();
  info.cuda_devices = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
#ifdef USE_C10D_GLOO
  info.gloo = true;
#endif
#ifdef USE_C10D_NCCL
  info.nccl = true;
  info.nccl_version = c10d::getNcclVersion();
#endif
  info.intra_op_threads = at::get_num_threads();
  return info;
}

}  // namespace pipetwin::exec
