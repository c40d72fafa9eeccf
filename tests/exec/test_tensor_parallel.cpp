// exec/'s tensor parallelism against the unsharded layers. The T members are
// threads, each with its own ProcessGroupGloo (rank t of T) over one c10d
// HashStore: real Gloo collectives over loopback TCP, nothing mocked.
//
// The bound: splitting a layer splits sums over members (a row-parallel
// product's inner dimension, the all-reduces of partial results, the
// cross-entropy's sum of exponentials), which reorders fp32 additions. Each
// reordering moves a result by a few roundings (2^-24 ≈ 6e-8 each) of the
// magnitude of the terms summed, not of the result. Forward outputs are about
// as large as their terms (measured: at most 7e-8 of their scale). A weight
// gradient sums terms of both signs over the micro-batch's tokens and can be
// several times smaller than its terms: the layer norms' weights' gradients,
// against their own largest element, differ by up to 6.3e-7 at T = 2 (8.1e-7
// with one intra-op thread), and by up to 1.2e-6 already at T = 1, where only
// the cross-entropy's formulation differs (one intra-op thread). So the
// scale of a parameter gradient is the layer's gradient (the largest element
// of all its parameters' gradients), as for the forward outputs and input
// gradients it is the tensor's own largest magnitude (at least 1 for forward
// outputs): max |sharded - whole| <= 1e-6 x scale. Each tensor against its own
// largest element is held to 1e-5 as well, and both are printed. A layout
// mistake shows far above: QKV split as plain rows, or the row-parallel bias
// added on every member before g, moved gradients by 0.09 to 1.5 of their
// scale when tried.
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <tuple>

#include "exec/torch_layers.hpp"
#include "exec/torch_tensor_parallel.hpp"
#include "models/families.hpp"
#include "schedule/error.hpp"

namespace pe = pipetwin::exec;
namespace pm = pipetwin::models;

