// c10d over Gloo across two real processes: TCPStore rendezvous, then a
// point-to-point send/recv and an all-reduce.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>
#include <unistd.h>

namespace {

// Runs rank `rank` of 2; returns 0 on success.
int run_rank(int rank, uint16_t port) {
  c10d::TCPStoreOptions so;
  so.port = port;
  so.isServer = rank == 0;
  so.numWorkers = 2;
  so.timeout = std::chrono::seconds(20);
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(20));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, options);
  std::vector<at::Tensor> buf;
  if (rank == 0) {
    buf = {torch::arange(6, torch::kFloat32).reshape({2, 3})};
    pg->send(buf, 1, 7)->wait();
  } else {
    buf = {torch::zeros({2, 3})};
    pg->recv(buf, 0, 7)->wait();
    if (!torch::equal(buf[0], torch::arange(6, torch::kFloat32).reshape({2, 3}))) return 1;
  }
  std::vector<at::Tensor> sum{torch::full({4}, static_cast<float>(rank + 1))};
  pg->allreduce(sum)->wait();
  return torch::equal(sum[0], torch::full({4}, 3.0f)) ? 0 : 2;
}

}  // namespace

TEST(C10dGloo, TwoProcessesSendReceiveAndAllReduce) {
  const auto port = static_cast<uint16_t>(20000 + ::getpid() % 20000);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int rc = 3;
    try {
      rc = run_rank(1, port);
    } catch (...) {
    }
    ::_exit(rc);
  }
  const int rc0 = run_rank(0, port);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(rc0, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
