// start_collective: each collective's c10d call.
#include "exec/torch_collectives.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

// `whole` elements are n parts of `part`, or the collective is refused.
void check_parts(std::int64_t whole, std::int64_t part, int n, const char* what) {
  if (whole != part * n) {
    throw Error(std::string(what) + ": " + std::to_string(whole) + " elements are not " + std::to_string(n) + " parts of " +
                std::to_string(part));
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Work> start_collective(c10d::Backend& group, schedule::CollectiveAlgorithm algorithm,
                                                at::Tensor& in, at::Tensor& out) {
  using A = schedule::CollectiveAlgorithm;
  const int n = group.getSize();
  switch (algorithm) {
    case A::RingAllReduce:
    case A::TreeAllReduce: {
      std::vector<at::Tensor> one{in};
      return group.allreduce(one);
    }
    case A::RingReduceScatter:
      check_parts(in.numel(), out.numel(), n, "a reduce-scatter");
      return group._reduce_scatter_base(out, in);
    case A::RingAllGather:
      check_parts(out.numel(), in.numel(), n, "an all-gather");
      return group._allgather_base(out, in);
    case A::AllToAll: {
      check_parts(in.numel(), in.numel() / n, n, "an all-to-all");
      check_parts(out.numel(), in.numel() / n, n, "an all-to-all");
      std::vector<std::int64_t> equal;  // none given: n equal parts
      return group.alltoall_base(out, in, equal, equal);
    }
  }
  throw Error("collective algorithm " + std::to_string(static_cast<int>(algorithm)) + " has no call in the executor");
}

void all_reduce_across(c10d::Backend& group, at::Tensor& t) {
  at::Tensor unused;
  start_collective(group, schedule::CollectiveAlgorithm::RingAllReduce, t, unused)->wait();
}

// The stage's gradients as one flat buffer (a missing gradient is zeros),
// padded with zeros to a multiple of `parts`.
at::Tensor flat_gradients(const std::vector<at::Tensor>& params, std::int64_t parts) {
  std::vector<at::Tensor> flat;
  std::int64_t n = 0;
  for (const auto& p : params) {
    const at::Tensor& g = p.grad();
    flat.push_back(g.defined() ? g.reshape(-1) : at::zeros({p.numel()}, p.options().requires_grad(false)));
    n += p.numel();
  }
  const std::int64_t padded = (n + parts - 1) / parts * parts;
  if (padded > n) flat.push_back(at::zeros({padded - n}, params.front().options().requires_grad(false)));
  return at::cat(flat);
}

at::Tensor flat_weights(const std::vector<at::Tensor>& params, std::int64_t padded) {
  std::vector<at::Tensor> flat;
  std::int64_t n = 0;
  for (const auto& p : params) {
    flat.push_back(p.detach().reshape(-1));
    n += p.numel();
  }
  if (padded > n) flat.push_back(at::zeros({padded - n}, params.front().options().requires_grad(false)));
  return at::cat(flat);
}

}  // namespace pipetwin::exec
