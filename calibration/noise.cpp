#include "calibration/noise.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pipetwin::calibration {

std::optional<Noise> Noise::of_trace(const nlohmann::json& meta) {
  if (!meta.is_object() || !meta.contains("measured") || !meta["measured"].is_object()) return std::nullopt;
  const auto& m = meta["measured"];
  if (!m.contains("noise") || !m["noise"].is_object()) return std::nullopt;
  return from_json(m["noise"]);
}

Noise Noise::from_json(const nlohmann::json& j) {
  const auto num = [&](const nlohmann::json& o, const char* key) {
    return o.contains(key) && o[key].is_number() ? o[key].get<double>() : 0.0;
  };
  Noise n;
  n.other_share = num(j, "other_share");
  n.steal_share = num(j, "steal_share");
  n.share_resolution = num(j, "share_resolution");
  n.median_uncertainty_rel = num(j, "median_uncertainty_rel");
  n.step_median_s = num(j, "step_median_s");
  n.step_mad_s = num(j, "step_mad_s");
  n.counted_steps = static_cast<int>(num(j, "counted_steps"));
  n.compute_cpu_s = num(j, "compute_cpu_median_s");
  n.host_known = j.contains("other_share") || j.contains("steal_share") || j.contains("hosts");
  if (n.compute_cpu_s > 0) n.compute_cpu_spread = num(j, "compute_cpu_mad_s") / n.compute_cpu_s;
  double worst = -1;
  for (const auto& h : j.value("hosts", nlohmann::json::array())) {
    n.faults_per_step = std::max(n.faults_per_step, num(h, "faults_per_step"));
    const double share = num(h, "other_share") + num(h, "steal_share");
    if (share <= worst) continue;
    worst = share;
    n.load1_start = num(h, "load1_start");
    n.load1_end = num(h, "load1_end");
    n.mhz_min = num(h, "mhz_min");
    n.mhz_max = num(h, "mhz_max");
  }
  return n;
}

std::string Noise::describe() const {
  char line[512];
  std::string known = median_uncertainty_rel > 0 ? "" : " (fewer than 3 steps: unknown)";
  if (median_uncertainty_rel > 0) {
    std::snprintf(line, sizeof line, ", the median known to +-%.1f%% (95%%)", 100 * median_uncertainty_rel);
    known = line;
  }
  if (!host_known) {
    std::snprintf(line, sizeof line, "%d steps counted, spread %.1f%% (median absolute deviation)%s; the host's load "
                  "was not recorded", counted_steps, 100 * spread(), known.c_str());
    return line;
  }
  std::snprintf(line, sizeof line,
                "%d steps counted, spread %.1f%% (median absolute deviation)%s; other processes took %.1f%% of the "
                "host's CPU, the hypervisor %.1f%% (+-%.1f%%: the kernel counts in ticks); load %.2f -> %.2f",
                counted_steps, 100 * spread(), known.c_str(), 100 * other_share, 100 * steal_share, 100 * share_resolution,
                load1_start, load1_end);
  std::string out = line;
  if (mhz_max > 0 && mhz_max - mhz_min > 1) {
    std::snprintf(line, sizeof line, "; clock %.0f-%.0f MHz", mhz_min, mhz_max);
    out += line;
  }
  if (faults_per_step > 0) {
    std::snprintf(line, sizeof line, "; %.0f page faults per step", faults_per_step);
    out += line;
  }
  if (compute_cpu_s > 0) {
    std::snprintf(line, sizeof line, "; the compute actions' own CPU time %.4g ms a step, spread %.1f%%",
                  1e3 * compute_cpu_s, 100 * compute_cpu_spread);
    out += line;
  }
  return out;
}

std::string verdict_name(Verdict v) {
  switch (v) {
    case Verdict::NotMeaningful: return "not meaningful";
    case Verdict::WithinNoise: return "within noise";
    case Verdict::ModelError: return "model error";
    case Verdict::Unknown: break;
  }
  return "unknown";
}

namespace {

Judgement busy_machine(const Noise& noise) {
  char line[512];
  std::snprintf(line, sizeof line,
                "the machine was busy: other processes took %.1f%% of its CPU and the hypervisor %.1f%% (+-%.1f%%) "
                "during the measured steps (%.0f%% or more makes a comparison say as much about the load as about "
                "the model); measure again on a quiet machine",
                100 * noise.other_share, 100 * noise.steal_share, 100 * noise.share_resolution, 100 * kBusyShare);
  return {Verdict::NotMeaningful, line};
}

}  // namespace

Judgement judge(std::optional<double> relative_error, const std::optional<Noise>& noise,
                const std::optional<Repeats>& repeats) {
  char line[512];
  if (!noise) return {Verdict::Unknown, "the measured trace recorded no noise (pipetwin run writes it)"};
  if (noise->busy()) return busy_machine(*noise);
  if (!relative_error) return {Verdict::Unknown, "the measured step time is 0"};
  const double e = std::abs(*relative_error);
  const double across = repeats ? repeats->median_uncertainty_rel : 0.0;
  const double band = std::max(noise->band(), across);
  const bool bounded = noise->median_uncertainty_rel > 0 || across > 0;
  if (bounded && e <= band) {
    std::snprintf(line, sizeof line, "|error| %.1f%% is within what the measurement itself may carry (+-%.1f%%%s)",
                  100 * e, 100 * band, across > noise->band() ? ", from its repeats' spread" : "");
    return {Verdict::WithinNoise, line};
  }
  // Quiet as far as the counters tell, or too short a run for them to tell.
  char where[256];
  if (!noise->host_known) {
    std::snprintf(where, sizeof where, "(the host's load was not recorded)");
  } else if (noise->other_share + noise->steal_share + noise->share_resolution < kBusyShare) {
    std::snprintf(where, sizeof where, "on a quiet machine");
  } else {
    std::snprintf(where, sizeof where,
                  "(whether the machine was quiet the run was too short to tell: others took %.1f%% +-%.1f%%; run more "
                  "steps)",
                  100 * (noise->other_share + noise->steal_share), 100 * noise->share_resolution);
  }
  if (bounded) {
    std::snprintf(line, sizeof line, "|error| %.1f%% is beyond what the measurement itself may carry (+-%.1f%%) %s",
                  100 * e, 100 * band, where);
  } else {
    std::snprintf(line, sizeof line, "|error| %.1f%% %s; too few steps to bound the measurement's own noise", 100 * e,
                  where);
  }
  return {Verdict::ModelError, line};
}

Judgement judge_bubble(double error, const std::optional<Noise>& noise, double band, int runs) {
  char line[512];
  if (noise && noise->busy()) return busy_machine(*noise);
  const double e = 100 * std::abs(error);
  if (runs < 3) {
    std::snprintf(line, sizeof line,
                  "|error| %.1f points; %s: how far the bubble moves from run to run is unknown (compare --repeats "
                  "with 3 runs or more tells it)",
                  e, runs == 1 ? "one run" : "two runs");
    return {Verdict::Unknown, line};
  }
  const bool within = e <= 100 * band;
  std::snprintf(line, sizeof line,
                "|error| %.2f points is %s how far the bubble moves from run to run (its median over %d runs known to "
                "+-%.2f points, 95%%)",
                e, within ? "within" : "beyond", runs, 100 * band);
  return {within ? Verdict::WithinNoise : Verdict::ModelError, line};
}

}  // namespace pipetwin::calibration
