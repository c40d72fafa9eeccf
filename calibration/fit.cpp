// fit(): the parts of the fit (calibration/fit_parts.hpp) in order, from
// the inputs they share to the calibrated hardware and its residuals.
#include "calibration/fit.hpp"

#include <algorithm>
#include <set>

#include "calibration/fit_parts.hpp"
#include "schedule/error.hpp"

namespace pipetwin::calibration {
namespace pm = pipetwin::models;
namespace ps = pipetwin::schedule;

namespace fitting {

bool Inputs::transfers_from(const TraceRun& run) const {
  return all_shared || std::find(unshared.begin(), unshared.end(), &run) != unshared.end();
}

void record(std::vector<Coefficient>& into, const Problem& prob, const Solution& sol) {
  for (std::size_t j = 0; j < prob.params.size(); ++j) into.push_back({prob.params[j].name, sol.value[j], sol.how[j]});
}

namespace {

// What the parts read: `given` with the cores the traces recorded where it
// is a shared host, and the runs whose transfers are fitted; notes on both.
Inputs inputs_of(const std::vector<TraceRun>& runs, const pm::Hardware& given, std::vector<std::string>& notes) {
  Inputs in{runs, given, {}, false};
  pm::Hardware& base = in.base;
  // A shared host has the cores the traces were measured with, not the base's.
  if (const int cores = base.topology.kind == pm::TopologyKind::SharedHost ? recorded_host_cores(runs) : 0;
      cores > 0 && cores != base.topology.host_cores) {
    notes.push_back("host_cores " + std::to_string(cores) + ", as the traces' ranks recorded (the base hardware '" +
                    given.name + "' has " + std::to_string(given.topology.host_cores) + ")");
    base.topology.host_cores = cores;
  }
  if (base.topology.kind == pm::TopologyKind::SharedHost) {
    for (const auto& run : runs) {
      std::set<std::string> hosts(run.hosts.begin(), run.hosts.end());
      hosts.erase("");
      if (hosts.size() < 2) continue;
      notes.push_back(run.path + ": its ranks ran on " + std::to_string(hosts.size()) + " hosts (" + *hosts.begin() + ", " +
                      *std::next(hosts.begin()) + (hosts.size() > 2 ? ", ..." : "") +
                      "), but the base hardware is one shared host: the fit and its replays take every rank "
                      "as a process of that host; start from a hardware file of several hosts instead");
      break;
    }
  }
  for (const auto& run : runs) {
    int split = 0;
    for (const auto& rank : run.trace.timeline.ranks) {
      for (const auto& a : rank) split += a.action.op == ps::Op::I || a.action.op == ps::Op::W;
    }
    if (split > 0) {
      notes.push_back(run.path + ": its " + std::to_string(split) +
                      " I and W actions (a backward split by a zero-bubble schedule) fit the backward's curve as "
                      "I + W, and W's share of it per kind (weight_grad_share)");
    }
    if (run.noise && run.noise->busy()) {
      notes.push_back(run.path + ": measured on a busy machine (" + run.noise->describe() +
                      "): its durations carry that load; measure it again on a quiet machine");
    }
    if (!oversubscribed(run, base)) in.unshared.push_back(&run);
  }
  in.all_shared = in.unshared.empty();
  return in;
}

// `base` with the fitted device (every rank's) and topology.
pm::Hardware calibrated(const pm::Hardware& base, const pm::Device& device, const pm::Topology& topology, std::size_t runs,
                        const std::string& model) {
  pm::Hardware hw = base;
  hw.devices.clear();
  hw.device = device;
  hw.topology = topology;
  hw.name = base.name + "-calibrated";
  hw.source = "pipetwin calibrate: fitted on " + std::to_string(runs) + " trace(s) of " + model + ", starting from " +
              base.name;
  return hw;
}

}  // namespace
}  // namespace fitting

FitResult fit(const std::vector<TraceRun>& runs, const pm::Hardware& given) {
  using namespace fitting;  // the parts
  check_together(runs);
  FitResult result;
  const Inputs in = inputs_of(runs, given, result.notes);
  const pm::Hardware& base = in.base;
  const pm::Model& model = runs.front().model;
  const pm::Precision precision = model.precision;
  pm::Device device = base.device;
  // The executor posts its sends and reaps them later: what its traces time is
  // a posted send, whatever the base file says of another runtime.
  if (device.blocking_sends) {
    device.blocking_sends = false;
    result.notes.push_back("the base hardware's blocking_sends is left out: pipetwin run posts its sends");
  }
  const double base_peak = device.peak_flops(precision);
  if (!(base_peak > 0)) throw Error("calibrate: the base hardware's device has no peak FLOP/s for " + std::string(pm::precision_name(precision)));

  // 1. Compute: the cold weights, the curves, compute with more ranks than cores.
  Curves curves = fit_curves(in, base_peak, device, result);
  note_unfitted_transfers(in, result.notes);
  // 2. The transfers' observations: per (sender stage, direction).
  std::vector<LinkGroup> links = link_groups(runs, base);
  // 3. The device: peak raised to the fastest kind, curves as efficiencies.
  set_device_curves(curves, base_peak, precision, device, result.notes);
  // 3b. W's share of the backward, where a zero-bubble schedule ran I and W
  // apart: every one of their actions (a split of what was measured, alone
  // or beside another rank), also in the residuals.
  curves.as_measured.split = compute_observations(runs, true).split;
  fit_weight_grad_share(curves.as_measured.split, device, result);
  // 4. Optimizer step: overhead + traffic / memory bandwidth.
  fit_step(curves.observed.steps, base, device, result);
  // 5. Transfers: the sender's overhead, the link's latency and bandwidth, the receiver's cost.
  const pm::Topology topology = fit_transfers(in, links, curves.slower, curves.slower_action_s, device, result);
  // 6. The overlap of a forward and a backward issued together (OVERLAP_F_B).
  fit_overlap(runs, device, result);
  // 7. The calibrated hardware, and every group against its StageCostModel.
  result.hardware = calibrated(base, device, topology, runs.size(), model.name);
  add_residuals(in, curves.as_measured, links, curves.cold_s_per_byte, result);
  note_not_fitted(result);
  return result;
}

}  // namespace pipetwin::calibration
