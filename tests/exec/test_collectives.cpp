// Each collective's call in the executor (exec/torch_collectives.hpp) across
// real processes over Gloo: three forked ranks meet at a TCPStore (Comm),
// form a group and run every row of the collectives' table on tensors whose
// results each rank can predict.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "exec/run.hpp"
#include "exec/torch_collectives.hpp"
#include "exec/torch_comm.hpp"
#include "tests/support/shell.hpp"

namespace pe = pipetwin::exec;
using A = pipetwin::schedule::CollectiveAlgorithm;

namespace {

constexpr int kRanks = 3;

// What rank `rank` checks in its group: "" when its results are right, else what is wrong.
using Body = std::function<std::string(int rank, c10d::Backend& group)>;

// Runs `body` as each of kRanks forked processes (fork before any LibTorch
// work in this process); each ends with status 0 when its body found nothing
// wrong. Returns the ranks' statuses.
std::vector<int> on_ranks(const Body& body) {
  const int port = pipetwin::test::free_port();
  std::fflush(nullptr);
  std::vector<pid_t> children;
  for (int r = 0; r < kRanks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int status = 0;
      try {
        pe::RankEnv env;
        env.rank = r, env.world_size = kRanks, env.master_port = port;
        pe::Comm comm(env, false, std::chrono::seconds(60));
        auto group = comm.subgroup("collectives", {0, 1, 2});
        const std::string wrong = body(r, *group);
        if (!wrong.empty()) std::fprintf(stderr, "rank %d: %s\n", r, wrong.c_str()), status = 1;
        comm.barrier("done");
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        status = 2;
      }
      std::fflush(nullptr);
      ::_exit(status);
    }
    children.push_back(pid);
  }
  std::vector<int> statuses;
  for (const pid_t pid : children) {
    int w = 0;
    ::waitpid(pid, &w, 0);
    statuses.push_back(WIFEXITED(w) ? WEXITSTATUS(w) : -1);
  }
  return statuses;
}

std::string differs(const at::Tensor& got, const at::Tensor& want, const char* what) {
  if (got.sizes() == want.sizes() && at::equal(got, want)) return "";
  std::ostringstream s;
  s << what << ": got " << got << " want " << want;
  return s.str();
}

}  // namespace

// Rank r contributes r + 1 (all-reduce), arange(3·2) + 10r (reduce-scatter:
// its part of the sum), r (all-gather), arange(3) + 10r (all-to-all: part j
// to rank j); every rank predicts the result.
TEST(Collectives, EachAlgorithmsCallRunsAcrossProcessesOverGloo) {
  const auto statuses = on_ranks([](int r, c10d::Backend& g) {
    const auto f = at::TensorOptions().dtype(at::kFloat);
    std::string wrong;
    for (const A a : {A::RingAllReduce, A::TreeAllReduce}) {
      at::Tensor in = at::full({4}, r + 1.0, f), unused;
      pe::start_collective(g, a, in, unused)->wait();
      wrong += differs(in, at::full({4}, 1.0 + 2 + 3, f), "all-reduce");
    }
    at::Tensor whole = at::arange(kRanks * 2, f) + 10.0 * r, part = at::empty({2}, f);
    pe::start_collective(g, A::RingReduceScatter, whole, part)->wait();
    wrong += differs(part, kRanks * at::arange(2 * r, 2 * r + 2, f) + 10.0 * (0 + 1 + 2), "reduce-scatter");
    at::Tensor mine = at::full({2}, static_cast<double>(r), f), all = at::empty({kRanks * 2}, f);
    pe::start_collective(g, A::RingAllGather, mine, all)->wait();
    wrong += differs(all, at::tensor({0.f, 0.f, 1.f, 1.f, 2.f, 2.f}), "all-gather");
    // All-to-all: rank r sends 10r + j to rank j, so it receives 10i + r from each rank i.
    at::Tensor parts = at::arange(kRanks, f) + 10.0 * r, received = at::empty({kRanks}, f);
    pe::start_collective(g, A::AllToAll, parts, received)->wait();
    wrong += differs(received, 10 * at::arange(kRanks, f) + r, "all-to-all");
    // Sizes that do not fit: refused before the call, naming the operation.
    at::Tensor odd = at::empty({5}, f);
    try {
      pe::start_collective(g, A::RingAllGather, mine, odd);
      wrong += "an all-gather into 5 elements was not refused";
    } catch (const std::exception& e) {
      if (std::string(e.what()).find("an all-gather") == std::string::npos) wrong += std::string("refusal: ") + e.what();
    }
    return wrong;
  });
  EXPECT_EQ(statuses, std::vector<int>(kRanks, 0));
}
