// Mixture of experts: the routed block, its all-to-alls as autograd
// functions, and the experts' split over the expert-parallel group.
#include "exec/torch_moe.hpp"

#include <torch/autograd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <numeric>
#include <string>

#include "exec/torch_collectives.hpp"
#include "exec/torch_llm_layers.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

using models::LayerKind;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::mutex totals_mutex;
ExchangeTotals totals;

int members(const ExpertGroup& g) { return g ? g->getSize() : 1; }

// Rows of `x` ([rows, h]) sent to member i: send[i]; received from i:
// recv[i]. A side with no rows is still a view of one row's storage, so
// that Gloo has memory to point at.
at::Tensor exchange(const at::Tensor& x, const ExpertGroup& g, std::vector<std::int64_t> send,
                    std::vector<std::int64_t> recv) {
  const std::int64_t rows = std::accumulate(recv.begin(), recv.end(), std::int64_t{0});
  at::Tensor in = x.size(0) > 0 ? x.contiguous() : at::empty({1, x.size(1)}, x.options()).narrow(0, 0, 0);
  at::Tensor out = at::empty({std::max<std::int64_t>(rows, 1), x.size(1)}, x.options()).narrow(0, 0, rows);
  const auto start = std::chrono::steady_clock::now();
  g->alltoall_base(out, in, recv, send)->wait();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    const std::lock_guard<std::mutex> lock(totals_mutex);
    ++totals.calls;
    totals.seconds += seconds;
    totals.bytes += static_cast<double>(x.numel()) * static_cast<double>(x.element_size());
  }
  return out;
}

std::vector<std::int64_t> int_list(AutogradContext* ctx, const char* key) {
  return ctx->saved_data.at(key).toIntVector();
}

