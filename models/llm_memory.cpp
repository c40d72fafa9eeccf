// Memory per GPU of a decoder-only LLM in closed form (see llm_memory.hpp for
// the activations per layer).
//
// Pipeline (Korthikanti et al. 2022, Section 4.2.3): with 1F1B, rank r holds
// the stashes of min(M, K − r) micro-batches of its L/K layers, so the first
// rank holds L layers' worth whatever K is. With the interleaved schedule
// (V chunks of L/(KV) layers per rank) Megatron's rank r runs
// 2(K − r − 1) + (V − 1)·K warm-up forwards and one more before its first
// backward: rank 0 holds L·(1 + (K − 1)/(K·V)) layers' worth, the paper's
// factor on top of the L of 1F1B.
//
// First and last stage (Section 4.3): rank 0 also keeps the embedding's
// dropout mask, sbh bytes per micro-batch in flight (sbh/T with sequence
// parallelism; none without dropout); the last rank keeps, for its one
// micro-batch in flight, the final norm's input 2sbh, the head's input 2sbh
// and the cross-entropy's 32-bit logits 4sbV: 4sbh/T·(1 + V/h) with sequence
// parallelism (the paper's term), 4sbh + 4sbV/T without. With K = 1 both
// fall on the one rank, as in the paper.
//
// Weights, gradients and optimizer state (Megatron mixed precision, Adam):
// 2 bytes of 16-bit weight, 4 of fp32 gradient and 12 of optimizer state
// (fp32 master weight, two moments) per parameter: 18 bytes; the distributed
// optimizer (ZeRO-1) splits the 12 over D: 6 + 12/D. Parameters per GPU:
// the rank's L/K blocks, the matrices (and their biases) split over T, the
// norms and the biases after row-parallel matrices (output projection,
// second MLP matrix) whole; rank 0 also the token embedding V·h/T (and a
// learned position table, whole), the last rank the final norm and the
// output matrix V·h/T, which Megatron holds there even when tied (a copy of
// the embedding, its gradient all-reduced with rank 0's) unless K = 1.
//
// Where Megatron's theoretical_memory_usage.py differs, this follows the paper:
//   - it divides every parameter by T (norms and row-parallel biases too),
//     counts the final norm among the blocks (on every rank, /K), and leaves
//     out the learned position table and the tied copy on the last rank;
//   - its activations (compute_activation_memory, used with sequence
//     parallelism and selective recompute) add the token ids, 8sb bytes per
//     micro-batch in flight, and take sbh(18 + 4f/h) per layer (the paper's
//     34 for f = 4h, without the GQA and SwiGLU terms);
//   - without sequence parallelism (compute_activation_memory_without_sp) it
//     counts the head's input and its logits in 16-bit, (sbh + sbV/T)·2, and
//     adds 5% for temporaries;
//   - it has no form for full recompute.
#include "models/llm_memory.hpp"

#include <algorithm>
#include <string>

#include "schedule/error.hpp"

