// The CUDA/NCCL side of LibTorch, without a GPU: the NCCL process group type
// and the NCCL that libtorch_cuda loads. With a GPU this also sees devices.
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/cuda.h>

TEST(TorchNccl, ProcessGroupNcclOptionsAndVersion) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  EXPECT_EQ(options->backend, "nccl");
  EXPECT_FALSE(options->is_high_priority_stream);
  // The header's NCCL (the wheel's) is the one libtorch_cuda runs with.
  EXPECT_EQ(c10d::getNcclVersionNumber(), NCCL_VERSION_CODE);
  if (!torch::cuda::is_available()) {
    GTEST_LOG_(INFO) << "no CUDA device here: the NCCL process group itself runs where a GPU is";
  }
}
