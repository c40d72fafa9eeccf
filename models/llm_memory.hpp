// Memory per GPU of a decoder-only LLM (family llm) under tensor (T),
// pipeline (K) and data (D) parallelism, in closed form, after Korthikanti et
// al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
// (Table 2, Sections 4 and 5), and Megatron-LM's theoretical_memory_usage.py
// for the weights and the optimizer state.
//
// Activations are 16-bit (2 bytes an element), dropout masks 1 byte an
// element, the logits kept by the cross-entropy 32-bit, all in bytes; s the
// sequence, b the micro-batch, h the hidden size, a the heads, f the MLP
// width, kv the width of K (and of V): h·kv_heads/heads, V the vocabulary.
//
// Per layer, per micro-batch, term by term as in the paper's Section 4.1:
//   kept whole under tensor parallelism (split only by sequence parallelism):
//     input of the first norm 2sbh, its output (the QKV projection's input) 2sbh,
//     input of the second norm 2sbh, its output (the first MLP matrix's input) 2sbh,
//     dropout masks after attention and after the MLP: sbh each (when dropout)
//   split by tensor parallelism:
//     Q 2sbh, K and V 2sb·kv each, the attention output (the output
//     projection's input) 2sbh, and the MLP's intermediates: GELU's input and
//     output 2sbf each, SwiGLU's gate and up projections and their product
//     2sbf each (the activation's inputs and its output, as for GELU; what
//     Megatron's fused SwiGLU keeps)
//   the attention core, split by tensor parallelism: the softmax output 2as²b,
//     and with dropout its mask as²b and output 2as²b (5as²b; 2as²b without
//     dropout). Absent under flash attention (it keeps Q, K, V and the output,
//     already counted, and a softmax statistic of 4asb bytes, left out as
//     the paper leaves out the norms' statistics), and under selective
//     recompute (the paper recomputes exactly this part).
// For GPT (gelu, f = 4h, kv = h, dropout) the kept-whole terms are 10sbh and
// the split ones 24sbh: the paper's sbh(34 + 5as/h) without parallelism,
// sbh(10 + 24/T + 5as/(hT)) with T, and sbh/T·(34 + 5as/h) with sequence
// parallelism. Full recompute keeps the layer input only: 2sbh (2sbh/T with
// sequence parallelism).
#pragma once

#include <cstdint>

#include "models/families.hpp"

namespace pipetwin::models {

// One token's share of a decoder block's stash (b = 1, s = 1), split as above.
struct LlmLayerStash {
  double whole_elems = 0;     // 16-bit elements kept whole under tensor parallelism
  double mask_bytes = 0;      // 1-byte dropout masks, kept whole under tensor parallelism
  double split_elems = 0;     // 16-bit elements split by tensor parallelism
  double core_bytes_per_s = 0;  // the attention core, bytes per token per unit of sequence (5a or 2a)
};
LlmLayerStash llm_layer_stash(const LlmSpec& spec);

enum class LlmRecompute { None, Selective, Full };

struct LlmParallel {
  int tensor = 1;            // T
  int pipeline = 1;          // K
  int data = 1;              // D (for the distributed optimizer)
  int virtual_stages = 1;    // V: chunks per pipeline rank (interleaved 1F1B when > 1)
  std::int64_t micro_batch = 1;   // b
  std::int64_t microbatches = 0;  // M per step; 0: at least as many as the schedule holds in flight
  bool sequence_parallel = false;
  LlmRecompute recompute = LlmRecompute::None;
  // Flash attention: no score matrix kept, whatever the recompute. Off gives
  // the paper's forms with their 5as/h term.
  bool flash_attention = true;
  bool distributed_optimizer = false;  // ZeRO-1: optimizer state split over D
};

// Activation bytes per GPU of one decoder block for one micro-batch.
double llm_layer_activation_bytes(const LlmSpec& spec, const LlmParallel& par);

// What one pipeline rank holds.
struct LlmRankMemory {
  double params = 0;                  // parameters on this GPU (its layers' share under T)
  double weight_and_optimizer_bytes = 0;
  double layer_activation_bytes = 0;  // one block, one micro-batch
  double layers_in_flight = 0;        // blocks' worth of stashes held at the peak
  double embedding_activation_bytes = 0;  // rank 0: the embedding dropout masks in flight
  double output_activation_bytes = 0;     // rank K-1: final norm, head input, fp32 logits
  double activation_bytes = 0;
  double total_bytes() const { return weight_and_optimizer_bytes + activation_bytes; }
};

// Rank r of K (0 <= r < K). Throws pipetwin::Error for a layout that does not
// divide the layers (L must be a multiple of K·V) or the heads (T must divide
// heads and kv_heads).
LlmRankMemory llm_rank_memory(const LlmSpec& spec, const LlmParallel& par, int rank);
// The most loaded rank (the largest total).
LlmRankMemory llm_memory(const LlmSpec& spec, const LlmParallel& par);

}  // namespace pipetwin::models