namespace pipetwin::models {

LlmLayerStash llm_layer_stash(const LlmSpec& spec) {
  const double h = static_cast<double>(spec.hidden), f = static_cast<double>(spec.ffn_hidden),
               kv = static_cast<double>(spec.kv()), a = static_cast<double>(spec.heads);
  LlmLayerStash t;
  t.whole_elems = 4 * h;                       // both norms' inputs and outputs
  t.mask_bytes = spec.dropout ? 2 * h : 0;     // after attention, after the MLP
  t.split_elems = h + 2 * kv + h + (spec.mlp == LlmSpec::Mlp::Gelu ? 2 * f : 3 * f);  // Q, K, V, attention output, MLP
  t.core_bytes_per_s = a * (spec.dropout ? 5 : 2);  // softmax output (+ its dropout mask and output)
  return t;
}

double llm_layer_activation_bytes(const LlmSpec& spec, const LlmParallel& par) {
  const double s = static_cast<double>(spec.seq_len), tokens = s * static_cast<double>(par.micro_batch),
               h = static_cast<double>(spec.hidden), T = par.tensor;
  const double sp = par.sequence_parallel ? T : 1;
  if (par.recompute == LlmRecompute::Full) return 2 * tokens * h / sp;  // the layer input
  const LlmLayerStash t = llm_layer_stash(spec);
  const bool core_kept = !par.flash_attention && par.recompute == LlmRecompute::None;
  const double core = core_kept ? t.core_bytes_per_s * s * tokens / T : 0;
  return tokens * ((2 * t.whole_elems + t.mask_bytes) / sp + 2 * t.split_elems / T) + core;
}

namespace {

void check_layout(const LlmSpec& spec, const LlmParallel& par) {
  const auto fail = [](const std::string& what) { throw Error("llm memory: " + what); };
  if (par.tensor < 1 || par.pipeline < 1 || par.data < 1 || par.virtual_stages < 1 || par.micro_batch < 1 ||
      par.microbatches < 0) {
    fail("T, K, D, V and the micro-batch must be positive");
  }
  const std::int64_t kv_heads = spec.kv_heads > 0 ? spec.kv_heads : spec.heads;
  if (spec.heads % par.tensor != 0 || kv_heads % par.tensor != 0) {
    fail("T = " + std::to_string(par.tensor) + " must divide the heads (" + std::to_string(spec.heads) +
         ") and the kv_heads (" + std::to_string(kv_heads) + ")");
  }
  const std::int64_t chunks = static_cast<std::int64_t>(par.pipeline) * par.virtual_stages;
  if (spec.layers % chunks != 0) {
    fail("K·V = " + std::to_string(chunks) + " must divide the layers (" + std::to_string(spec.layers) + ")");
  }
}

// Parameters of one block on one GPU: whole norms and row-parallel biases,
// the rest over T.
double block_params_per_gpu(const LlmSpec& spec, int T) {
  const std::int64_t h = spec.hidden, norm = spec.norm == LlmSpec::Norm::LayerNorm ? 2 * h : h;
  const std::int64_t whole = 2 * norm + (spec.bias || spec.attention_bias ? h : 0) + (spec.bias ? h : 0);
  return static_cast<double>(llm_block_params(spec) - whole) / T + static_cast<double>(whole);
}

}  // namespace

LlmRankMemory llm_rank_memory(const LlmSpec& spec, const LlmParallel& par, int rank) {
  check_layout(spec, par);
  const int K = par.pipeline, V = par.virtual_stages;
  if (rank < 0 || rank >= K) throw Error("llm memory: rank " + std::to_string(rank) + " outside 0.." + std::to_string(K - 1));
  const double T = par.tensor, L = static_cast<double>(spec.layers), h = static_cast<double>(spec.hidden),
               vocab = static_cast<double>(spec.vocab), tokens = static_cast<double>(spec.seq_len * par.micro_batch);
  const bool first = rank == 0, last = rank == K - 1;

  LlmRankMemory m;
  m.params = L / K * block_params_per_gpu(spec, par.tensor);
  if (first) {
    m.params += vocab * h / T;
    if (spec.positions == LlmSpec::Positions::Learned) m.params += static_cast<double>(spec.positions_table()) * h;
  }
  if (last) {
    m.params += static_cast<double>(spec.norm == LlmSpec::Norm::LayerNorm ? 2 * spec.hidden : spec.hidden);
    if (!spec.tied_embeddings || K > 1) m.params += vocab * h / T;
  }
  const double bytes_per_param = par.distributed_optimizer ? 6 + 12.0 / par.data : 18;
  m.weight_and_optimizer_bytes = m.params * bytes_per_param;

  m.layer_activation_bytes = llm_layer_activation_bytes(spec, par);
  const double M = static_cast<double>(par.microbatches);
  double microbatches_in_flight = 0;  // per chunk, on average
  if (V == 1) {
    microbatches_in_flight = K - rank;
    if (M > 0) microbatches_in_flight = std::min(microbatches_in_flight, M);
    m.layers_in_flight = microbatches_in_flight * L / K;
  } else {
    double chunks = 2.0 * (K - rank - 1) + (V - 1.0) * K + 1;
    if (M > 0) chunks = std::min(chunks, M * V);
    m.layers_in_flight = chunks * L / (static_cast<double>(K) * V);
    microbatches_in_flight = chunks / V;
  }
  const double sp = par.sequence_parallel ? T : 1;
  if (first && spec.dropout) m.embedding_activation_bytes = microbatches_in_flight * tokens * h / sp;
  if (last) m.output_activation_bytes = 4 * tokens * h / sp + 4 * tokens * vocab / T;
  m.activation_bytes = m.layers_in_flight * m.layer_activation_bytes + m.embedding_activation_bytes + m.output_activation_bytes;
  return m;
}

LlmRankMemory llm_memory(const LlmSpec& spec, const LlmParallel& par) {
  LlmRankMemory most = llm_rank_memory(spec, par, 0);
  for (int r = 1; r < par.pipeline; ++r) {
    LlmRankMemory m = llm_rank_memory(spec, par, r);
    if (m.total_bytes() > most.total_bytes()) most = m;
  }
  return most;
}

}  // namespace pipetwin::models
