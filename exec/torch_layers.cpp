// The layer kinds of models/ as functional LibTorch code, and the linear layer
// whose weight gradient can be deferred (I/W split).
#include "exec/torch_layers.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <atomic>
#include <cmath>
#include <optional>

#include "exec/torch_checkpoint.hpp"
#include "exec/torch_llm_layers.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

using models::LayerKind;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<WeightGradQueue*> g_defer{nullptr};

void accumulate(const at::Tensor& param, const at::Tensor& grad) {
  at::Tensor& g = param.mutable_grad();
  if (g.defined()) {
    g.add_(grad);
  } else {
    g = grad.detach().clone();
  }
}

// y = x·Wᵀ + b (b undefined: no bias). Backward: grad_x now; grad_W and
// grad_b now, or queued.
struct LinearFn : torch::autograd::Function<LinearFn> {
  // b: an optional (autograd takes no undefined tensor as an input).
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b) {
    ctx->save_for_backward({x, w, b.value_or(at::Tensor())});
    return at::linear(x, w, b);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &b = saved[2];
    const at::Tensor g = grads[0];
    at::Tensor gx = ctx->needs_input_grad(0) ? at::matmul(g, w) : at::Tensor();
    const auto weight_grads = [](const at::Tensor& go, const at::Tensor& in) {
      const auto g2 = go.reshape({-1, go.size(-1)});
      return std::pair{g2.t().mm(in.reshape({-1, in.size(-1)})), g2.sum(0)};
    };
    WeightGradQueue* queue = g_defer.load();
    if (queue != nullptr && w.requires_grad()) {
      // Detached: a saved input unpacks with its grad_fn, which would keep
      // the graph behind it (and the stage's input, through its
      // AccumulateGrad) alive until W.
      const at::Tensor go = g.detach(), in = x.detach();
      queue->push(
          [go, in, w, b, weight_grads]() mutable {
            torch::NoGradGuard no_grad;
            auto [gw, gb] = weight_grads(go, in);
            accumulate(w, gw);
            if (b.defined()) accumulate(b, gb);
          },
          {go});  // the input was stashed by the forward already
      return {gx, at::Tensor(), at::Tensor()};
    }
    auto [gw, gb] = weight_grads(g, x);
    return {gx, gw, b.defined() ? gb : at::Tensor()};
  }
};

std::uint64_t mix(std::uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

at::Tensor uniform(std::vector<std::int64_t> shape, double bound, at::Generator& gen) {
  return torch::empty(shape, torch::kFloat32).uniform_(-bound, bound, gen);
}

std::int64_t down(std::int64_t size, std::int64_t stride) { return (size + stride - 1) / stride; }

at::Tensor batch_norm_relu(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, bool relu) {
  // Batch statistics only (no running buffers): a recomputed forward is the same forward.
  auto y = at::batch_norm(x, w, b, {}, {}, /*training=*/true, 0.1, 1e-5, /*cudnn_enabled=*/true);
  return relu ? at::relu(y) : y;
}

at::Tensor conv(const at::Tensor& x, const at::Tensor& w, std::int64_t stride, std::int64_t groups = 1) {
  const std::int64_t pad = w.size(-1) / 2;
  return at::conv2d(x, w, {}, {stride, stride}, {pad, pad}, {1, 1}, groups);
}

at::Tensor transformer_block(const models::LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p) {
  const std::int64_t b = x.size(0), n = x.size(1), d = s.d_model, a = s.heads, dh = d / a;
  auto h = at::layer_norm(x, {d}, p[0], p[1]);
  auto qkv = linear(h, p[2], p[3]).view({b, n, 3, a, dh}).permute({2, 0, 3, 1, 4});
  auto ctx = attention_core(qkv[0], qkv[1], qkv[2], scaled_softmax_core(dh)).transpose(1, 2).reshape({b, n, d});
  auto x1 = x + linear(ctx, p[4], p[5]);
  auto f = at::gelu(linear(at::layer_norm(x1, {d}, p[6], p[7]), p[8], p[9]));
  return x1 + linear(f, p[10], p[11]);
}

}  // namespace