namespace {

constexpr double kBound = 1e-6;
constexpr std::uint64_t kSeed = 5;
constexpr std::int64_t kBatch = 3;

// Runs fn(group) on T threads, member t on a Gloo group as rank t; returns
// the members' results in rank order, or rethrows a member's exception: the
// first pipetwin::Error (a member's own refusal) before any other, since a
// member that refuses leaves the group, and a peer still connecting to it
// then fails in Gloo's connectFullMesh ("Connection closed by peer").
template <class Fn>
auto run_group(int T, Fn fn) {
  using Result = decltype(fn(pe::TpGroup()));
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<Result> results(T);
  std::vector<std::exception_ptr> errors(T);
  std::vector<std::thread> members;
  for (int t = 0; t < T; ++t) {
    members.emplace_back([&, t] {
      try {
        auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        const pe::TpGroup group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, t, T, opts);
        results[t] = fn(group);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (auto& m : members) m.join();
  std::exception_ptr first;
  for (auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const pipetwin::Error&) {
      throw;
    } catch (...) {
      if (!first) first = e;
    }
  }
  if (first) std::rethrow_exception(first);
  return results;
}

// Layers: 0 embedding, 1 block0, 2 block1, 3 lm_head.
pm::Model tiny(std::int64_t d_model = 32, std::int64_t d_ff = 64, std::int64_t heads = 4, std::int64_t vocab = 50) {
  return pm::transformer_model({2, d_model, d_ff, heads, 16, vocab}, pm::Precision::FP32, "t");
}

struct Data {
  at::Tensor input, targets, grad_out;  // grad_out: when the last layer run is not the loss
};

Data make_data(const pm::Model& m, int first, int last) {
  torch::manual_seed(17);
  const auto& s = m.layers.at(first).shape;
  Data d;
  d.input = m.layers.at(first).kind == pm::LayerKind::Embedding ? torch::randint(0, s.vocab, {kBatch, s.seq_len})
                                                                 : torch::randn({kBatch, s.seq_len, s.d_model});
  d.targets = torch::randint(0, s.vocab, {kBatch, s.seq_len});
  if (!pe::is_loss_layer(m, last)) d.grad_out = torch::randn({kBatch, s.seq_len, s.d_model});
  return d;
}

struct Outcome {
  at::Tensor out, input_grad;                       // input_grad: undefined for token ids
  std::vector<std::vector<at::Tensor>> grads;        // per layer: full gradients (gathered when sharded)
  std::vector<std::vector<at::Tensor>> local_grads;  // per layer: this member's own
};

// This member's chunk of the sequence (dimension 1).
at::Tensor chunk_of(const at::Tensor& whole, int T, int t) { return whole.chunk(T, 1)[t].clone(); }

// Forward and backward of layers first..last, whole or on this member's
// shards; with sequence parallelism, on its chunk of the sequence.
Outcome run_layers(const pm::Model& m, int first, int last, Data data, bool sharded, const pe::TpGroup& g,
                   bool sp = false) {
  const int T = pe::tp_size(g), t = pe::tp_rank(g);
  if (sp && data.input.is_floating_point()) data.input = chunk_of(data.input, T, t);
  if (sp && data.grad_out.defined()) data.grad_out = chunk_of(data.grad_out, T, t);
  const auto x = data.input.is_floating_point() ? data.input.clone().requires_grad_(true) : data.input;
  std::vector<std::vector<at::Tensor>> params;
  at::Tensor h = x;
  for (int l = first; l <= last; ++l) {
    auto p = sharded ? pe::init_layer_shard(m, l, kSeed, g) : pe::init_layer(m, l, kSeed);
    for (auto& t : p) t.requires_grad_(true);
    const auto targets = pe::is_loss_layer(m, l) ? data.targets : at::Tensor();
    h = sharded ? pe::forward_layer_tp(m, l, {h}, p, targets, g, sp) : pe::forward_layer(m, l, {h}, p, targets);
    params.push_back(p);
  }
  Outcome o;
  o.out = h.detach().clone();
  if (data.grad_out.defined()) {
    h.backward(data.grad_out);
  } else {
    h.backward();
  }
  if (x.requires_grad()) o.input_grad = x.grad();
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (sp) pe::sum_replicated_grads(m, first + static_cast<int>(i), params[i], g);
    std::vector<at::Tensor> local;
    for (const auto& p : params[i]) local.push_back(p.grad());
    o.local_grads.push_back(local);
    o.grads.push_back(sharded ? pe::gather_layer(m, first + static_cast<int>(i), local, g) : local);
  }
  return o;
}

// max |a - b| over the scale of b (its largest magnitude, at least `floor`).
double difference(const at::Tensor& a, const at::Tensor& b, double floor) {
  EXPECT_EQ(a.sizes(), b.sizes());
  if (a.sizes() != b.sizes()) return std::numeric_limits<double>::infinity();
  const double scale = std::max(floor, b.abs().max().item<double>());
  return (a - b).abs().max().item<double>() / scale;
}

struct Case {
  const char* name;
  int first, last;
};

class Sharded : public ::testing::TestWithParam<std::tuple<int, Case, bool>> {};

}  // namespace

TEST_P(Sharded, ForwardAndGatheredGradientsMatchTheWholeLayers) {
  const int T = std::get<0>(GetParam());
  const Case c = std::get<1>(GetParam());
  const bool sp = std::get<2>(GetParam());
  const auto m = tiny();
  const auto data = make_data(m, c.first, c.last);
  const auto whole = run_layers(m, c.first, c.last, data, false, {});
  const auto members =
      run_group(T, [&](const pe::TpGroup& g) { return run_layers(m, c.first, c.last, data, true, g, sp); });
  // With sequence parallelism a member holds its chunk of what crosses layers.
  const auto expected = [&](const at::Tensor& whole_tensor, int t) {
    return sp && whole_tensor.dim() == 3 ? chunk_of(whole_tensor, T, t) : whole_tensor;
  };
  double forward = 0, gradient = 0, per_tensor = 0, replicas = 0;
  for (int t = 0; t < T; ++t) {
    const auto& mine = members[t];
    forward = std::max(forward, difference(mine.out, expected(whole.out, t), 1.0));
    if (whole.input_grad.defined()) {
      gradient = std::max(gradient, difference(mine.input_grad, expected(whole.input_grad, t), 1e-30));
    }
    for (std::size_t l = 0; l < whole.grads.size(); ++l) {
      const auto splits = pe::tp_splits(m, c.first + static_cast<int>(l));
      double layer_scale = 1e-30;
      for (const auto& g : whole.grads[l]) layer_scale = std::max(layer_scale, g.abs().max().item<double>());
      for (std::size_t i = 0; i < whole.grads[l].size(); ++i) {
        gradient = std::max(gradient, difference(mine.grads[l][i], whole.grads[l][i], layer_scale));
        per_tensor = std::max(per_tensor, difference(mine.grads[l][i], whole.grads[l][i], 1e-30));
        // Replicated parameters get the same gradient on every member.
        if (splits[i] == pe::TpSplit::Replicated) {
          replicas = std::max(replicas, difference(mine.local_grads[l][i], members[0].local_grads[l][i], 1e-30));
        }
      }
    }
  }
  EXPECT_LE(forward, kBound);
  EXPECT_LE(gradient, kBound);
  EXPECT_LE(per_tensor, 10 * kBound);
  EXPECT_LE(replicas, kBound);
  std::printf("[ tp ] T=%d %-16s%s max difference: forward %.2e, gradients %.2e (per tensor %.2e), replicas %.2e\n",
              T, c.name, sp ? " (SP)" : "     ", forward, gradient, per_tensor, replicas);
}

INSTANTIATE_TEST_SUITE_P(Exec, Sharded,
                         ::testing::Combine(::testing::Values(1, 2),
                                            ::testing::Values(Case{"embedding", 0, 0}, Case{"block", 1, 1},
                                                              Case{"head", 3, 3}, Case{"block-block-head", 1, 3},
                                                              Case{"whole-model", 0, 3}),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           std::string name = std::get<1>(info.param).name;
                           for (auto& ch : name) ch = ch == '-' ? '_' : ch;
                           return "T" + std::to_string(std::get<0>(info.param)) + "_" + name +
                                  (std::get<2>(info.param) ? "_sp" : "");
                         });

TEST(TensorParallel, GatheredShardsAreTheFullInitialWeights) {
  const auto m = tiny();
  const auto members = run_group(2, [&](const pe::TpGroup& g) {
    std::vector<std::vector<at::Tensor>> full;
    for (int l = 0; l < static_cast<int>(m.layers.size()); ++l) {
      full.push_back(pe::gather_layer(m, l, pe::init_layer_shard(m, l, kSeed, g), g));
    }
    return full;
  });
  for (const auto& full : members) {
    for (int l = 0; l < static_cast<int>(m.layers.size()); ++l) {
      const auto init = pe::init_layer(m, l, kSeed);
      ASSERT_EQ(full[l].size(), init.size());
      for (std::size_t i = 0; i < init.size(); ++i) EXPECT_TRUE(torch::equal(full[l][i], init[i])) << l << "/" << i;
    }
  }
}

// Shards really are slices: half the elements of each split parameter.
TEST(TensorParallel, SplitParametersHoldOneTthOfTheElements) {
  const auto m = tiny();
  for (int l = 0; l < static_cast<int>(m.layers.size()); ++l) {
    const auto full = pe::init_layer(m, l, kSeed);
    const auto shard = pe::shard_layer(m, l, full, 2, 1);
    const auto splits = pe::tp_splits(m, l);
    for (std::size_t i = 0; i < full.size(); ++i) {
      const auto expected = splits[i] == pe::TpSplit::Replicated ? full[i].numel() : full[i].numel() / 2;
      EXPECT_EQ(shard[i].numel(), expected) << m.layers[l].name << " parameter " << i;
    }
  }
}

// --- The collectives, on small integers (every sum exact in fp32).
namespace {

at::Tensor ramp(std::vector<std::int64_t> shape, int t, double offset) {
  std::int64_t n = 1;
  for (const auto s : shape) n *= s;
  return torch::arange(n, torch::kFloat).view(shape) + offset * (t + 1);
}

at::Tensor sum_over(int T, const std::function<at::Tensor(int)>& f) {
  auto s = f(0);
  for (int t = 1; t < T; ++t) s = s + f(t);
  return s;
}

at::Tensor cat_over(int T, const std::function<at::Tensor(int)>& f) {
  std::vector<at::Tensor> parts;
  for (int t = 0; t < T; ++t) parts.push_back(f(t));
  return at::cat(parts, 1);
}


// y = op(x_t) and x_t's gradient for the output gradient gy_t.
std::pair<at::Tensor, at::Tensor> run_op(const std::function<at::Tensor(const at::Tensor&)>& op, const at::Tensor& x,
                                        const at::Tensor& gy) {
  const auto leaf = x.clone().requires_grad_(true);
  const auto y = op(leaf);
  y.backward(gy);
  return {y.detach().clone(), leaf.grad()};
}

class Collectives : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(Collectives, ForwardAndBackwardAreMegatronsConjugatePairs) {
  const int T = GetParam();
  const std::vector<std::int64_t> shape{2, 6, 3}, gathered{2, 6 * T, 3}, scattered{2, 6 / T, 3};
  const auto x = [&](int t) { return ramp(shape, t, 100); };
  const auto gy = [&](const std::vector<std::int64_t>& s) { return [s](int t) { return ramp(s, t, 1000); }; };
  const auto results = run_group(T, [&](const pe::TpGroup& g) {
    const int t = pe::tp_rank(g);
    return std::vector<std::pair<at::Tensor, at::Tensor>>{
        run_op([&](const at::Tensor& v) { return pe::tp_copy(v, g); }, x(t), gy(shape)(t)),
        run_op([&](const at::Tensor& v) { return pe::tp_reduce(v, g); }, x(t), gy(shape)(t)),
        run_op([&](const at::Tensor& v) { return pe::sp_gather(v, g, 1); }, x(t), gy(gathered)(t)),
        run_op([&](const at::Tensor& v) { return pe::sp_reduce_scatter(v, g, 1); }, x(t), gy(scattered)(t)),
        run_op([&](const at::Tensor& v) { return pe::sp_split(v, g, 1); }, x(t), gy(scattered)(t))};
  });
  for (int t = 0; t < T; ++t) {
    const auto& r = results[t];
    const auto chunk = [&](const at::Tensor& v) { return v.chunk(T, 1)[t]; };
    EXPECT_TRUE(torch::equal(r[0].first, x(t)));  // f: identity, gradient summed
    EXPECT_TRUE(torch::equal(r[0].second, sum_over(T, gy(shape))));
    EXPECT_TRUE(torch::equal(r[1].first, sum_over(T, x)));  // g: summed, gradient identity
    EXPECT_TRUE(torch::equal(r[1].second, gy(shape)(t)));
    EXPECT_TRUE(torch::equal(r[2].first, cat_over(T, x)));  // all-gather / reduce-scatter
    EXPECT_TRUE(torch::equal(r[2].second, chunk(sum_over(T, gy(gathered)))));
    EXPECT_TRUE(torch::equal(r[3].first, chunk(sum_over(T, x))));  // reduce-scatter / all-gather
    EXPECT_TRUE(torch::equal(r[3].second, cat_over(T, gy(scattered))));
    EXPECT_TRUE(torch::equal(r[4].first, chunk(x(t))));  // split / all-gather
    EXPECT_TRUE(torch::equal(r[4].second, cat_over(T, gy(scattered))));
  }
}

TEST_P(Collectives, VocabParallelCrossEntropyIsTheWholeOne) {
  const int T = GetParam();
  torch::manual_seed(3);
  const auto logits = (4 * torch::randn({12, 12})).requires_grad_(true);
  const auto targets = torch::randint(0, 12, {12});
  const auto loss = at::cross_entropy_loss(logits, targets);
  loss.backward();
  const auto results = run_group(T, [&](const pe::TpGroup& g) {
    const auto mine = logits.detach().chunk(pe::tp_size(g), 1)[pe::tp_rank(g)].clone().requires_grad_(true);
    const auto l = pe::vocab_parallel_cross_entropy(mine, targets, g).mean();
    l.backward();
    return std::pair{l.detach(), mine.grad()};
  });
  for (int t = 0; t < T; ++t) {
    EXPECT_LE(difference(results[t].first, loss.detach(), 1.0), kBound);
    EXPECT_LE(difference(results[t].second, logits.grad().chunk(T, 1)[t], 1e-30), kBound);
  }
}

INSTANTIATE_TEST_SUITE_P(Exec, Collectives, ::testing::Values(1, 2, 3));

// --- What T members cannot split.
namespace {

void expect_refused(const pm::Model& m, int index, int T, const std::vector<std::string>& words, bool sp = false) {
  try {
    pe::check_tensor_parallel(m, index, T, sp);
    ADD_FAILURE() << m.layers.at(index).name << " accepted with T = " << T;
  } catch (const pipetwin::Error& e) {
    const std::string what = e.what();
    for (const auto& w : words) EXPECT_NE(what.find(w), std::string::npos) << "'" << w << "' not in: " << what;
  }
}

}  // namespace

TEST(TensorParallel, RefusesWhatDoesNotDivideNamingTheLayerAndField) {
  expect_refused(tiny(24, 64, 3), 1, 2, {"layer block0", "heads = 3", "T = 2"});
  expect_refused(tiny(32, 66, 4), 2, 4, {"layer block1", "d_ff = 66", "T = 4"});
  expect_refused(tiny(32, 64, 4, 51), 0, 2, {"layer embedding", "vocab = 51", "T = 2"});
  expect_refused(tiny(32, 64, 4, 51), 3, 2, {"layer lm_head", "vocab = 51", "T = 2"});
  expect_refused(pm::mlp_model({24, 5, {32, 16}}, pm::Precision::FP32, "m"), 0, 2, {"layer", "is not split"});
  expect_refused(tiny(), 1, 0, {"T must be at least 1"});
  expect_refused(tiny(), 1, 3, {"layer block0", "heads = 4", "T = 3"});
  const auto odd_sequence = pm::transformer_model({1, 32, 64, 4, 15, 50}, pm::Precision::FP32, "s");
  EXPECT_NO_THROW(pe::check_tensor_parallel(odd_sequence, 1, 2));
  expect_refused(odd_sequence, 1, 2, {"layer block0", "seq_len = 15", "T = 2"}, true);
  EXPECT_NO_THROW(pe::check_tensor_parallel(tiny(24, 64, 3, 51), 1, 1));  // one member splits nothing
}

TEST(TensorParallel, AGroupRefusesBeforeAnyCollective) {
  const auto m = tiny(24, 64, 3);
  EXPECT_THROW(run_group(2, [&](const pe::TpGroup& g) { return pe::init_layer_shard(m, 1, kSeed, g); }),
               pipetwin::Error);
  const auto data = make_data(m, 1, 1);
  const auto params = pe::init_layer(m, 1, kSeed);
  const auto forward = [&](const pe::TpGroup& g) { return pe::forward_layer_tp(m, 1, {data.input}, params, {}, g); };
  EXPECT_THROW(run_group(2, forward), pipetwin::Error);
}
