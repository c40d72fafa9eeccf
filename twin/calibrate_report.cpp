// What `pipetwin calibrate` reports of a calibration: the fitted curves,
// overheads, links and sharing, the residuals, each traced step against its
// replay, and the noise floor of those errors; as text or as JSON.
#include <cstdarg>
#include <cstdio>

#include "calibration/noise.hpp"
#include "models/hardware.hpp"
#include "schedule/trace_metadata.hpp"
#include "twin/calibrate.hpp"

namespace pipetwin::twin {
namespace {

// printf onto a string.
__attribute__((format(printf, 2, 3))) void appendf(std::string& out, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  if (n > 0) {
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<std::size_t>(n) + 1, format, again);
    out.resize(at + static_cast<std::size_t>(n));
  }
  va_end(again);
}

std::vector<std::string> engine_words(const Calibrated& c) {
  std::vector<std::string> engines;
  for (const auto e : c.engines) engines.emplace_back(engine_name(e));
  return engines;
}

// How ranks beyond the cores share them, as fitted.
std::string sharing_way(const models::Topology& t) {
  if (!t.run_to_completion) return "ranks share the cores evenly";
  std::string way = "a rank keeps a core until it receives a message";
  if (t.time_slice_s > 0) {
    way += " or its " + std::to_string(static_cast<int>(t.time_slice_s * 1e6)) + " us time slice ends while another waits";
  }
  if (t.wake_preempt_s > 0) {
    way += ", or, within " + std::to_string(static_cast<int>(t.wake_preempt_s * 1e6)) + " us, a rank woken by a message waits";
  }
  if (t.core_affinity) way += "; each core queues the ranks that last ran on it";
  return way;
}

calibration::NoiseFloor step_noise_floor(const std::vector<calibration::TraceRun>& runs, const std::vector<double>& predicted) {
  std::vector<std::string> names;
  std::vector<double> errors;
  for (std::size_t i = 0; i < runs.size() && i < predicted.size(); ++i) {
    // One configuration: the fields compare checks two traces share, and the threads.
    nlohmann::json key = nlohmann::json::object();
    for (const auto& field : schedule::configuration_fields()) {
      if (runs[i].trace.metadata.contains(field)) key[field] = runs[i].trace.metadata[field];
    }
    key["threads"] = runs[i].threads;
    names.push_back(key.dump());
    errors.push_back(predicted[i] / runs[i].step_time_s - 1);
  }
  return calibration::noise_floor(names, errors);
}

// Per layer kind and pass, the fitted efficiency: its points, or its curve.
std::string curves_text(const models::Device& d) {
  std::string text;
  for (const auto& [kind, c] : d.kinds) {
    for (const models::Pass pass : models::kPasses) {
      const auto& e = c.of(pass);
      std::string line;
      char item[64];
      for (const auto& [w, eff] : e.points) {
        std::snprintf(item, sizeof item, "%s%.3g: %.3f", line.empty() ? "" : ", ", w, eff);
        line += item;
      }
      if (e.points.empty()) {
        std::snprintf(item, sizeof item, "max %.3f, half %.3g%s", e.max, e.half_flops, c.per_operator ? " per operator" : "");
        line = item;
      }
      appendf(text, "  %-18s %-15s %s\n", kind.c_str(), std::string(models::pass_name(pass)).c_str(), line.c_str());
    }
  }
  return text;
}

}  // namespace

nlohmann::json calibration_json(const CalibrateRequest& o, const std::vector<calibration::TraceRun>& runs,
                                const Calibrated& c) {
  const auto engines = engine_words(c);
  const auto& result = c.fit;
  const auto& predicted = c.predicted_step_s;
  nlohmann::json j;
  j["out"] = o.out;
  j["traces"] = nlohmann::json::array();
  for (std::size_t i = 0; i < runs.size(); ++i) {
    j["traces"].push_back({{"file", runs[i].path}, {"config", runs[i].describe()}, {"measured_step_s", runs[i].step_time_s},
                           {"predicted_step_s", predicted[i]}, {"engine", engines[i]}});
  }
  for (const auto& [op, r] : result.residuals) {
    j["residuals"][op] = {{"count", r.count}, {"rms_s", r.rms_s}, {"max_s", r.max_s}, {"rms_rel", r.rms_rel}, {"max_rel", r.max_rel}};
  }
  j["residuals"]["overall"] = {{"count", result.overall.count}, {"rms_s", result.overall.rms_s}, {"max_s", result.overall.max_s},
                               {"rms_rel", result.overall.rms_rel}, {"max_rel", result.overall.max_rel}};
  const auto floor = step_noise_floor(runs, predicted);
  j["noise_floor"] = {{"configurations", floor.configurations}, {"runs", floor.runs},
                      {"run_sd_rel", floor.run_sd_rel}, {"all_configurations", floor.all_configurations},
                      {"mean_error_rms_rel", floor.mean_error_rms_rel},
                      {"mean_error_worst_rel", floor.mean_error_worst_rel}, {"typical_runs", floor.typical_runs}};
  j["notes"] = result.notes;
  return j;
}