void WeightGradQueue::run() {
  auto work = std::move(work_);
  work_.clear();
  held_.clear();
  for (auto& w : work) w();
}

DeferWeightGrads::DeferWeightGrads(WeightGradQueue* queue) { g_defer.store(queue); }
DeferWeightGrads::~DeferWeightGrads() { g_defer.store(nullptr); }

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  return LinearFn::apply(x, weight, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt);
}

at::ScalarType dtype_of(models::Precision p) {
  switch (p) {
    case models::Precision::BF16: return at::kBFloat16;
    case models::Precision::FP16: return at::kHalf;
    default: return at::kFloat;
  }
}

bool is_loss_layer(const models::Model& m, int index) { return index + 1 == static_cast<int>(m.layers.size()); }

std::vector<std::int64_t> input_shape(const models::Model& m) {
  const auto& s = m.layers.front().shape;
  switch (m.layers.front().kind) {
    case LayerKind::Embedding:
    case LayerKind::LlmEmbedding: return {s.seq_len};
    case LayerKind::Linear: return {s.in_features};
    default: return {s.in_channels, s.in_height, s.in_width};
  }
}

at::ScalarType input_dtype(const models::Model& m) {
  const auto kind = m.layers.front().kind;
  return kind == LayerKind::Embedding || kind == LayerKind::LlmEmbedding ? at::kLong : dtype_of(m.precision);
}

std::vector<std::int64_t> output_shape(const models::Model& m, int index) {
  if (is_loss_layer(m, index)) return {};
  const auto& s = m.layers.at(index).shape;
  switch (m.layers.at(index).kind) {
    case LayerKind::Embedding:
    case LayerKind::TransformerBlock:
    case LayerKind::LlmEmbedding:
    case LayerKind::DecoderBlock:
    case LayerKind::MoeBlock: return {s.seq_len, s.d_model};
    case LayerKind::Linear: return {s.out_features};
    case LayerKind::Add:
    case LayerKind::Concat: return {s.out_channels, s.in_height, s.in_width};
    default: return {s.out_channels, down(s.in_height, s.stride), down(s.in_width, s.stride)};
  }
}

std::vector<at::Tensor> init_layer(const models::Model& m, int index, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(mix(seed ^ mix(static_cast<std::uint64_t>(index) + 1)));
  const auto& s = m.layers.at(index).shape;
  const auto lin = [&](std::int64_t out, std::int64_t in) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    return std::vector<at::Tensor>{uniform({out, in}, bound, gen), uniform({out}, bound, gen)};
  };
  const auto ones = [](std::int64_t n) { return torch::ones({n}); };
  const auto zeros = [](std::int64_t n) { return torch::zeros({n}); };
  const auto conv_w = [&](std::int64_t out, std::int64_t in_per_group, std::int64_t k) {
    return uniform({out, in_per_group, k, k}, 1.0 / std::sqrt(static_cast<double>(in_per_group * k * k)), gen);
  };
  std::vector<at::Tensor> p;
  const auto append = [&](std::vector<at::Tensor> more) { p.insert(p.end(), more.begin(), more.end()); };
  switch (m.layers.at(index).kind) {
    case LayerKind::Embedding:
      p = {torch::empty({s.vocab, s.d_model}).normal_(0, 0.02, gen), torch::empty({s.seq_len, s.d_model}).normal_(0, 0.02, gen)};
      break;
    case LayerKind::TransformerBlock:
      p = {ones(s.d_model), zeros(s.d_model)};
      append(lin(3 * s.d_model, s.d_model));
      append(lin(s.d_model, s.d_model));
      append({ones(s.d_model), zeros(s.d_model)});
      append(lin(s.d_ff, s.d_model));
      append(lin(s.d_model, s.d_ff));
      break;
    case LayerKind::LmHead:
      p = {ones(s.d_model), zeros(s.d_model)};
      append(lin(s.vocab, s.d_model));
      break;
    case LayerKind::Linear: p = lin(s.out_features, s.in_features); break;
    case LayerKind::Conv: p = {conv_w(s.out_channels, s.in_channels, s.kernel), ones(s.out_channels), zeros(s.out_channels)}; break;
    case LayerKind::SepConv:
      p = {conv_w(s.in_channels, 1, s.kernel), conv_w(s.out_channels, s.in_channels, 1), ones(s.out_channels),
           zeros(s.out_channels)};
      break;
    case LayerKind::ResidualBlock:
      p = {conv_w(s.out_channels, s.in_channels, 3), ones(s.out_channels), zeros(s.out_channels),
           conv_w(s.out_channels, s.out_channels, 3), ones(s.out_channels), zeros(s.out_channels)};
      if (s.stride != 1 || s.in_channels != s.out_channels) {
        append({conv_w(s.out_channels, s.in_channels, 1), ones(s.out_channels), zeros(s.out_channels)});
      }
      break;
    case LayerKind::ClassifierHead: p = lin(s.out_features, s.in_features); break;
    case LayerKind::Pool:
    case LayerKind::Add:
    case LayerKind::Concat: break;
    case LayerKind::LlmEmbedding:
    case LayerKind::DecoderBlock:
    case LayerKind::LlmHead:
    case LayerKind::MoeBlock: p = init_llm_layer(m.layers.at(index), gen); break;
  }
  return p;
}