// The group rides in the autograd context as a capsule, as the tensor
// group's does (exec/torch_tensor_parallel.cpp).
struct AllToAllFn : torch::autograd::Function<AllToAllFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const ExpertGroup& g,
                            std::vector<std::int64_t> send, std::vector<std::int64_t> recv) {
    ctx->saved_data["group"] = at::IValue::make_capsule(g);
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    return exchange(x, g, std::move(send), std::move(recv));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto holder = ctx->saved_data.at("group").toCapsule();
    const auto g = ExpertGroup::reclaim_copy(static_cast<c10d::Backend*>(holder.get()));
    return {exchange(grads[0], g, int_list(ctx, "recv"), int_list(ctx, "send")), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Rows sent to each member, from the tokens' counts per expert [X].
std::vector<std::int64_t> per_member(const std::vector<std::int64_t>& counts, int E) {
  const std::size_t local = counts.size() / static_cast<std::size_t>(E);
  std::vector<std::int64_t> out(static_cast<std::size_t>(E), 0);
  for (std::size_t e = 0; e < counts.size(); ++e) out[e / local] += counts[e];
  return out;
}

std::vector<std::int64_t> to_vector(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

at::Tensor index_tensor(const std::vector<std::int64_t>& v, const at::Device& device) {
  return at::tensor(v, at::TensorOptions(at::kLong)).to(device);
}

// inverse[perm[i]] = i: the rows taken by index_select(perm) put back in place.
at::Tensor inverse_permutation(const at::Tensor& perm) {
  return at::empty_like(perm).scatter_(0, perm, at::arange(perm.numel(), perm.options()));
}

// The routed experts' work on the copies this member received: `received`
// holds, member by member, each local expert's rows (`counts`, [E × local]);
// returns their outputs in the same order.
at::Tensor local_experts(const at::Tensor& received, const std::vector<std::int64_t>& counts, int E,
                         const std::vector<at::Tensor>& p, std::size_t first) {
  const std::size_t local = counts.size() / static_cast<std::size_t>(E);
  std::vector<std::int64_t> start(counts.size(), 0);
  std::int64_t running = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    start[i] = running;
    running += counts[i];
  }
  // Grouped by expert: expert e's rows from member 0, then member 1, ...
  std::vector<std::int64_t> order;
  std::vector<std::int64_t> rows(local, 0);
  for (std::size_t e = 0; e < local; ++e) {
    for (std::size_t i = 0; i < static_cast<std::size_t>(E); ++i) {
      const std::size_t c = i * local + e;
      for (std::int64_t r = 0; r < counts[c]; ++r) order.push_back(start[c] + r);
      rows[e] += counts[c];
    }
  }
  const at::Tensor perm = index_tensor(order, received.device());
  const at::Tensor grouped = received.index_select(0, perm);
  std::vector<at::Tensor> outs;
  std::int64_t offset = 0;
  for (std::size_t e = 0; e < local; ++e) {
    const std::size_t w = first + 3 * e;
    outs.push_back(swiglu(grouped.narrow(0, offset, rows[e]), p.at(w), p.at(w + 1), p.at(w + 2)));
    offset += rows[e];
  }
  const at::Tensor done = at::cat(outs, 0);
  return done.index_select(0, inverse_permutation(perm));  // back to the received order
}

}  // namespace

void check_moe_run(const models::Model& model, int E) {
  for (const auto& layer : model.layers) {
    if (layer.kind != LayerKind::MoeBlock && layer.kind != LayerKind::DecoderBlock) continue;
    const auto& s = layer.shape;
    const auto refuse = [&](const std::string& field, const std::string& why) {
      throw Error("model " + model.name + ", layer " + layer.name + ": field '" + field + "': " + why +
                  "; simulate and plan price it");
    };
    if (s.latent_attention) refuse("kv_lora_rank", "the executor builds GQA attention, not DeepSeek's latent attention");
    if (layer.kind != LayerKind::MoeBlock) continue;
    if (s.router_bias) refuse("router_bias", "the executor routes without DeepSeek-V3's bias per expert");
    if (s.capacity_factor > 0) refuse("capacity_factor", "the executor's experts are dropless (capacity_factor 0)");
    if (E > 1 && s.experts % E != 0) {
      refuse("experts", std::to_string(s.experts) + " experts do not split over --expert " + std::to_string(E));
    }
  }
}

void init_moe_mlp(const models::LayerShape& s, at::Generator& gen, std::vector<at::Tensor>& p) {
  const auto lin = [&](std::int64_t out, std::int64_t in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    p.push_back(torch::empty({out, in}).uniform_(-bound, bound, gen));
  };
  const std::int64_t h = s.d_model;
  lin(s.experts, h);
  for (std::int64_t e = 0; e < s.experts; ++e) {
    lin(s.expert_ffn, h);
    lin(s.expert_ffn, h);
    lin(h, s.expert_ffn);
  }
  if (s.shared_ffn > 0) {
    lin(s.shared_ffn, h);
    lin(s.shared_ffn, h);
    lin(h, s.shared_ffn);
  }
}

at::Tensor moe_block(const models::LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p,
                     const ExpertGroup& group) {
  std::size_t next = 0;
  const at::Tensor x1 = attention_half(s, x, p, &next);
  const at::Tensor t = llm_norm(s, x1, p, &next).reshape({-1, s.d_model});
  const at::Tensor& router = p.at(next++);
  const std::int64_t k = s.top_k, X = s.experts;
  const int E = members(group);

  const auto [top, chosen] = at::softmax(linear(t, router, at::Tensor()).to(at::kFloat), -1).topk(k, -1);
  const at::Tensor gates = (top / top.sum(-1, /*keepdim=*/true)).to(x.scalar_type());
  const at::Tensor flat = chosen.reshape({-1});
  const at::Tensor by_expert = std::get<1>(at::sort(flat, /*stable=*/true, 0, false));
  const at::Tensor dispatched = t.index_select(0, at::floor_divide(by_expert, k));
  const std::vector<std::int64_t> counts = to_vector(at::bincount(flat, {}, X));

  at::Tensor combined;
  if (E == 1) {
    combined = local_experts(dispatched, counts, 1, p, next);
  } else {
    // Counts first: member i learns how many copies of each of its experts every member sends.
    at::Tensor mine = index_tensor(counts, x.device()), theirs = at::empty_like(mine);
    start_collective(*group, schedule::CollectiveAlgorithm::AllToAll, mine, theirs)->wait();
    const std::vector<std::int64_t> recv_counts = to_vector(theirs);
    const auto send = per_member(counts, E), recv = per_member(recv_counts, E);
    const at::Tensor received = AllToAllFn::apply(dispatched, group, send, recv);
    const at::Tensor done = local_experts(received, recv_counts, E, p, next);
    combined = AllToAllFn::apply(done, group, recv, send);
  }
  next += 3 * static_cast<std::size_t>(X / E);
  // Back to the tokens' order: copy j of token n at n·k + j.
  const at::Tensor routed = combined.index_select(0, inverse_permutation(by_expert)).view({-1, k, s.d_model});
  at::Tensor y = (routed * gates.unsqueeze(-1)).sum(1);
  if (s.shared_ffn > 0) y = y + swiglu(t, p.at(next), p.at(next + 1), p.at(next + 2));
  return x1 + y.view_as(x1);
}

std::pair<std::size_t, std::size_t> routed_expert_params(const models::Layer& layer) {
  if (layer.kind != LayerKind::MoeBlock) return {0, 0};
  const auto& s = layer.shape;
  const std::size_t norm = s.rms_norm ? 1 : 2;
  const std::size_t bias = s.qkv_bias ? 3 : 0;
  const std::size_t attention = 4 + bias + (s.out_bias ? 1 : 0) + (s.qk_norm ? 2 : 0);
  const std::size_t first = norm + attention + norm + 1;  // after the router
  return {first, first + 3 * static_cast<std::size_t>(s.experts)};
}

std::vector<at::Tensor> expert_shard(const models::Layer& layer, const std::vector<at::Tensor>& full, int E, int j) {
  const auto [first, end] = routed_expert_params(layer);
  if (E <= 1 || first == end) return full;
  const std::size_t per = (end - first) / static_cast<std::size_t>(E);
  std::vector<at::Tensor> out(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(first));
  for (std::size_t i = 0; i < per; ++i) out.push_back(full.at(first + per * static_cast<std::size_t>(j) + i));
  out.insert(out.end(), full.begin() + static_cast<std::ptrdiff_t>(end), full.end());
  return out;
}

std::vector<at::Tensor> gather_experts(const models::Layer& layer, const std::vector<at::Tensor>& shard,
                                       const ExpertGroup& group) {
  const auto [first, end] = routed_expert_params(layer);
  const int E = members(group);
  if (E <= 1 || first == end) return shard;
  const std::size_t per = (end - first) / static_cast<std::size_t>(E);
  std::vector<at::Tensor> mine(shard.begin() + static_cast<std::ptrdiff_t>(first),
                               shard.begin() + static_cast<std::ptrdiff_t>(first + per));
  std::int64_t n = 0;
  for (const auto& t : mine) n += t.numel();
  at::Tensor in = flat_weights(mine, n), out = at::empty({n * E}, in.options());
  start_collective(*group, schedule::CollectiveAlgorithm::RingAllGather, in, out)->wait();
  std::vector<at::Tensor> full(shard.begin(), shard.begin() + static_cast<std::ptrdiff_t>(first));
  for (int j = 0; j < E; ++j) {
    std::int64_t offset = n * j;
    for (const auto& t : mine) {
      full.push_back(out.narrow(0, offset, t.numel()).view_as(t).clone());
      offset += t.numel();
    }
  }
  full.insert(full.end(), shard.begin() + static_cast<std::ptrdiff_t>(first + per), shard.end());
  return full;
}

ExchangeTotals expert_exchange_totals() {
  const std::lock_guard<std::mutex> lock(totals_mutex);
  return totals;
}

}  // namespace pipetwin::exec
