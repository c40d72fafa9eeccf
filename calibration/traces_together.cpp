// check_together() and the host's records: whether traces can be fitted
// together (one model, one thread count, one kind of host).
#include "calibration/traces.hpp"

#include <cstdlib>
#include <map>

#include "schedule/error.hpp"

namespace pipetwin::calibration {

namespace {

// The first difference between two models, or "" when they are the same.
std::string model_difference(const models::Model& a, const models::Model& b) {
  if (a.name != b.name) return "model '" + b.name + "', not '" + a.name + "'";
  if (a.precision != b.precision) {
    return "precision " + std::string(models::precision_name(b.precision)) + ", not " +
           std::string(models::precision_name(a.precision));
  }
  if (a.layers.size() != b.layers.size()) {
    return std::to_string(b.layers.size()) + " layers, not " + std::to_string(a.layers.size());
  }
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    const auto &x = a.layers[l], &y = b.layers[l];
    if (x.kind != y.kind || x.cost.forward_flops != y.cost.forward_flops ||
        x.cost.input_grad_flops != y.cost.input_grad_flops || x.cost.weight_grad_flops != y.cost.weight_grad_flops ||
        x.cost.params != y.cost.params || x.cost.output_elems != y.cost.output_elems ||
        x.cost.stashed_elems != y.cost.stashed_elems || x.shape.flash_attention != y.shape.flash_attention) {
      return "a different layer " + std::to_string(l) + " (" + y.name + ", " + std::string(models::kind_name(y.kind)) +
             ")";
    }
  }
  return "";
}

}  // namespace

int recorded_host_cores(const std::vector<TraceRun>& runs) {
  const TraceRun* first = nullptr;
  int cores = 0;
  for (const auto& run : runs) {
    for (std::size_t r = 0; r < run.host_cores.size(); ++r) {
      if (run.host_cores[r] <= 0) continue;
      if (first == nullptr) {
        first = &run;
        cores = run.host_cores[r];
      } else if (run.host_cores[r] != cores) {
        throw Error(run.path + ": rank " + std::to_string(r) + " ran on a host with " + std::to_string(run.host_cores[r]) +
                    " usable cores, but " + first->path + " on one with " + std::to_string(cores) +
                    ": calibrate traces of one kind of host at a time (otherData.measured.ranks[].host_cores)");
      }
    }
  }
  return cores;
}

double recorded_sched_slice_s(const std::vector<TraceRun>& runs) {
  double slice = 0;
  for (const auto& run : runs) {
    for (const double s : run.sched_slice_s) {
      if (s <= 0) continue;
      if (slice > 0 && s != slice) return 0;
      slice = s;
    }
  }
  return slice;
}

void check_together(const std::vector<TraceRun>& runs) {
  if (runs.empty()) throw Error("calibrate: no traces given");
  const TraceRun& first = runs.front();
  // One file given twice would count twice in every fit.
  std::map<std::string, const TraceRun*> by_file;
  for (const auto& run : runs) {
    char* real = ::realpath(run.path.c_str(), nullptr);
    if (real == nullptr) continue;  // not a file (traces made in memory)
    const std::string key = real;
    std::free(real);
    const auto [it, fresh] = by_file.emplace(key, &run);
    if (!fresh) throw Error(run.path + ": given twice (also as " + it->second->path + ")");
  }
  // Measured and simulated traces fit different things: a simulated one is a
  // synthetic test of the fit, never evidence about a machine.
  const auto measured = [](const TraceRun& r) { return r.producer == "pipetwin run"; };
  for (const auto& run : runs) {
    if (measured(run) != measured(first)) {
      const TraceRun& sim = measured(run) ? first : run;
      const TraceRun& real = measured(run) ? run : first;
      throw Error(sim.path + ": not measured (otherData.producer is '" + sim.producer + "', not 'pipetwin run'), but " +
                  real.path + " is: calibrate measured traces, or simulated ones alone");
    }
  }
  for (const auto& run : runs) {
    const std::string diff = model_difference(first.model, run.model);
    if (!diff.empty()) {
      throw Error(run.path + ": its model has " + diff + " as in " + first.path +
                  ": calibrate traces of one model at a time");
    }
  }
  const TraceRun* with_threads = nullptr;
  for (const auto& run : runs) {
    if (run.threads.empty()) continue;
    if (with_threads == nullptr) with_threads = &run;
    const int want = with_threads->threads.front();
    for (std::size_t r = 0; r < run.threads.size(); ++r) {
      if (run.threads[r] != want) {
        throw Error(run.path + ": rank " + std::to_string(r) + " ran with " + std::to_string(run.threads[r]) +
                    " intra-op threads, but " + with_threads->path + " with " + std::to_string(want) +
                    ": a calibrated device is one thread count (pipetwin run --threads)");
      }
    }
  }
}

}  // namespace pipetwin::calibration
