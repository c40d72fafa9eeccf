// Megatron-LM's theoretical_memory_usage.py (megatron/training/), written out
// again for a dense GPT (LayerNorm, no GQA, no MoE, MLA or MTP, tied
// embeddings), so that tests can hold pipetwin's memory against it.
#pragma once

#include <algorithm>
#include <optional>

namespace pipetwin::testing {

// The script's inputs, for a dense GPT without MoE, MLA or MTP.
struct MegatronArgs {
  double hidden, layers, heads, ffn, vocab, seq, micro_batch;
  double tp, pp, dp;
  bool distributed_optimizer;
  std::optional<double> num_microbatches;  // None: pp in flight
};

// compute_weight_and_optimizer_memory: LayerNorm (2 parameters per hidden
// unit), no GQA, tied embeddings, bytes of the most loaded shard.
double megatron_weight_and_optimizer(const MegatronArgs& a) {
  const double norm_size = 2;
  const double self_attn = 2 * a.hidden * a.hidden * ((1 + 1) * 1);  // (1 + groups/heads) · q_proj/h
  const double layer = 2 * a.hidden * (a.ffn * 1 + norm_size) + self_attn;
  const double embedding = a.hidden * a.vocab;
  const double block = layer * a.layers + norm_size * a.hidden;  // with the final norm
  const double most_loaded = (block / a.pp + embedding) / a.tp;
  const double bytes_per_param = a.distributed_optimizer ? 6 + 12 / a.dp : 18;
  return most_loaded * bytes_per_param;
}

// compute_activation_memory (sequence parallelism and selective recompute).
double megatron_activation(const MegatronArgs& a) {
  const double sbh = a.seq * a.micro_batch * a.hidden;
  double m = sbh * (18 + 4 * (a.ffn / a.hidden)) * a.layers;
  m += 8 * a.seq * a.micro_batch * a.pp;  // the token ids
  m += sbh * a.pp;                        // the embedding's dropout
  if (a.pp > 1 && a.num_microbatches) m *= std::min(1.0, *a.num_microbatches / a.pp);
  if (a.pp == 1) m += sbh * 4 * (1 + a.vocab / a.hidden);
  return m / a.tp;
}

// compute_activation_memory_without_sp (what the script reports otherwise).
double megatron_activation_without_sp(const MegatronArgs& a) {
  const double sbh = a.seq * a.micro_batch * a.hidden;
  double m = sbh * (10 + 24 / a.tp) * a.layers;
  m += 8 * a.seq * a.micro_batch * a.pp;
  m += sbh * a.pp;
  if (a.pp > 1 && a.num_microbatches) m *= std::min(1.0, *a.num_microbatches / a.pp);
  if (a.pp == 1) m += (a.seq * a.micro_batch * a.vocab / a.tp + sbh) * 2;
  return m * 1.05;
}


}  // namespace pipetwin::testing
