// Devices: peak FLOP/s, the efficiency curves (the device's, and per layer
// kind and pass once calibrated), memory, and the fixed costs of an operation,
// a transfer and a stage's action. Units: seconds, bytes, FLOP/s, bytes/s.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/model.hpp"

namespace pipetwin::models {

// Achieved share of peak as a function of the work of one operation:
// eff(w) = max * w / (w + half_flops); half_flops = 0 means always max.
// Calibrated curves may list points (work, efficiency) instead, measured at
// those works (a kind's layer at the micro-batch sizes it ran with): the time
// w / (peak eff) is then linear in w between two points and along the first
// and last segments beyond them, so that an efficiency that rises, peaks and
// falls with the work (caches) is followed.
struct Efficiency {
  double max = 1.0;
  double half_flops = 0;
  std::vector<std::pair<double, double>> points;  // (work, efficiency), increasing work; when given, the curve
  double at(double flops) const;
  friend bool operator==(const Efficiency&, const Efficiency&) = default;
};

// The passes of a layer that time differently. A checkpointed micro-batch's
// forward runs without autograd (ForwardNoGrad); its recompute runs the
// forward again with autograd (Recompute); Backward is the layer's whole
// backward (input and weight gradients: B = I + W).
enum class Pass { Forward, Backward, ForwardNoGrad, Recompute };
std::string_view pass_name(Pass pass);  // forward, backward, forward_nograd, recompute
inline constexpr Pass kPasses[] = {Pass::Forward, Pass::Backward, Pass::ForwardNoGrad, Pass::Recompute};

// Per layer kind (calibrated): the efficiency of each pass, overriding the
// device's `efficiency`. forward_nograd and recompute default to forward.
// Under kDefaultKind, the curves a calibration fitted on all the kinds it saw
// at once, for a layer whose kind it did not see (another model's).
inline constexpr std::string_view kDefaultKind = "default";
struct KindEfficiency {
  Efficiency forward, backward;
  std::optional<Efficiency> forward_nograd, recompute;
  // The curves' fixed cost (half_flops) is per operator of the layer
  // (models::operators), not per layer: a calibration's pooled curve, fitted
  // on kinds of many operators a layer (a Transformer block's 14) and applied
  // to kinds of few (a linear layer's 2). A curve of points ignores it.
  bool per_operator = false;
  // The weight gradient's share (W) of the backward's time, as measured
  // where a zero-bubble schedule ran I and W apart; unset: their FLOPs' share.
  std::optional<double> weight_grad_share;
  const Efficiency& of(Pass pass) const;
  friend bool operator==(const KindEfficiency&, const KindEfficiency&) = default;
};

// Fixed time per compute action of a stage, whatever its layers: the
// framework's cost of entering a stage's forward or backward (not per layer,
// unlike op_overhead). forward_nograd and recompute default to forward.
struct ActionOverheads {
  double forward_s = 0, backward_s = 0;
  std::optional<double> forward_nograd_s, recompute_s;
  double of(Pass pass) const;
  friend bool operator==(const ActionOverheads&, const ActionOverheads&) = default;
};

// A fused attention kernel's (FlashAttention's) achieved FLOP/s by sequence
// length, as its authors measure it: the forward of a head of width d over s
// tokens counts 4·s²·d FLOPs, half of them under a causal mask, and the
// backward 2.5 times the forward's (it re-runs QKᵀ). Between two listed
// lengths the rate is linear in log2(s); beyond the first and last it stays.
// backward_causal, when not given, is backward's at each length times the
// forward's causal-to-full ratio there. Empty: no such kernel measured, and
// the attention core is timed with the layer's matrix products.
struct AttentionRates {
  using Curve = std::vector<std::pair<double, double>>;  // (sequence length, FLOP/s), increasing lengths
  Curve forward, forward_causal, backward, backward_causal;
  bool empty() const { return forward.empty(); }
  // Seconds of the core of `flops` forward FLOPs (the full square, 4·s²·d per
  // head and sample) over sequences of `seq` tokens, in each direction.
  double forward_seconds(double flops, double seq, bool causal) const;
  double backward_seconds(double flops, double seq, bool causal) const;
  friend bool operator==(const AttentionRates&, const AttentionRates&) = default;
};

struct Device {
  std::string name;
  double peak_flops_fp32 = 0;
  double peak_flops_half = 0;  // bf16 / fp16 (tensor cores, MXU)
  // Dense FP8 matrix products (H100 and later); 0: none, and a model in
  // precision fp8 is refused on the device.
  double peak_flops_fp8 = 0;
  Efficiency efficiency;
  double memory_bytes = 0;
  // What the model's tensors cannot use of memory_bytes: a fixed part (the
  // CUDA context, NCCL's buffers, the library workspaces) and a share of
  // what the tensors take (the caching allocator's fragmentation). Hardware
  // YAML memory_reserve_gb and memory_reserve_fraction; 0: none.
  double memory_reserve_bytes = 0;
  double memory_reserve_fraction = 0;
  double reserve_bytes(double used) const { return memory_reserve_bytes + memory_reserve_fraction * used; }
  double memory_bandwidth = 0;   // bytes/s
  // The share of memory_bandwidth a layer's elementwise kernels achieve
  // (LayerCost::forward_traffic): in (0, 1].
  double memory_efficiency = 1.0;
  double op_overhead_s = 0;      // per compute operation (kernel launch)
  double transfer_overhead_s = 0;  // per transfer, on top of the link
  double send_bandwidth = 0;       // bytes/s the sender itself writes (the sender's cost per byte); 0: none
  // The runtime waits for each send to arrive before its next action
  // (StageCosts::blocking_sends); false: sends are posted and left to fly.
  bool blocking_sends = false;
  // The share of the shorter action of an OVERLAP_F_B (a forward and a
  // backward of two micro-batches issued together) hidden under the longer
  // (StageCosts::overlap_factor): 0, the sum, runs them one after the other
  // (PyTorch's runtime by default, the executor); calibrate fits it from the
  // traces' OVERLAP_F_B where they hold some. In [0, 1].
  double overlap_factor = 0;
  // The fused attention kernel's rates (16-bit models whose attention is
  // fused, LayerCost::attention_seq), on the presets that cite them.
  AttentionRates attention;
  // Calibrated refinements (absent from the presets):
  std::map<std::string, KindEfficiency> kinds;  // by kind_name(), or kDefaultKind: per-kind curves
  ActionOverheads action_overhead;              // per compute action of a stage
  // Per pass, seconds per byte of a layer's weights on top of its curve, for
  // the layers of calibrated kinds (an embedding's table excepted): a
  // layer whose weights do not stay in the caches streams them from memory
  // in each pass, and with few samples a micro-batch that time is not hidden
  // behind its FLOPs. Fitted where the traces' partitions put layers of one
  // kind with different weights on different stages; 0: none.
  ActionOverheads weight_stream;
  double weight_stream_seconds(Pass pass, double bytes) const { return weight_stream.of(pass) * bytes; }
  std::optional<double> step_overhead_s;        // optimizer step's fixed cost; default op_overhead_s
  // Receiver's cost of taking a message out of the transport once it is there
  // (a copy), on top of the link: recv_overhead + bytes / recv_bandwidth.
  double recv_overhead_s = 0;
  double recv_bandwidth = 0;  // bytes/s; 0: no cost per byte
  // The first forward of each stage in a step reads the stage's weights at
  // this rate (the optimizer step left other data in the caches): weight
  // bytes / this on top of that action. bytes/s; 0: no such cost.
  double cold_weights_bandwidth = 0;
  double recv_seconds(double bytes) const {
    return recv_overhead_s + (recv_bandwidth > 0 ? bytes / recv_bandwidth : 0);
  }
  // FP8's peak is BF16's: its products' FP8 rate is fp8_flops_equivalent's.
  double peak_flops(Precision p) const;
  // The FLOPs at peak_flops_half that take as long as `flops` of which
  // `fp8` run at peak_flops_fp8.
  double fp8_flops_equivalent(double flops, double fp8) const {
    return peak_flops_fp8 > 0 ? flops - fp8 * (1 - peak_flops_half / peak_flops_fp8) : flops;
  }
  // Time of one operation of `flops` work at this device's efficiency.
  double compute_seconds(double flops, Precision p) const;
  // Time of one layer's pass of `flops` work: the kind's curve when `kinds`
  // has one, else compute_seconds(). 0 for no work.
  // `operators`: the layer's (models::operators), for a per_operator curve.
  double layer_seconds(std::string_view kind, Pass pass, double flops, Precision p, int operators = 1) const;
  // Time of a layer's memory-bound traffic (bytes read and written by its
  // elementwise kernels) at memory_bandwidth × memory_efficiency; 0 where a
  // calibrated curve covers the kind (the measured times include it) or the
  // device gives no bandwidth.
  double traffic_seconds(std::string_view kind, double bytes) const;
  // The least time a pass can take on its weights: `bytes` of them read (a
  // forward's or an input gradient's matrix products read every weight) or
  // read and written (a weight gradient accumulates into every one), at
  // memory_bandwidth × memory_efficiency (traffic_seconds' rate). A micro-batch of a few samples
  // reuses each weight too little to hide that behind its FLOPs (a roofline's
  // memory side); 0 when the device gives no bandwidth. Applied to every kind,
  // calibrated or not: a curve fitted on larger micro-batches does not know it.
  double weight_seconds(double bytes) const;
  // The kind's curves; else the calibrated `default` (every kind a calibration
  // saw, pooled: for the kinds it did not see); else none (the device's curve).
  const KindEfficiency* kind_curves(std::string_view kind) const;
  bool has_kind(std::string_view kind) const { return kind_curves(kind) != nullptr; }
  double step_overhead() const { return step_overhead_s.value_or(op_overhead_s); }
  friend bool operator==(const Device&, const Device&) = default;
};

}  // namespace pipetwin::models
