// Mixture of experts for the executor (internal to exec/: includes
// LibTorch): family moe's routed block (moe_block), with its routed experts
// split over an expert-parallel group of E members, as Megatron-LM's expert
// parallelism runs them inside the data-parallel group.
//
//   x1 = x + attention(norm1(x))                         (exec/torch_llm_layers.hpp)
//   t  = norm2(x1), N tokens; router: softmax over the X experts in fp32,
//        the top k, their gates renormalized to sum to 1 (Mixtral's, and
//        Qwen3's norm_topk_prob)
//   dispatch: the N·k copies sorted by expert, each sent to the member that
//        holds its expert (member j: experts [j·X/E, (j+1)·X/E)) by an
//        all-to-all, their counts by one before it
//   every local expert's SwiGLU on the tokens it received
//   combine: the reverse all-to-all; y = x1 + Σ gate · expert(t) + shared(t)
//
// The all-to-all is an autograd function: its backward sends the gradients
// back the way the tokens came, so the experts' gradients sum every member's
// tokens, and the members' backwards meet in the same order as their
// forwards (every replica runs the same action list).
//
// Parameters, in init order: norm1, the attention's, norm2, the router
// [X, h], per expert gate [fe, h], up [fe, h], down [h, fe], then the
// shared experts' gate, up and down (width fs = shared · fe) where there are
// any. A member holds only the experts it owns, the rest whole.
//
// Not built: an auxiliary load-balancing loss, a capacity that drops tokens,
// DeepSeek's routing bias and latent attention (refused by check_moe_run,
// exec/run.hpp).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "exec/run.hpp"
#include "models/model.hpp"

namespace pipetwin::exec {

// The expert-parallel group; a null pointer is a group of one (E = 1).
using ExpertGroup = c10::intrusive_ptr<c10d::Backend>;

// Appends a routed block's MLP parameters (router, experts, shared experts),
// drawn from `gen`, after its norm2.
void init_moe_mlp(const models::LayerShape& s, at::Generator& gen, std::vector<at::Tensor>& p);

// The routed block's forward on this member's parameters.
at::Tensor moe_block(const models::LayerShape& s, const at::Tensor& x, const std::vector<at::Tensor>& p,
                     const ExpertGroup& group);

// [begin, end) of the routed experts' parameters in a layer's full list
// (init_layer's); empty for any other kind.
std::pair<std::size_t, std::size_t> routed_expert_params(const models::Layer& layer);
// Member j of E's parameters of a layer from its full list: its experts only.
std::vector<at::Tensor> expert_shard(const models::Layer& layer, const std::vector<at::Tensor>& full, int E, int j);
// The full list again from every member's shard (an all-gather of the
// experts: a collective of the group).
std::vector<at::Tensor> gather_experts(const models::Layer& layer, const std::vector<at::Tensor>& shard,
                                       const ExpertGroup& group);

// This process's all-to-alls so far (dispatch and combine, forward and
// backward; the counts' exchanges not included): calls, seconds from each
// call to its wait's return, and the bytes each member sent.
struct ExchangeTotals {
  std::int64_t calls = 0;
  double seconds = 0;
  double bytes = 0;
};
ExchangeTotals expert_exchange_totals();

}  // namespace pipetwin::exec
