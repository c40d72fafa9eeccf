// What the LibTorch pipetwin runs on was built with and finds at run time.
// This header is LibTorch-free: only exec/*.cpp include LibTorch.
#pragma once

#include <string>

namespace pipetwin::exec {

struct TorchInfo {
  std::string version;       // e.g. "2.13.0"
  bool cuda_built = false;   // LibTorch compiled with CUDA
  bool cuda_available = false;
  int cuda_devices = 0;
  bool gloo = false;         // c10d Gloo backend compiled in
  bool nccl = false;         // c10d NCCL backend compiled in
  std::string nccl_version;  // the NCCL libtorch_cuda loads, e.g. "2.29.7"
  int intra_op_threads = 0;
};

TorchInfo torch_info();

}  // namespace pipetwin::exec
