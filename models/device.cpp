// Device arithmetic: efficiency curves, and the time of an operation, a
// layer's pass, its memory traffic and its weights' reads.
#include <cmath>

#include "models/device.hpp"

namespace pipetwin::models {

double Efficiency::at(double flops) const {
  if (points.empty()) return half_flops <= 0 ? max : max * flops / (flops + half_flops);
  if (points.size() == 1) return points.front().second;
  // u = w / eff is linear in w on each segment (the time, in units of the peak).
  std::size_t i = 1;
  while (i + 1 < points.size() && flops > points[i].first) ++i;
  const auto [w0, e0] = points[i - 1];
  const auto [w1, e1] = points[i];
  const double u0 = w0 / e0, u1 = w1 / e1;
  const double u = u0 + (u1 - u0) * (flops - w0) / (w1 - w0);
  // Far below the first point a falling segment could reach 0: keep its efficiency.
  return u > 0 ? flops / u : points.front().second;
}

std::string_view pass_name(Pass pass) {
  switch (pass) {
    case Pass::Forward: return "forward";
    case Pass::Backward: return "backward";
    case Pass::ForwardNoGrad: return "forward_nograd";
    case Pass::Recompute: return "recompute";
  }
  return "?";
}

const Efficiency& KindEfficiency::of(Pass pass) const {
  switch (pass) {
    case Pass::Backward: return backward;
    case Pass::ForwardNoGrad: return forward_nograd ? *forward_nograd : forward;
    case Pass::Recompute: return recompute ? *recompute : forward;
    case Pass::Forward: break;
  }
  return forward;
}

double ActionOverheads::of(Pass pass) const {
  switch (pass) {
    case Pass::Backward: return backward_s;
    case Pass::ForwardNoGrad: return forward_nograd_s.value_or(forward_s);
    case Pass::Recompute: return recompute_s.value_or(forward_s);
    case Pass::Forward: break;
  }
  return forward_s;
}

const KindEfficiency* Device::kind_curves(std::string_view kind) const {
  auto it = kinds.find(std::string(kind));
  if (it == kinds.end()) it = kinds.find(std::string(kDefaultKind));
  return it == kinds.end() ? nullptr : &it->second;
}

double Device::layer_seconds(std::string_view kind, Pass pass, double flops, Precision p, int operators) const {
  if (flops <= 0) return 0;
  const KindEfficiency* curves = kind_curves(kind);
  if (curves == nullptr) return compute_seconds(flops, p);
  if (!curves->per_operator) return op_overhead_s + flops / (peak_flops(p) * curves->of(pass).at(flops));
  Efficiency e = curves->of(pass);  // its fixed cost, per operator
  e.half_flops *= operators;
  return op_overhead_s + flops / (peak_flops(p) * e.at(flops));
}

namespace {
double rate_at(const AttentionRates::Curve& curve, double seq) {
  if (seq <= curve.front().first) return curve.front().second;
  if (seq >= curve.back().first) return curve.back().second;
  std::size_t i = 1;
  while (curve[i].first < seq) ++i;
  const auto& [s0, r0] = curve[i - 1];
  const auto& [s1, r1] = curve[i];
  const double x = (std::log2(seq) - std::log2(s0)) / (std::log2(s1) - std::log2(s0));
  return r0 + x * (r1 - r0);
}
}  // namespace

double AttentionRates::forward_seconds(double flops, double seq, bool causal) const {
  if (flops <= 0) return 0;
  return causal ? flops / 2 / rate_at(forward_causal, seq) : flops / rate_at(forward, seq);
}

double AttentionRates::backward_seconds(double flops, double seq, bool causal) const {
  if (flops <= 0) return 0;
  if (!causal) return 2.5 * flops / rate_at(backward, seq);
  const double rate = !backward_causal.empty() ? rate_at(backward_causal, seq)
                                               : rate_at(backward, seq) * rate_at(forward_causal, seq) / rate_at(forward, seq);
  return 2.5 * flops / 2 / rate;
}

double Device::traffic_seconds(std::string_view kind, double bytes) const {
  return kind_curves(kind) != nullptr ? 0 : weight_seconds(bytes);
}

double Device::weight_seconds(double bytes) const {
  if (bytes <= 0 || memory_bandwidth <= 0) return 0;
  return bytes / (memory_bandwidth * memory_efficiency);
}

double Device::peak_flops(Precision p) const { return p == Precision::FP32 ? peak_flops_fp32 : peak_flops_half; }  // FP8: BF16's

double Device::compute_seconds(double flops, Precision p) const {
  if (flops <= 0) return 0;
  return op_overhead_s + flops / (peak_flops(p) * efficiency.at(flops));
}

}  // namespace pipetwin::models
