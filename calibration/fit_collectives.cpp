// fit_collectives(): the data-parallel collectives, from the REDUCE_GRAD
// actions of runs with D > 1 that ran alone (least squares on their rounds);
// every reduction then against its replay; the tensor group's collectives
// from the seconds the T > 1 runs recorded in them.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "calibration/fit_parts.hpp"
#include "calibration/least_squares.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;

namespace {

// One stage's reductions in one run: the median of its REDUCE_GRAD actions;
// or (stage -1) one process's ZeRO-1 or 2 all-gathers at its STEPs, per call.
struct Reduction {
  const TraceRun* run = nullptr;
  int stage = 0;
  int steps = 0;        // rounds of the ring: 2(D - 1), or G - 1 (ZeRO-1's, in shard groups of G: D without HSDP)
  double chunk = 0;     // bytes each round sends: the stage's gradients / D (ZeRO-1: / G)
  double measured = 0;  // median duration, from the data group's last post (else its own) to its completion
  bool alone = false;   // no other rank computed, stepped or reduced for more than 0.1% of it
};

// How long the other ranks of the timeline computed, stepped or reduced
// (what takes a core) during [start, end).
double computing_beside(const ps::Timeline& t, std::size_t rank, double start, double end) {
  double busy = 0;
  for (std::size_t r = 0; r < t.ranks.size(); ++r) {
    if (r == rank) continue;
    for (const auto& a : t.ranks[r]) {
      if (ps::is_compute(a.action.op) || ps::is_stage_level(a.action.op)) busy += std::max(0.0, std::min(end, a.end) - std::max(start, a.start));
    }
  }
  return busy;
}

// ZeRO-2 and 3 reduce-scatter each layer's gradients as a backward makes
// them, and buckets all-reduce pieces of them during the last backward: their
// REDUCE_GRAD times what is left in flight when it is posted (or, ZeRO-3
// without resharding, every layer's reduce-scatter in turn), not one ring of
// the stage's gradients.
// With experts over E < D replicas, REDUCE_GRAD is two all-reduces (the
// replicated weights over D, the experts over D / E), and with E = D the
// experts' gradients are not reduced at all.
bool reduces_in_pieces(const TraceRun& run) {
  return run.program.zero >= 2 || run.bucketed || run.program.expert_parallel > 1;
}

std::vector<Reduction> reductions(const std::vector<const TraceRun*>& runs, int cores) {
  std::vector<Reduction> out;
  for (const TraceRun* run : runs) {
    const int D = run->program.data_parallel;
    // ZeRO's shards: over the D replicas, or (HSDP) inside groups of G, where
    // the reduce-scatter and the all-gather run (the groups' all-reduce at STEP).
    const int G = std::min(run->program.shard_degree(), D);
    // ZeRO-1's and 2's all-gathers at STEP, G - 1 rounds of a part each,
    // waited for at once (alone where every process has a core of its own):
    // whole rings, however the run reduced its gradients.
    for (const auto& x : run->all_gather) {
      if (x.calls <= 0) continue;
      out.push_back({run, -1, G - 1, x.bytes / x.calls, x.seconds / x.calls, cores <= 0 || run->program.num_devices() <= cores});
    }
    if (reduces_in_pieces(*run)) continue;
    const ps::Timeline& t = run->trace.timeline;
    std::map<int, std::vector<double>> all, alone;
    for (std::size_t r = 0; r < t.ranks.size(); ++r) {
      for (const auto& a : t.ranks[r]) {
        if (a.action.op != ps::Op::REDUCE_GRAD) continue;
        // From where the whole data group had posted it, where recorded.
        const auto post = run->reduction_posts_s.find(ps::to_string(a.action));
        const double start = post != run->reduction_posts_s.end() ? std::clamp(post->second, a.start, a.end) : a.start;
        const double d = a.end - start;
        all[a.action.stage.value].push_back(d);
        if (computing_beside(t, r, start, a.end) <= 1e-3 * d) alone[a.action.stage.value].push_back(d);
      }
    }
    for (const auto& [s, durations] : all) {
      const bool scatter = run->program.shard_optimizer();
      Reduction g{run, s, scatter ? G - 1 : 2 * (D - 1), fitting::weight_bytes(*run, s) / (scatter ? G : D)};
      const auto it = alone.find(s);
      g.alone = it != alone.end();
      g.measured = median(g.alone ? it->second : durations);
      if (g.measured > 0) out.push_back(g);
    }
  }
  return out;
}

// Step latency and seconds per byte by robust least squares on the rows
// `use`: measured / steps = latency + chunk / bandwidth.
Solution fit_steps(const std::vector<Reduction>& use, Problem& prob) {
  prob.params = {non_negative("collective.seconds_per_byte", "every reduction sent one size of chunk"),
                 non_negative("collective.latency_s",
                              "every reduction sent one size of chunk: the per-byte cost holds the latency")};
  for (const auto& g : use) {
    prob.x.push_back({g.chunk, 1.0});
    prob.y.push_back(g.measured / g.steps);
  }
  return robust_solve(prob);
}

// Per stage, the median REDUCE_GRAD duration of a replayed timeline.
std::map<int, double> replayed_reductions(const ps::Timeline& t) {
  std::map<int, std::vector<double>> by_stage;
  for (const auto& rank : t.ranks) {
    for (const auto& a : rank) {
      if (a.action.op == ps::Op::REDUCE_GRAD) by_stage[a.action.stage.value].push_back(a.end - a.start);
    }
  }
  std::map<int, double> out;
  for (const auto& [s, d] : by_stage) out[s] = median(d);
  return out;
}

// Huber over `runs` of their replayed steps' relative errors on fit.hardware.
double step_loss(const std::vector<const TraceRun*>& runs, const FitResult& fit, const Replay& replay) {
  double sum = 0;
  for (const TraceRun* run : runs) sum += huber_loss(replay(*run, fit.hardware).makespan() / run->step_time_s - 1);
  return sum;
}

void fit_rounds(const std::vector<Reduction>& groups, std::size_t runs, FitResult& fit);
bool fit_tensor_rounds(const std::vector<const TraceRun*>& runs, FitResult& fit, const TensorShare& share);
void fit_latency_on_steps(const std::vector<const TraceRun*>& runs, FitResult& fit, const Replay& replay);
void fit_tensor_compute(const std::vector<const TraceRun*>& runs, FitResult& fit, const Replay& replay);
void fit_exchanges(const std::vector<const TraceRun*>& runs, FitResult& fit);

}  // namespace

