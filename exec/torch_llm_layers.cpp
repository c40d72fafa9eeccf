// The llm family's layer kinds as functional LibTorch code (see the header).
#include "exec/torch_llm_layers.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "exec/torch_checkpoint.hpp"
#include "exec/torch_layers.hpp"
#include "exec/torch_moe.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

using models::LayerKind;
using models::LayerShape;

constexpr double kNormEps = 1e-5;
constexpr double kRopeBase = 10000.0;

// Reads the parameters in the order init_llm_layer appends them.
struct Cursor {
  const std::vector<at::Tensor>& p;
  std::size_t i = 0;
  const at::Tensor& next() { return p.at(i++); }
  at::Tensor next_if(bool present) { return present ? p.at(i++) : at::Tensor(); }
};

at::Tensor norm(const LayerShape& s, const at::Tensor& x, Cursor& c) {
  if (s.rms_norm) {
    const auto& w = c.next();
    return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + kNormEps) * w;
  }
  const auto& w = c.next();
  const auto& b = c.next();
  return at::layer_norm(x, {s.d_model}, w, b, kNormEps);
}

at::Tensor project(const at::Tensor& x, Cursor& c, bool bias) {
  const auto& w = c.next();
  return linear(x, w, c.next_if(bias));
}

at::Tensor rotate_half(const at::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

// Standard RoPE on [b, heads, n, dh]: pairs (i, i + dh/2) rotated by
// position · base^(-2i/dh).
at::Tensor rotary(const at::Tensor& x) {
  const std::int64_t n = x.size(2), dh = x.size(3);
  const auto opts = at::TensorOptions(at::kFloat);
  const auto inv_freq = at::pow(kRopeBase, -at::arange(0, dh, 2, opts) / static_cast<double>(dh));
  const auto freqs = at::outer(at::arange(n, opts), inv_freq);
  const auto angles = at::cat({freqs, freqs}, -1).to(x.scalar_type());
  return x * angles.cos() + rotate_half(x) * angles.sin();
}

std::int64_t head_width(const LayerShape& s) { return s.head_dim > 0 ? s.head_dim : s.d_model / s.heads; }

// Qwen3's RMSNorm over each head's width.
at::Tensor head_norm(const at::Tensor& x, Cursor& c) {
  const auto& w = c.next();
  return x * at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + kNormEps) * w;
}

at::Tensor attention(const LayerShape& s, const at::Tensor& h, Cursor& c) {
  const std::int64_t b = h.size(0), n = h.size(1), a = s.heads, g = s.kv_heads > 0 ? s.kv_heads : s.heads;
  const std::int64_t dh = head_width(s);
  auto q = project(h, c, s.qkv_bias).view({b, n, a, dh});
  auto k = project(h, c, s.qkv_bias).view({b, n, g, dh});
  auto v = project(h, c, s.qkv_bias).view({b, n, g, dh}).transpose(1, 2);
  if (s.qk_norm) {
    q = head_norm(q, c);
    k = head_norm(k, c);
  }
  q = q.transpose(1, 2);
  k = k.transpose(1, 2);
  if (s.positions == 0) {
    q = rotary(q);
    k = rotary(k);
  }
  if (g != a) {  // GQA: each key/value head serves a/g consecutive query heads
    k = k.repeat_interleave(a / g, 1);
    v = v.repeat_interleave(a / g, 1);
  }
  const bool flash = s.flash_attention;
  const at::Tensor ctx = attention_core(q, k, v, [flash, dh](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    if (flash) return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
    // The scores materialized, as the model's costs then count them.
    const std::int64_t n = q.size(2);
    auto scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(dh)));
    const auto future = at::ones({n, n}, at::TensorOptions(at::kBool).device(q.device())).triu(1);
    return at::matmul(at::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1), v);
  });
  return project(ctx.transpose(1, 2).reshape({b, n, a * dh}), c, s.out_bias);
}

at::Tensor mlp(const LayerShape& s, const at::Tensor& h, Cursor& c) {
  if (s.swiglu) {
    auto gate = project(h, c, s.mlp_bias);
    auto up = project(h, c, s.mlp_bias);
    return project(at::silu(gate) * up, c, s.mlp_bias);
  }
  return project(at::gelu(project(h, c, s.mlp_bias), "tanh"), c, s.mlp_bias);
}