at::Tensor forward_layer(const models::Model& m, int index, const std::vector<at::Tensor>& in,
                         const std::vector<at::Tensor>& p, const at::Tensor& targets) {
  const auto& layer = m.layers.at(index);
  const auto& s = layer.shape;
  const auto cross_entropy = [&](const at::Tensor& logits) {
    return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
  };
  switch (layer.kind) {
    case LayerKind::Embedding: return at::embedding(p[0], in[0]) + p[1];
    case LayerKind::TransformerBlock: return transformer_block(s, in[0], p);
    case LayerKind::LmHead: return cross_entropy(linear(at::layer_norm(in[0], {s.d_model}, p[0], p[1]), p[2], p[3]));
    case LayerKind::Linear: {
      auto y = linear(s.relu ? at::relu(in[0]) : in[0], p[0], p[1]);
      return is_loss_layer(m, index) ? cross_entropy(y) : y;
    }
    case LayerKind::Conv: return batch_norm_relu(conv(in[0], p[0], s.stride), p[1], p[2], s.relu);
    case LayerKind::SepConv: {
      auto depthwise = conv(in[0], p[0], s.stride, s.in_channels);
      return batch_norm_relu(conv(depthwise, p[1], 1), p[2], p[3], s.relu);
    }
    case LayerKind::Pool: {
      const std::int64_t k = s.kernel, pad = k / 2;
      return s.max_pool ? at::max_pool2d(in[0], {k, k}, {s.stride, s.stride}, {pad, pad})
                        : at::avg_pool2d(in[0], {k, k}, {s.stride, s.stride}, {pad, pad}, false, false);
    }
    case LayerKind::Add: return in.at(0) + in.at(1);
    case LayerKind::Concat: return at::cat(in, 1);
    case LayerKind::ResidualBlock: {
      auto y = batch_norm_relu(conv(in[0], p[0], s.stride), p[1], p[2], true);
      y = batch_norm_relu(conv(y, p[3], 1), p[4], p[5], false);
      auto skip = p.size() > 6 ? batch_norm_relu(conv(in[0], p[6], s.stride), p[7], p[8], false) : in[0];
      return at::relu(y + skip);
    }
    case LayerKind::ClassifierHead: return cross_entropy(linear(in[0].mean({2, 3}), p[0], p[1]));
    case LayerKind::LlmEmbedding:
    case LayerKind::DecoderBlock:
    case LayerKind::LlmHead:
    case LayerKind::MoeBlock: return forward_llm_layer(layer, in.at(0), p, targets);
  }
  throw Error("exec: layer " + layer.name + " has a kind this executor cannot run");
}

}  // namespace pipetwin::exec