void fit_collectives(const std::vector<TraceRun>& runs, FitResult& fit, const Replay& replay,
                     const TensorShare& tensor_share) {
  std::vector<const TraceRun*> data, tensor;
  for (const auto& r : runs) {
    if (!r.program.is_pipeline_only()) (r.program.tensor_parallel > 1 ? tensor : data).push_back(&r);
  }
  if (data.empty() && tensor.empty()) return;
  if (fit.hardware.topology.kind != pm::TopologyKind::SharedHost) {
    fit.notes.push_back("the parallel runs' collectives are fitted on a shared host (--hardware cpu) only; on " +
                        std::string(pm::topology_name(fit.hardware.topology.kind)) +
                        " they are the topology's links, as given: compare the runs with pipetwin compare");
    return;
  }
  const std::vector<Reduction> groups = reductions(data, fit.hardware.topology.host_cores);
  const auto pieces = std::count_if(data.begin(), data.end(), [](const TraceRun* r) { return reduces_in_pieces(*r); });
  if (pieces > 0) {
    fit.notes.push_back(std::to_string(pieces) + " run(s) reduce their gradients in pieces during the backwards (ZeRO-2 " +
                        "or 3 by layer, buckets, or experts apart): their REDUCE_GRAD is not one ring of the stage's gradients, and the " +
                        "collectives are not fitted on it");
  }
  fit_exchanges(data, fit);
  if (!groups.empty()) {
    fit_rounds(groups, data.size(), fit);
  } else if (static_cast<std::size_t>(pieces) < data.size()) {
    fit.notes.push_back("the data-parallel runs hold no timed REDUCE_GRAD: their collectives are not fitted");
  }
  if (!tensor.empty()) {
    if (tensor_share && fit_tensor_rounds(tensor, fit, tensor_share)) {
      fit_tensor_compute(tensor, fit, replay);
    } else {
      fit_latency_on_steps(tensor, fit, replay);
    }
  }
  // Every reduction, those beside other ranks' work too, against its replay
  // on the calibrated hardware (on a shared host a round's work shares the
  // cores: a reduction beside compute takes longer, as measured).
  auto& stats = fit.residuals["reduce_grad"];
  for (const TraceRun* run : data) {
    if (reduces_in_pieces(*run)) continue;  // none of its reductions is among the groups
    const auto predicted = replayed_reductions(replay(*run, fit.hardware));
    for (const auto& g : groups) {
      if (g.run == run && predicted.count(g.stage) != 0) stats.add(predicted.at(g.stage), g.measured);
    }
  }
  stats.finish();
  auto& gathers = fit.residuals["all_gather"];  // ZeRO-1's and 2's, per call
  const pm::Link& link = fit.hardware.topology.collective;
  for (const auto& g : groups) {
    if (g.stage < 0) gathers.add(g.steps * (link.latency_s + g.chunk / link.bandwidth), g.measured);
  }
  if (gathers.count > 0) {
    gathers.finish();
  } else {
    fit.residuals.erase("all_gather");
  }
}

