// Transformer T(L, H, A) of the GPipe paper, and the plain MLP.
//
//   embedding -> L x transformer_block -> lm_head
//
// Per sample, sequence s, model dimension d, feed-forward f, heads a, vocab V:
//   block  F = 8sd² + 4sdf + 4s²d            (QKV+O, FFN, QKᵀ and AV)
//          I = 8sd² + 4sdf + 8s²d            (QKᵀ and AV have two activation operands)
//          W = 8sd² + 4sdf
//          stashed s(8d + 2f) + as² + 4s       (what LibTorch keeps: norm and projection
//                                               inputs, Q K V, attention probabilities,
//                                               FFN hidden before and after GELU, the
//                                               norms' mean and rstd; not the output)
//   head   stashed s(2d + V) + 2s           (norm input and output, log-probabilities:
//                                               fp32, as the executor computes the loss,
//                                               so 2sV elements of a 16-bit model)
//
// MLP layer i: ReLU on its input unless first, then the linear map, so that
// each activation is kept by exactly one layer (the one that reads it).
#include "models/families.hpp"

namespace pipetwin::models {

std::int64_t transformer_params_closed_form(const TransformerSpec& t) {
  const std::int64_t d = t.d_model, f = t.d_ff, V = t.vocab, s = t.seq_len;
  return V * d + s * d + t.layers * (4 * d * d + 2 * d * f + 9 * d + f) + 2 * d + d * V + V;
}

Model transformer_model(const TransformerSpec& t, Precision precision, std::string name) {
  const double s = static_cast<double>(t.seq_len), d = static_cast<double>(t.d_model),
               f = static_cast<double>(t.d_ff), a = static_cast<double>(t.heads), V = static_cast<double>(t.vocab);
  Model m;
  m.name = std::move(name);
  m.family = "transformer";
  m.precision = precision;
  m.input_elems = t.seq_len;  // token ids
  LayerShape shape;
  shape.seq_len = t.seq_len;
  shape.d_model = t.d_model;
  shape.d_ff = t.d_ff;
  shape.heads = t.heads;
  shape.vocab = t.vocab;

  Layer emb{"embedding", LayerKind::Embedding, shape, {}, {}};
  emb.cost.forward_flops = s * d;  // adding the position embedding
  emb.cost.weight_grad_flops = s * d;
  emb.cost.params = t.vocab * t.d_model + t.seq_len * t.d_model;
  emb.cost.output_elems = t.seq_len * t.d_model;
  // Vocabulary-parallel: each device looks up its share of the words; one all-reduce of the output.
  emb.cost.tensor_split = true;
  emb.cost.tp_forward_collectives = 1;
  emb.cost.tp_collective_elems = t.seq_len * t.d_model;
  m.layers.push_back(emb);

  for (std::int64_t i = 0; i < t.layers; ++i) {
    Layer b{"block" + std::to_string(i), LayerKind::TransformerBlock, shape, {}, {static_cast<int>(m.layers.size()) - 1}};
    const double matmul = 8 * s * d * d + 4 * s * d * f;
    b.cost.forward_flops = matmul + 4 * s * s * d;
    b.cost.input_grad_flops = matmul + 8 * s * s * d;
    b.cost.weight_grad_flops = matmul;
    b.cost.params = 4 * t.d_model * t.d_model + 2 * t.d_model * t.d_ff + 9 * t.d_model + t.d_ff;
    b.cost.stashed_elems = static_cast<std::int64_t>(s * (8 * d + 2 * f) + a * s * s + 4 * s);
    b.cost.output_elems = t.seq_len * t.d_model;
    // Megatron's block: attention and feed-forward each column- then row-parallel,
    // one all-reduce after each in forward, one before each in backward.
    b.cost.tensor_split = true;
    b.cost.tp_forward_collectives = 2;
    b.cost.tp_backward_collectives = 2;
    b.cost.tp_collective_elems = t.seq_len * t.d_model;
    b.cost.tp_replicated_elems = 2 * t.seq_len * t.d_model + 4 * t.seq_len;  // the two norms' inputs and statistics
    // From I to W: each linear's input and output gradient (QKV: s d and 3 s d;
    // attention output: s d and s d; feed-forward: s d and s f, s f and s d).
    // The column-parallel inputs and the row-parallel output gradients stay
    // whole on every member of a tensor group.
    b.cost.weight_grad_elems = t.seq_len * (8 * t.d_model + 2 * t.d_ff);
    b.cost.weight_grad_replicated_elems = 4 * t.seq_len * t.d_model;
    // The softmax's backward output and its scaled copy, a s x s each.
    b.cost.backward_workspace_bytes = 2 * a * s * s * bytes_per_element(precision);
    // Selective recompute: the scores not kept, QKᵀ and AV re-run in the backward.
    b.cost.selective_elems = static_cast<std::int64_t>(a * s * s);
    b.cost.selective_flops = 4 * s * s * d;
    // FP8 casts: the inputs of QKV and of the first linear (whole), the context and the
    // second's input; the output gradients of QKV, the first, the output and the second (whole).
    set_fp8_costs(b.cost, s, 4 * t.d_model * t.d_model + 2 * t.d_model * t.d_ff, precision, 2 * d, d + f, 2 * d, 3 * d + f);
    b.cost.cp_kv_elems = 2 * t.seq_len * t.d_model;
    m.layers.push_back(b);
  }

  Layer head{"lm_head", LayerKind::LmHead, shape, {}, {static_cast<int>(m.layers.size()) - 1}};
  head.cost.forward_flops = 2 * s * d * V + 5 * s * V;  // projection + softmax cross-entropy
  head.cost.input_grad_flops = 2 * s * d * V + s * V;
  head.cost.weight_grad_flops = 2 * s * d * V;
  head.cost.params = 2 * t.d_model + t.d_model * t.vocab + t.vocab;
  head.cost.stashed_elems = 2 * t.seq_len * t.d_model + as_elems(4 * s * V, precision) + 2 * t.seq_len;
  head.cost.output_elems = 1;  // the loss
  head.cost.weight_grad_elems = t.seq_len * (t.d_model + t.vocab);  // the normed input, the logits' gradient
  head.cost.weight_grad_replicated_elems = t.seq_len * t.d_model;
  head.cost.backward_workspace_bytes = 8 * s * V;  // fp32: the loss's gradient and log-softmax's
  // Vocabulary-parallel projection and cross-entropy (its all-reduces of s
  // numbers are left out); the input gradient is all-reduced in backward.
  head.cost.tensor_split = true;
  head.cost.tp_backward_collectives = 1;
  head.cost.tp_collective_elems = t.seq_len * t.d_model;
  head.cost.tp_replicated_elems = 2 * t.seq_len * t.d_model + 2 * t.seq_len;  // the final norm's input and output
  m.layers.push_back(head);
  return m;
}

Model mlp_model(const MlpSpec& spec, Precision precision, std::string name) {
  Model m;
  m.name = std::move(name);
  m.family = "mlp";
  m.precision = precision;
  m.input_elems = spec.input;
  std::vector<std::int64_t> widths{spec.input};
  widths.insert(widths.end(), spec.hidden.begin(), spec.hidden.end());
  widths.push_back(spec.output);
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    const bool last = i + 2 == widths.size();
    Layer l{"linear" + std::to_string(i), LayerKind::Linear, {}, {}, {}};
    if (i > 0) l.inputs = {static_cast<int>(i) - 1};
    l.shape.in_features = widths[i];
    l.shape.out_features = widths[i + 1];
    l.shape.relu = i > 0;  // on the input
    const double macs = static_cast<double>(widths[i]) * static_cast<double>(widths[i + 1]);
    l.cost.forward_flops = 2 * macs;
    l.cost.input_grad_flops = i == 0 ? 0 : 2 * macs;  // no gradient for the data
    l.cost.weight_grad_flops = 2 * macs;
    l.cost.params = widths[i] * widths[i + 1] + widths[i + 1];
    // ReLU(input), kept once for both ReLU and the linear map (the data is not
    // counted); the last layer also keeps its log-probabilities.
    l.cost.stashed_elems = (i > 0 ? widths[i] : 0) + (last ? widths[i + 1] : 0);
    l.cost.keeps_input = i == 0;  // ReLU keeps its output, not its input
    // From I to W: the linear map's input (ReLU's output; the data is not
    // counted) and its output gradient.
    l.cost.weight_grad_elems = (i > 0 ? widths[i] : 0) + widths[i + 1];
    l.cost.output_elems = last ? 1 : widths[i + 1];
    m.layers.push_back(l);
  }
  return m;
}

}  // namespace pipetwin::models
