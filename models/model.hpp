// A network as pipetwin sees it: an ordered list of layers (a topological
// order of its layer graph), each with explicit kind and shape (so exec/ can
// build the real LibTorch module) and its costs per sample.
//
//   Costs per sample, FLOPs counted as 2 per multiply-add:
//     forward      F
//     input grad   I   (backward to the layer's input: on the critical path)
//     weight grad  W   (backward to its weights: deferrable, zero-bubble)
//     B = I + W
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pipetwin::models {

// FP8 (Transformer Engine's, torchao's float8 training): the transformer
// blocks' matrix products with their weights run in FP8 at the device's FP8
// rate, each operand cast with current (per-tensor, dynamic) scaling; the
// weights, activations and gradients are kept in BF16 (bytes_per_element 2)
// and the rest of the work runs in BF16.
enum class Precision { FP32, BF16, FP16, FP8 };
std::string_view precision_name(Precision p);
Precision parse_precision(std::string_view name);  // throws pipetwin::Error
int bytes_per_element(Precision p);
// Bytes as elements of the precision, rounded up: what a layer keeps in
// another type (fp32 log-probabilities of a 16-bit model) in its stashed_elems.
std::int64_t as_elems(double bytes, Precision precision);

enum class LayerKind {
  Embedding,         // token + position embedding: vocab x d_model, seq x d_model
  TransformerBlock,  // pre-norm self-attention + feed-forward, with residuals
  LmHead,            // final norm, linear to the vocabulary, softmax cross-entropy
  Linear,            // (ReLU on the input unless first) in_features -> out_features
  Conv,              // conv k x k (+ batch norm + ReLU), stride
  SepConv,           // depthwise k x k + pointwise 1 x 1 (+ batch norm + ReLU)
  Pool,              // k x k average or max pool, stride
  Add,               // element-wise sum of its inputs
  Concat,            // channel concatenation of its inputs
  ResidualBlock,     // two 3 x 3 convs with batch norm and a skip (1 x 1 conv when shapes change)
  ClassifierHead,    // global average pool + linear to the classes, softmax cross-entropy
  LlmEmbedding,      // decoder-only LLM (family llm): token (+ learned position) embedding
  DecoderBlock,      // pre-norm (GQA) self-attention with flash attention + GELU or SwiGLU MLP
  LlmHead,           // final norm, linear to the vocabulary (tied or not), cross-entropy
  MoeBlock,          // family moe: (GQA or latent) attention + a router over SwiGLU experts, top-k of them per token
};
std::string_view kind_name(LayerKind kind);

// Only the fields that a kind uses are non-zero.
struct LayerShape {
  std::int64_t seq_len = 0, d_model = 0, d_ff = 0, heads = 0, vocab = 0;  // transformer
  std::int64_t in_features = 0, out_features = 0;                        // linear
  std::int64_t in_channels = 0, out_channels = 0, kernel = 0, stride = 1;  // conv / pool
  std::int64_t in_height = 0, in_width = 0;                              // spatial input size
  bool relu = false;
  bool max_pool = false;
  // Decoder-only LLMs (family llm), so that exec/ builds exactly the layer
  // the costs describe: key/value heads (0: as many as heads), rows of a
  // learned position table (0: none, rotary positions), the MLP and norm
  // variants, which linears have biases, and whether the head reuses the
  // token embedding.
  std::int64_t kv_heads = 0, positions = 0;
  bool swiglu = false, rms_norm = false, tied = false;
  bool qkv_bias = false, out_bias = false, mlp_bias = false;
  bool flash_attention = true;  // false: the attention's scores are materialized (LlmSpec::flash_attention)
  std::int64_t experts = 0, top_k = 0;  // a moe_block's routed experts, and how many a token takes
  // Family moe, for exec/ to build the block models/family_moe.cpp counts:
  // each routed expert's and the shared experts' SwiGLU widths, an attention
  // head's width (0: d_model / heads) and Qwen3's per-head Q and K norms. What
  // the executor does not build is named so that it can refuse it: DeepSeek's
  // latent attention, its routing bias, and a capacity that drops tokens.
  std::int64_t expert_ffn = 0, shared_ffn = 0, head_dim = 0;
  bool qk_norm = false, latent_attention = false, router_bias = false;
  double capacity_factor = 0;
};

struct LayerCost {
  double forward_flops = 0;
  double input_grad_flops = 0;
  double weight_grad_flops = 0;
  std::int64_t params = 0;
  std::int64_t stashed_elems = 0;  // what backward needs, per sample
  // True when stashed_elems includes the layer's input (its first op keeps
  // it). A stage keeps its received input for backward in any case, so a
  // stage starting at a layer that does not counts its input on top.
  bool keeps_input = true;
  std::int64_t output_elems = 0;   // what crosses a cut after this layer, per sample
  // What a deferred weight gradient keeps from the layer's I to its W (the
  // zero-bubble split), per sample: every linear's input and output
  // gradient; the rest of stashed_elems is freed by I. Of it,
  // weight_grad_replicated_elems stay whole on every device of a tensor
  // group (without sequence parallelism: a column-parallel linear's input).
  std::int64_t weight_grad_elems = 0;
  std::int64_t weight_grad_replicated_elems = 0;
  // Bytes per sample a backward of the layer holds at once beyond the stash,
  // while it runs (split over a tensor group with the layer): the
  // attention's score gradients, the loss's fp32 gradients over the
  // vocabulary. A stage's peak adds its largest to the stash's peak.
  double backward_workspace_bytes = 0;
  // Tensor parallelism (Megatron-LM): whether a group of T devices can split
  // the layer (its matrices by columns and rows, its vocabulary), and then the
  // collectives it runs per micro-batch: all-reduces (or, with sequence
  // parallelism, an all-gather and a reduce-scatter: the same bytes) of
  // tp_collective_elems per sample, in its forward and in its backward (input
  // gradient). Of stashed_elems, tp_replicated_elems stay whole on every
  // device of the group without sequence parallelism (the norms' inputs and
  // the residual dropouts: Korthikanti et al.'s 10sbh of 34sbh).
  bool tensor_split = false;
  int tp_forward_collectives = 0, tp_backward_collectives = 0;
  std::int64_t tp_collective_elems = 0;
  std::int64_t tp_replicated_elems = 0;
  // Of params, those every device of the group holds whole (the norms, the
  // biases after row-parallel matrices, a learned position table).
  std::int64_t tp_replicated_params = 0;
  // Memory-bound traffic per sample, in bytes read and written by the
  // layer's elementwise kernels (norms, activations, dropouts, residual adds,
  // rotary positions, the softmax of a materialized score matrix, the
  // cross-entropy over the logits), in its forward and in its input-gradient
  // pass; the matrix multiplications' own operands are not counted (their
  // time is the FLOPs'). Of each, the *_replicated part is done whole by
  // every device of a tensor group without sequence parallelism (the norms,
  // dropouts and residuals); the rest splits over the group. Timed against
  // the device's memory bandwidth where no calibrated curve covers the layer
  // (Device::traffic_seconds).
  double forward_traffic = 0, backward_traffic = 0;
  double forward_traffic_replicated = 0, backward_traffic_replicated = 0;
  // Selective recompute (Megatron-LM's, Korthikanti et al. 2022): the
  // attention core (QKᵀ, softmax, dropout, AV) is not kept but re-run inside
  // the layer's backward. Per sample: the elements of stashed_elems it frees
  // (the score matrices; none under flash attention, which keeps none), and
  // the forward FLOPs and elementwise traffic it re-runs; all split over a
  // tensor group with the layer's heads.
  std::int64_t selective_elems = 0;
  double selective_flops = 0, selective_traffic = 0;
  // torchtitan's per-operator selective recompute (activation_checkpoint
  // mode "selective", selective_ac_option "op"): a checkpointed block saves
  // the outputs of its attention kernel and of every other matrix product
  // (the 1st, 3rd, ... in forward order) and its input, and re-runs the rest
  // of its forward inside its backward. Per sample: the elements it keeps
  // (0: the layer is not checkpointed and keeps stashed_elems), of them those
  // whole on every device of a tensor group without sequence parallelism
  // (its input) and those whole with it too (a row-parallel product's output
  // before its reduction); and the forward FLOPs it re-runs (the other
  // products, and the attention core where no fused kernel's output is
  // saved). Its elementwise kernels are all re-run: forward_traffic.
  std::int64_t op_saved_elems = 0, op_saved_replicated_elems = 0, op_saved_whole_elems = 0;
  double op_recompute_flops = 0;
  // What FP8 runs (Precision::FP8): per sample, the FLOPs of the layer's
  // products with its weights in each of F, I and W (the same in the three:
  // 2 x tokens x matrix parameters), of them those in op_recompute_flops,
  // and those parameters; and the traffic of casting their operands to FP8
  // (an amax pass and a cast writing the FP8 tensor and its transpose: the
  // inputs in forward, the output gradients in backward), whole on every
  // device of a tensor group where the operand is (without sequence
  // parallelism, a column-parallel input and a row-parallel output gradient).
  double fp8_flops = 0, fp8_op_recompute_flops = 0;
  std::int64_t fp8_params = 0;
  double fp8_forward_traffic = 0, fp8_backward_traffic = 0;
  double fp8_forward_traffic_replicated = 0, fp8_backward_traffic_replicated = 0;
  // Context parallelism: per sample, the keys and values of the layer's
  // attention (2 x tokens x K's width) that a group passes around, a chunk
  // of each rank's a step (split over a tensor group with the heads); 0: no
  // attention. Its attention core's forward FLOPs are selective_flops.
  std::int64_t cp_kv_elems = 0;
  // A fused attention kernel (flash attention): the sequence its core runs
  // over and whether under a causal mask; 0: none (a materialized score
  // matrix, or no attention). Where the device gives the kernel's rates
  // (Device::attention) the core, selective_flops forward and twice that in
  // the input gradient, is timed at them instead of with the products.
  std::int64_t attention_seq = 0;
  bool attention_causal = false;
  // Mixture of experts (family moe): of params, the routed experts' (split
  // over an expert-parallel group of E devices, models/family_moe.cpp); per
  // sample, the routed experts' products' FLOPs in each of F, I and W and,
  // of stashed_elems, their stash, both for the mean device; the elements one
  // dispatch moves (and one combine moves back: tokens x top-k x hidden);
  // and the busiest device's expert load over the mean, which the all-to-all
  // makes everyone wait for (with E > 1).
  std::int64_t expert_params = 0;
  double expert_flops = 0;
  std::int64_t expert_stashed_elems = 0;
  std::int64_t dispatch_elems = 0;
  double expert_load = 1;
  double backward_flops() const { return input_grad_flops + weight_grad_flops; }
};

struct Layer {
  std::string name;
  LayerKind kind = LayerKind::Linear;
  LayerShape shape;
  LayerCost cost;
  std::vector<int> inputs;  // producers (indices of earlier layers); empty = the model input
};

struct Model {
  std::string name;
  std::string family;
  Precision precision = Precision::FP32;
  // Gradients accumulated and reduced in another precision than the weights
  // (Megatron-LM's fp32 main_grad beside 16-bit weights: 18 bytes a parameter
  // with Adam, not 16); unset: the weights'.
  std::optional<Precision> grad_precision;
  Precision gradients() const { return grad_precision.value_or(precision); }
  std::int64_t input_elems = 0;  // per sample, fed to layer 0
  std::vector<Layer> layers;     // in a topological order

  std::int64_t params() const;
  double forward_flops() const;  // per sample
  std::vector<std::pair<int, int>> edges() const;
  // Bytes per sample crossing the cut before position p (0 < p < n): every
  // tensor produced before p and consumed at or after p, counted once.
  std::vector<std::int64_t> cut_elems() const;
};

// Whether `model` has products FP8 runs (a layer with LayerCost::fp8_flops):
// the transformer and llm families' blocks.
bool has_fp8_products(const Model& model);

// `model` in another 16-bit precision (--precision): bf16, fp16 or fp8, from
// a model built in one of them (its tensors' sizes stay: all keep 2 bytes an
// element). Refused, naming the model: fp32 either way, and fp8 for a model
// without products FP8 runs (LayerCost::fp8_flops). `name` empty: as built.
Model with_precision(Model model, std::string_view name);

// The operators (kernels, autograd nodes) layer `index` of `model` runs in its
// forward, as exec/ builds it (views left out; the last layer's loss
// counted): what a layer's fixed cost per call grows with where a calibration
// times a kind it did not see on the curve pooled over the kinds it did
// (KindEfficiency::per_operator). A transformer block runs 14, a linear layer 1
// or 2.
int operators(const Model& model, int index);

// The bytes of weights a pass of layer `index` reads: all of them, but for an
// embedding, which gathers rows of its table (0 here).
double pass_weight_bytes(const Model& model, int index);

}  // namespace pipetwin::models