namespace {

void fit_rounds(const std::vector<Reduction>& groups, std::size_t runs, FitResult& fit) {
  std::vector<Reduction> use;
  for (const auto& g : groups) {
    if (g.alone) use.push_back(g);
  }
  if (use.empty()) {
    use = groups;
    fit.notes.push_back("no reduction ran alone (every one beside another rank's compute, step or reduction): the "
                        "collective link is fitted on all of them, so it holds their sharing of the cores");
  }
  Problem prob;
  const Solution sol = fit_steps(use, prob);
  fitting::record(fit.coefficients, prob, sol);
  pm::Topology& t = fit.hardware.topology;
  t.collective.latency_s = sol.value[1];
  t.collective.bandwidth = sol.value[0] > 0 ? 1 / sol.value[0] : t.intra.bandwidth;
  if (!(sol.value[0] > 0)) {
    fit.notes.push_back("the reductions' time did not grow with their bytes: the collective link keeps the "
                        "point-to-point link's bandwidth");
  }
  fit.notes.push_back("collectives: fitted on " + std::to_string(use.size()) + " of " + std::to_string(groups.size()) +
                       " (run, stage) reductions and (run, process) ZeRO-1/2 all-gathers of " + std::to_string(runs) +
                      " data-parallel run(s), as rings (Gloo's all-reduce); their runs' compute is not fitted (a "
                      "replica's trace does not show the others computing beside it)");
}

// The tensor group's rounds on the recorded seconds of the runs that have
// them: per (run, rank), measured = latency x (the stage costs' seconds at
// latency 1 s and no bytes' cost) + seconds per byte x (at latency 0 and
// 1 s/B): the closed forms are linear in both. False (nothing fitted) where
// no run recorded them.
bool fit_tensor_rounds(const std::vector<const TraceRun*>& runs, FitResult& fit, const TensorShare& share) {
  pm::Hardware per_round = fit.hardware, per_byte = fit.hardware;
  per_round.topology.tensor_collective = {1.0, 1e300};
  per_byte.topology.tensor_collective = {0.0, 1.0};
  Problem prob;
  prob.params = {non_negative("tensor_collective.latency_s", "every run's all-reduces were one size"),
                 non_negative("tensor_collective.seconds_per_byte",
                              "every run's all-reduces were one size: the latency holds their bytes' cost")};
  // Where every process had a core of its own: there a collective's time is
  // its own; where processes outnumber the cores it also holds the waits for
  // a member without a core (the host's sharing, fitted on the pipelines).
  const int cores = fit.hardware.topology.host_cores;
  const auto own_cores = [&](const TraceRun* r) { return cores <= 0 || r->program.num_devices() <= cores; };
  const bool any_alone = std::any_of(runs.begin(), runs.end(), [&](const TraceRun* r) {
    return !r->tp_collective_s.empty() && own_cores(r);
  });
  std::vector<const TraceRun*> used;
  for (const TraceRun* run : runs) {
    if (run->tp_collective_s.empty() || (any_alone && !own_cores(run))) continue;
    const auto rounds = share(*run, per_round), bytes = share(*run, per_byte);
    for (std::size_t k = 0; k < run->tp_collective_s.size() && k < rounds.size(); ++k) {
      if (!(run->tp_collective_s[k] > 0) || !(rounds[k] > 0)) continue;
      prob.x.push_back({rounds[k], bytes[k]});
      prob.y.push_back(run->tp_collective_s[k]);
    }
    used.push_back(run);
  }
  if (prob.y.empty()) return false;
  const Solution sol = robust_solve(prob);
  fitting::record(fit.coefficients, prob, sol);
  pm::Link& link = fit.hardware.topology.tensor_collective;
  link.latency_s = sol.value[0];
  link.bandwidth = sol.value[1] > 0 ? 1 / sol.value[1] : 1e300;
  if (!(sol.value[1] > 0)) {
    fit.notes.push_back("the tensor group's collectives did not grow with their bytes: their rounds cost latency only");
  }
  auto& stats = fit.residuals["tp_collectives"];  // every run's that recorded them
  for (const TraceRun* run : runs) {
    const auto predicted = share(*run, fit.hardware);
    for (std::size_t k = 0; k < run->tp_collective_s.size() && k < predicted.size(); ++k) {
      stats.add(predicted[k], run->tp_collective_s[k]);
    }
  }
  stats.finish();
  fit.notes.push_back("tensor collectives: fitted on the recorded seconds of " + std::to_string(prob.y.size()) +
                      " (run, rank) step totals of " + std::to_string(used.size()) + " tensor-parallel run(s)" +
                      (any_alone ? " whose every process had a core of its own" : "") +
                      ", as rings (Gloo's all-reduce), the waits for the group's members included");
  return true;
}

// The expert groups' all-to-alls on the seconds the E > 1 runs recorded:
// per process, seconds / calls = latency + (E - 1) / E · (bytes / calls) /
// bandwidth (robust least squares; models::all_to_all's closed form on one
// link). Nothing where no run recorded them.
void fit_exchanges(const std::vector<const TraceRun*>& runs, FitResult& fit) {
  Problem prob;
  prob.params = {non_negative("all_to_all.seconds_per_byte", "every all-to-all exchanged one size: the latency holds its bytes' cost"),
                 non_negative("all_to_all.latency_s",
                              "every all-to-all exchanged one size: the per-byte cost holds the latency")};
  struct Row {
    double calls, seconds, term;
  };
  std::vector<Row> rows;
  int used = 0;
  for (const TraceRun* run : runs) {
    const double E = run->program.expert_parallel;
    if (E <= 1 || run->all_to_all.empty()) continue;
    ++used;
    for (const auto& x : run->all_to_all) {
      if (x.calls <= 0) continue;
      const double term = (E - 1) / E * x.bytes / x.calls;
      prob.x.push_back({term, 1.0});
      prob.y.push_back(x.seconds / x.calls);
      rows.push_back({x.calls, x.seconds, term});
    }
  }
  if (rows.empty()) return;
  const Solution sol = robust_solve(prob);
  fitting::record(fit.coefficients, prob, sol);
  pm::Link& link = fit.hardware.topology.exchange;
  link.latency_s = sol.value[1];
  link.bandwidth = sol.value[0] > 0 ? 1 / sol.value[0] : 1e300;
  auto& stats = fit.residuals["all_to_all"];  // per (run, process): its step's all-to-alls in all
  for (const auto& r : rows) stats.add(r.calls * (sol.value[1] + r.term * sol.value[0]), r.seconds);
  stats.finish();
  fit.notes.push_back("all-to-all: fitted on the recorded seconds of " + std::to_string(rows.size()) +
                      " (run, process) step totals of " + std::to_string(used) +
                      " expert-parallel run(s), the waits for the group's members included (one member's skew is the "
                      "other's wait: exchanges of a few kilobytes tell the per-byte cost poorly)");
}

// What a tensor group's member computes beyond its 1/T of the layers' work
// on the curves, its collectives as fitted: tensor_compute on the T > 1
// runs' replayed steps (golden-section search in [0, 1]).
void fit_tensor_compute(const std::vector<const TraceRun*>& runs, FitResult& fit, const Replay& replay) {
  double& slower = fit.hardware.topology.tensor_compute;
  const auto loss = [&](double value) {
    slower = value;
    return step_loss(runs, fit, replay);
  };
  slower = fitting::golden_min(loss, 0.0, 1.0, 1e-4);
  fit.coefficients.push_back({"tensor_compute", slower,
                              "fitted on the step times of " + std::to_string(runs.size()) +
                                  " tensor-parallel run(s) (replayed), their collectives as recorded"});
}

// Without recorded seconds: the tensor group's rounds' latency on the
// replayed steps of the tensor-parallel runs (golden-section search between
// 0 and twice the larger of the data rounds' latency and 1 ms), their bytes'
// rate the data rounds' (else the loopback's).
void fit_latency_on_steps(const std::vector<const TraceRun*>& runs, FitResult& fit, const Replay& replay) {
  pm::Topology& t = fit.hardware.topology;
  t.tensor_collective = t.collective.bandwidth > 0 ? t.collective : t.intra;
  pm::Link& link = t.tensor_collective;
  const auto loss = [&](double latency) {
    link.latency_s = latency;
    return step_loss(runs, fit, replay);
  };
  const double latency = fitting::golden_min(loss, 0.0, 2 * std::max(link.latency_s, 1e-3), 1e-6);
  link.latency_s = latency;
  fit.coefficients.push_back({"tensor_collective.latency_s", latency,
                              "fitted on the step times of " + std::to_string(runs.size()) +
                                  " tensor-parallel run(s) (replayed): they recorded no seconds in their collectives"});
}

}  // namespace

}  // namespace pipetwin::calibration