at::Tensor decoder_block(const LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p) {
  Cursor c{p};
  auto x1 = x + attention(s, norm(s, x, c), c);
  return x1 + mlp(s, norm(s, x1, c), c);
}

[[noreturn]] void refuse_tied(const models::Layer& layer) {
  throw Error("layer " + layer.name +
              " (llm_head) is tied to the token embedding, which the executor cannot share between layers "
              "(they may sit on different stages): run an untied config (tied_embeddings: false) instead");
}

}  // namespace

at::Tensor attention_half(const LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p, std::size_t* next) {
  Cursor c{p, *next};
  auto y = x + attention(s, norm(s, x, c), c);
  *next = c.i;
  return y;
}

at::Tensor llm_norm(const LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p, std::size_t* next) {
  Cursor c{p, *next};
  auto y = norm(s, x, c);
  *next = c.i;
  return y;
}

at::Tensor swiglu(const at::Tensor& x, const at::Tensor& gate, const at::Tensor& up, const at::Tensor& down) {
  return linear(at::silu(linear(x, gate, at::Tensor())) * linear(x, up, at::Tensor()), down, at::Tensor());
}

bool is_llm_kind(LayerKind kind) {
  return kind == LayerKind::LlmEmbedding || kind == LayerKind::DecoderBlock || kind == LayerKind::LlmHead ||
         kind == LayerKind::MoeBlock;
}

std::vector<at::Tensor> init_llm_layer(const models::Layer& layer, at::Generator& gen) {
  const auto& s = layer.shape;
  const std::int64_t h = s.d_model, dh = head_width(s), kv = dh * (s.kv_heads > 0 ? s.kv_heads : s.heads);
  std::vector<at::Tensor> p;
  const auto norm_params = [&] {
    p.push_back(torch::ones({h}));
    if (!s.rms_norm) p.push_back(torch::zeros({h}));
  };
  const auto lin = [&](std::int64_t out, std::int64_t in, bool bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    p.push_back(torch::empty({out, in}).uniform_(-bound, bound, gen));
    if (bias) p.push_back(torch::empty({out}).uniform_(-bound, bound, gen));
  };
  switch (layer.kind) {
    case LayerKind::LlmEmbedding:
      p.push_back(torch::empty({s.vocab, h}).normal_(0, 0.02, gen));
      if (s.positions > 0) p.push_back(torch::empty({s.positions, h}).normal_(0, 0.02, gen));
      break;
    case LayerKind::DecoderBlock:
    case LayerKind::MoeBlock:
      norm_params();
      lin(dh * s.heads, h, s.qkv_bias);
      lin(kv, h, s.qkv_bias);
      lin(kv, h, s.qkv_bias);
      if (s.qk_norm) {
        p.push_back(torch::ones({dh}));
        p.push_back(torch::ones({dh}));
      }
      lin(h, dh * s.heads, s.out_bias);
      norm_params();
      if (layer.kind == LayerKind::MoeBlock) {
        init_moe_mlp(s, gen, p);
        break;
      }
      lin(s.d_ff, h, s.mlp_bias);
      if (s.swiglu) lin(s.d_ff, h, s.mlp_bias);
      lin(h, s.d_ff, s.mlp_bias);
      break;
    case LayerKind::LlmHead:
      if (s.tied) refuse_tied(layer);
      norm_params();
      lin(s.vocab, h, false);
      break;
    default: throw Error("exec: layer " + layer.name + " is not of the llm family");
  }
  return p;
}

at::Tensor forward_llm_layer(const models::Layer& layer, const at::Tensor& x, const std::vector<at::Tensor>& p,
                             const at::Tensor& targets) {
  const auto& s = layer.shape;
  switch (layer.kind) {
    case LayerKind::LlmEmbedding: {
      auto y = at::embedding(p.at(0), x);
      return s.positions > 0 ? y + p.at(1).narrow(0, 0, x.size(-1)) : y;
    }
    case LayerKind::DecoderBlock: return decoder_block(s, x, p);
    case LayerKind::MoeBlock: return moe_block(s, x, p, {});
    case LayerKind::LlmHead: {
      if (s.tied) refuse_tied(layer);
      Cursor c{p};
      auto logits = project(norm(s, x, c), c, false);
      return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
    }
    default: throw Error("exec: layer " + layer.name + " is not of the llm family");
  }
}

}  // namespace pipetwin::exec