std::string calibration_text(const CalibrateRequest& o, const std::vector<calibration::TraceRun>& runs,
                             const models::Hardware& base, const Calibrated& c) {
  const auto engines = engine_words(c);
  std::string text;
  const auto& result = c.fit;
  const auto& predicted = c.predicted_step_s;
  const auto& d = result.hardware.device;
  appendf(text, "calibrated   %s from %zu trace(s) of %s, starting from %s\n", o.out.c_str(), runs.size(),
              runs.front().model.name.c_str(), base.name.c_str());
  appendf(text, "kinds        efficiency (share of %.4g GFLOP/s) at each work the traces ran (FLOPs x micro-batch size):\n",
              d.peak_flops(runs.front().model.precision) / 1e9);
  text += curves_text(d);
  appendf(text, "overheads    per action: forward %.1f us, backward %.1f us; step %.1f us\n",
              d.action_overhead.forward_s * 1e6, d.action_overhead.backward_s * 1e6, d.step_overhead() * 1e6);
  appendf(text, "transfers    send %.1f us + %.3g GB/s; receive %.1f us + %.3g GB/s; link latency %.1f us, %.3g GB/s\n",
              d.transfer_overhead_s * 1e6, d.send_bandwidth / 1e9, d.recv_overhead_s * 1e6, d.recv_bandwidth / 1e9,
              result.hardware.topology.intra.latency_s * 1e6, result.hardware.topology.intra.bandwidth / 1e9);
  if (d.weight_stream != models::ActionOverheads{}) {
    const auto rate = [](double s_per_byte) { return s_per_byte > 0 ? 1 / s_per_byte / 1e9 : 0.0; };
    appendf(text, "weights      each pass of a layer streams its weights beyond its curve: forward at %.3g GB/s, "
                "backward at %.3g GB/s (0: none)\n",
                rate(d.weight_stream.forward_s), rate(d.weight_stream.backward_s));
  }
  appendf(text, "step         memory bandwidth %.3g GB/s (optimizer step)\n", d.memory_bandwidth / 1e9);
  if (d.cold_weights_bandwidth > 0) {
    appendf(text, "cold         each stage's first forward in a step reads its weights at %.3g GB/s\n",
                d.cold_weights_bandwidth / 1e9);
  }
  if (result.hardware.topology.kind == models::TopologyKind::SharedHost) {
    const auto& t = result.hardware.topology;
    appendf(text, "sharing      %d cores, %.3g effective; with more ranks than cores, %.3g effective, %s, each forward "
                "and backward takes %.1f%% longer, and each send waits %.1f us and each receive %.1f us more for a core\n",
                t.host_cores, t.compute_capacity(), t.compute_capacity(t.host_cores + 1), sharing_way(t).c_str(),
                100 * t.oversubscribed_compute,
                t.oversubscribed_send_s * 1e6, t.oversubscribed_recv_s * 1e6);
    if (t.full_host_send_s + t.full_host_recv_s > 0) {
      appendf(text, "full host    with as many ranks as cores, each send waits %.1f us and each receive %.1f us more for a "
                  "core, on average\n",
                  t.full_host_send_s * 1e6, t.full_host_recv_s * 1e6);
    }
  }
  if (const auto& t = result.hardware.topology; t.collective.bandwidth > 0) {
    appendf(text, "collectives  each ring round %.1f us + its bytes at %.3g GB/s of one core's work\n",
                t.collective.latency_s * 1e6, t.collective.bandwidth / 1e9);
  }
  if (const auto& t = result.hardware.topology; t.tensor_collective.bandwidth > 0) {
    appendf(text, "tensor       each ring round of a tensor group %.1f us + its bytes at %.3g GB/s (the members' waits "
                "included); a member computes %.1f%% longer than its 1/T of the work\n",
                t.tensor_collective.latency_s * 1e6, t.tensor_collective.bandwidth / 1e9, 100 * t.tensor_compute);
  }
  appendf(text, "residuals    per-stage medians, predicted - measured (rms / max):\n");
  for (const auto& [op, r] : result.residuals) {
    appendf(text, "  %-16s %3d groups  %8.1f / %8.1f us   %5.2f%% / %5.2f%%\n", op.c_str(), r.count, r.rms_s * 1e6,
                r.max_s * 1e6, 100 * r.rms_rel, 100 * r.max_rel);
  }
  appendf(text, "steps        measured -> calibrated simulation:\n");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    appendf(text, "  %-44s %9.4f s -> %9.4f s  %+6.2f%%  (%s)\n", runs[i].describe().c_str(), runs[i].step_time_s, predicted[i],
                100 * (predicted[i] / runs[i].step_time_s - 1), engines[i].c_str());
  }
  if (const auto floor = step_noise_floor(runs, predicted).describe(); !floor.empty()) {
    appendf(text, "noise floor  %s\n", floor.c_str());
  }
  for (const auto& n : result.notes) appendf(text, "note         %s\n", n.c_str());
  return text;
}

}  // namespace pipetwin::twin
