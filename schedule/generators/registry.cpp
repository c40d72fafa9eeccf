// Looks generators up by name and checks the shape they are asked for.
#include <algorithm>
#include <cstdint>
#include <string>

#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/passes.hpp"

namespace pipetwin::schedule {

const std::vector<GeneratorInfo>& generators() {
  static const std::vector<GeneratorInfo> kGenerators{
      {"gpipe", "GPipe fill-drain: all forwards, then all backwards", false, generate_gpipe, "any K, M; V = 1",
       "(K-1)/(M+K-1) of the step", "stage s stashes M micro-batches"},
      {"1f1b", "PipeDream-Flush: warm-up, one forward one backward, cool-down", false, generate_1f1b,
       "any K, M; V = 1", "(K-1)/(M+K-1) of the step", "stage s stashes min(K-s, M) micro-batches"},
      {"interleaved-1f1b", "Megatron's interleaved 1F1B over V chunks per rank, in PyTorch's flexible form", true,
       generate_interleaved_1f1b, "V >= 2; M a multiple of its rounds max(1, M/K) (any M <= K, any multiple of K)",
       "(K-1)/(V*M+K-1) of the step where M is a multiple of K", "none given here (see the dry run's peaks)"},
      {"interleaved-zb", "PyTorch's interleaved zero bubble: interleaved 1F1B with I and W split, W deferred", true,
       generate_interleaved_zb, "V >= 2; M a multiple of its rounds max(1, M/K)", "none given here (see the dry run)",
       "none given here (see the dry run's peaks)"},
      {"looped-bfs", "breadth-first: every micro-batch through a chunk before the next chunk (PyTorch's looped BFS)",
       true, generate_looped_bfs, "V >= 2; any M", "none given here (see the dry run)",
       "chunk c of a rank stashes M micro-batches"},
      {"zb-h1", "zero bubble H1: backward split into I and W, W deferred to fill bubbles", false, generate_zb_h1,
       "any K, M; V = 1", "(K-1)/(3M+K-1) of the step with F = I = W",
       "every stage stashes min(K, M) micro-batches (its deferred W keeps them)"},
      {"zb-h2", "zero bubble H2 (Qi et al., Figure 3 bottom): ZB-H1 with 2(K-r)-1 warm-up forwards on rank r and W "
       "deferred 2r micro-batches, a parallelogram",
       false, generate_zb_h2, "any K, M; V = 1 (the closed forms below for M >= 2K-1)",
       "(K-1)/(3M+K-1) of one step with F = I = W, as zb-h1 (3M+K-1 units: rank r idles r before it and K-1-r after "
       "it); in general the step takes M(F+I+W) + (K-1)max(F, I-F, F+I-2W). Inside each rank's span, which is what "
       "back-to-back steps without an optimizer synchronisation leave: (K-1)max(0, I-F, F+I-2W), the paper's "
       "(K-1)(F+I-2W) where W <= F, none with F = I = W",
       "every stage stashes min(2K-1, M) micro-batches (on rank r, 2r of them past I: the paper's (2K-2r-1)M_B + "
       "2r M_W, (2K-1)M_B on stage 0)"},
      {"zb-v", "zero bubble V (PyTorch's ScheduleZBVZeroBubble): 2 stages per rank placed V-shaped, I and W split",
       false, generate_zb_v,
       "any K, M (PyTorch pads M to 2K-1, then drops the padded micro-batches); V = 2, implied (--virtual left out "
       "or 2)",
       "(K-1)/(6M+K-1) of the step with F = I = W once 2M >= 3K-1 (the dry run's count, not derived: "
       "max(6M+K-1, 4M+4K-2) unit steps)",
       "stage s stashes min(2K-s, M) micro-batches (a stage is half a rank's layers)", 2},
      {"dualpipe-v", "DualPipeV (PyTorch's ScheduleDualPipeV): 2 stages per rank placed V-shaped, a forward overlapped "
       "with a full backward in the steady state (an OVERLAP_F_B: the executor runs its halves one after the other, "
       "as PyTorch's runtime does; the simulators take off the hardware's overlap_factor), I and W split "
       "in the cool-down",
       false, generate_dualpipe_v, "M >= 2K; V = 2, implied (--virtual left out or 2)",
       "4M+3K-2 unit steps with F = B = I = W = 1, an OVERLAP_F_B its two halves in turn and its sends after both, "
       "as PyTorch lowers one (the dry run's count, not derived); with a stage's F = I, the last rank idles "
       "(K-1)(F&B+B-3W), DeepSeek-V3's DualPipe bubble, F&B = F+B-overlap_factor*min(F,B)",
       "stage s stashes 2K-s micro-batches", 2},
      {"v-half", "V-Half (Qi et al. 2024, controllable memory): 2 stages per rank placed V-shaped, I and W split, "
       "a building block of half 1F1B's activation memory repeated and squeezed (the authors' greedy)",
       false, generate_v_half, "any K, M; V = 2, implied (--virtual left out or 2)",
       "6M+3K-4 unit steps with F = I = W = 1 per stage for odd K >= 3, 6M+3K-7 for even K >= 4, 6M+1 for K = 2, "
       "once M >= K+2 (the dry run's count over K <= 16, not derived); about K/(2M) of the step, as the paper gives it",
       "a rank's two stages stash at most 2 min(M, floor((K+2)/2)) stage micro-batches at once, as many on its busiest "
       "rank: the paper's (K+2)/2 of 1F1B's K whole micro-batches (per stage: the dry run's peaks)", 2},
      {"v-min", "V-Min (Qi et al. 2024, controllable memory): 2 stages per rank placed V-shaped, I and W split, "
       "a building block of a third of 1F1B's activation memory repeated and squeezed (the authors' greedy)",
       false, generate_v_min, "any K, M; V = 2, implied (--virtual left out or 2)",
       "6M+4K-5 unit steps with F = I = W = 1 per stage for K >= 2 (6M+4K-7 where 3 divides K), once M >= K+2 "
       "(the dry run's count over K <= 16, not derived); about 2K/(3M) of the step, as the paper gives it",
       "a rank's two stages stash at most 2 min(M, floor((K+4)/3)) stage micro-batches at once, as many on its busiest "
       "rank: the paper's (K+4)/3 of 1F1B's K whole micro-batches (per stage: the dry run's peaks)", 2},
      {"pipedream", "PipeDream asynchronous 1F1B with weight stashing, no flush", false, generate_pipedream,
       "any K, M (M: mini-batches in the window); V = 1", "none in the steady state (no flush)",
       "stage s stashes min(K-s, M) micro-batches and up to K-s weight versions (K-s once M >= 2K-2)"},
      {"combined-1f1b", "Megatron-LM's combined 1F1B (--overlap-moe-expert-parallel-comm): interleaved 1F1B with one "
       "more warm-up forward, each steady-state forward and the backward after it one OVERLAP_F_B, so that one "
       "micro-batch's all-to-alls run under the other's compute", true, generate_combined_1f1b,
       "V >= 2, or V = 1 at K = 1 (Megatron-LM's form without pipelining); M a multiple of its rounds max(1, M/K)",
       "with F = B = 1 and nothing hidden (overlap_factor 0, no all-to-alls), interleaved-1f1b's steps (the dry run's "
       "count, not derived); an OVERLAP_F_B hides what the device's overlap_factor and the all-to-alls let it",
       "each stage stashes interleaved-1f1b's peak or one micro-batch more (the extra warm-up forward)"},
  };
  return kGenerators;
}

namespace {

std::string valid_names() {
  std::string names;
  for (const auto& g : generators()) names += (names.empty() ? "" : ", ") + std::string(g.name);
  return names;
}

void check_shape(const GeneratorInfo& g, const GeneratorOptions& o) {
  const std::string who = "schedule " + std::string(g.name) + ": ";
  if (o.ranks < 1) throw Error(who + "--ranks must be at least 1, got " + std::to_string(o.ranks));
  if (o.microbatches < 1) {
    throw Error(who + "--microbatches must be at least 1, got " + std::to_string(o.microbatches));
  }
  if (o.stages_per_rank < 1) {
    throw Error(who + "--virtual must be at least 1, got " + std::to_string(o.stages_per_rank));
  }
  // A fixed-V generator (zb-v) takes V = 1 as "not given" and makes its own V.
  const int fixed = g.fixed_stages_per_rank;
  if (fixed > 0 && o.stages_per_rank != 1 && o.stages_per_rank != fixed) {
    throw Error(who + "places exactly " + std::to_string(fixed) + " stages per rank; --virtual " +
                std::to_string(o.stages_per_rank) + " is not possible (leave --virtual out, or give " +
                std::to_string(fixed) + ")");
  }
  const int V = fixed > 0 ? fixed : o.stages_per_rank;
  // Sized by K x V x M before anything else: a mistyped M of 10^9 is an
  // error, not minutes of building and gigabytes of actions.
  const std::int64_t stages = static_cast<std::int64_t>(o.ranks) * V;
  if (stages > kMaxStages) {
    throw Error(who + std::to_string(o.ranks) + " ranks x " + std::to_string(V) + " stages per rank is more than " +
                std::to_string(kMaxStages) + " stages");
  }
  if (stages * o.microbatches > kMaxStageMicrobatches) {
    throw Error(who + std::to_string(stages) + " stages x " + std::to_string(o.microbatches) +
                " micro-batches is more than the " + std::to_string(kMaxStageMicrobatches) +
                " (stage, micro-batch) pairs a schedule may hold");
  }
  if (fixed == 0 && !g.virtual_stages && o.stages_per_rank != 1) {
    throw Error(who + "has one stage per rank; --virtual " + std::to_string(o.stages_per_rank) +
                " needs interleaved-1f1b, interleaved-zb or looped-bfs (or zb-v, dualpipe-v, v-half or v-min, whose V is 2)");
  }
  if (g.name == "combined-1f1b" && o.stages_per_rank < 2 && o.ranks > 1) {
    throw Error(who + "needs --virtual V >= 2 (stages per rank) with more than one rank, as Megatron-LM needs a virtual "
                "pipeline for its EP overlap; V = 1 only at K = 1, got K=" + std::to_string(o.ranks));
  }
  if (g.virtual_stages && o.stages_per_rank < 2 && g.name != "combined-1f1b") {
    throw Error(who + "needs --virtual V >= 2 (stages per rank), got " +
                std::to_string(o.stages_per_rank));
  }
  // PyTorch's flexible interleaving: M in rounds of M / max(1, M / K) micro-batches.
  const int rounds = std::max(1, o.microbatches / o.ranks);
  if (g.virtual_stages && g.name != "looped-bfs" && o.microbatches % rounds != 0) {
    throw Error(who + "needs M to be a multiple of its rounds max(1, M / K) = " + std::to_string(rounds) + "; got K=" +
                std::to_string(o.ranks) + ", M=" + std::to_string(o.microbatches) + " (any M <= K, or a multiple of K)");
  }
}

}  // namespace

Program generate(std::string_view name, const GeneratorOptions& options) {
  const auto& all = generators();
  const auto it = std::find_if(all.begin(), all.end(), [&](const auto& g) { return g.name == name; });
  if (it == all.end()) {
    throw Error("unknown schedule '" + std::string(name) + "' (valid: " + valid_names() + ")");
  }
  check_shape(*it, options);
  return it->fn(options);
}

Program build_schedule(std::string_view name, const GeneratorOptions& options) {
  return lower(generate(name, options));
}

}  // namespace pipetwin::schedule
