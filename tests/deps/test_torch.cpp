// LibTorch from the wheel: tensors, autograd, and what the build reports.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "exec/torch_info.hpp"

TEST(Torch, AutogradThroughALinearLayer) {
  torch::manual_seed(0);
  torch::nn::Linear layer(8, 4);
  const auto x = torch::randn({16, 8});
  const auto loss = layer->forward(x).pow(2).sum();
  loss.backward();
  // d/dW sum((Wx+b)^2) = 2 (Wx+b) x^T, summed over the batch.
  const auto expected = 2 * (layer->forward(x)).t().mm(x);
  EXPECT_TRUE(torch::allclose(layer->weight.grad(), expected.detach(), 1e-4, 1e-5));
}

TEST(Torch, BuildHasCudaNcclAndGloo) {
  const auto info = pipetwin::exec::torch_info();
  EXPECT_EQ(info.version.rfind("2.", 0), 0u) << info.version;
  EXPECT_TRUE(info.cuda_built);
  EXPECT_TRUE(info.gloo);
  EXPECT_TRUE(info.nccl);
  EXPECT_FALSE(info.nccl_version.empty());
  // Without a GPU this is 0; with one, every device is counted.
  EXPECT_EQ(info.cuda_devices, info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0);
}
