// fit_overlap: the device's overlap_factor from the traces' OVERLAP_F_B (a
// forward and a backward of two micro-batches issued as one, DualPipeV's).
// Each one's span, from its first half's start to its last one's end, against
// what its halves take alone: the median, in the same run, of that stage's
// actions of that op outside any OVERLAP_F_B (micro-batch 0's forward left
// out: it also reads the weights cold). Durations are paced, each action
// until the next one on its rank starts, as the compute fit reads them. Halves
// a, b that took span together hid (a + b - span) / min(a, b) of the shorter
// (a group of more: the sum of each half's min with the one before it, as the
// engines take it off); the factor is the median over every OVERLAP_F_B whose
// halves all ran alone somewhere, clamped to [0, 1]. An executor that runs the
// halves one after the other (pipetwin run, PyTorch's runtime by default)
// gives about 0: the sum.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "calibration/fit_parts.hpp"

namespace pipetwin::calibration::fitting {
namespace ps = pipetwin::schedule;

namespace {

// What the OVERLAP_F_B of the runs hid, each as a share of what the engines
// would take off at factor 1; how many there were, and how many lacked halves
// that ran alone; how many runs held any.
struct Tally {
  std::vector<double> hidden;
  int groups = 0, skipped = 0, runs = 0;
};

// One rank: `order` its program's list, `timed` its paced actions.
bool tally_rank(const std::vector<ps::Action>& order, const std::vector<ps::TimedAction>& timed_actions, Tally& tally) {
  std::map<std::string, const ps::TimedAction*> timed;  // by name
  for (const auto& t : timed_actions) timed[ps::to_string(t.action)] = &t;
  std::set<std::string> inside;  // the names standing in an OVERLAP_F_B
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i].overlapped) {
      for (std::size_t k = ps::group_begin(order, i); k < ps::group_end(order, i); ++k) inside.insert(ps::to_string(order[k]));
    }
  }
  if (inside.empty()) return false;
  std::map<std::pair<int, ps::Op>, std::vector<double>> alone;
  for (const auto& t : timed_actions) {
    const bool cold = t.action.op == ps::Op::F && t.action.microbatch && t.action.microbatch->value == 0;
    if (ps::is_compute(t.action.op) && !cold && !inside.count(ps::to_string(t.action))) {
      alone[{t.action.stage.value, t.action.op}].push_back(t.end - t.start);
    }
  }
  for (std::size_t b = 0; b < order.size(); b = ps::group_end(order, b)) {
    const std::size_t e = ps::group_end(order, b);
    if (e == b + 1) continue;
    ++tally.groups;
    double start = INFINITY, end = -INFINITY, sum = 0, hideable = 0, before = 0;
    bool known = true;
    for (std::size_t k = b; k < e && known; ++k) {
      const auto t = timed.find(ps::to_string(order[k]));
      const auto a = alone.find({order[k].stage.value, order[k].op});
      known = t != timed.end() && a != alone.end();
      if (!known) break;
      start = std::min(start, t->second->start);
      end = std::max(end, t->second->end);
      const double own = median(a->second);
      sum += own;
      if (k > b) hideable += std::min(own, before);  // what the engines take off at factor 1
      before = own;
    }
    if (!known || !(hideable > 0)) {
      ++tally.skipped;
      continue;
    }
    tally.hidden.push_back((sum - (end - start)) / hideable);
  }
  return true;
}

}  // namespace

void fit_overlap(const std::vector<TraceRun>& runs, models::Device& device, FitResult& result) {
  Tally tally;
  for (const auto& run : runs) {
    const ps::Timeline timeline = paced(run.trace.timeline);
    bool any = false;
    for (std::size_t r = 0; r < run.program.ranks.size() && r < timeline.ranks.size(); ++r) {
      any = tally_rank(run.program.ranks[r], timeline.ranks[r], tally) || any;
    }
    tally.runs += any;
  }
  auto& hidden = tally.hidden;
  const int groups = tally.groups, skipped = tally.skipped, with = tally.runs;
  if (groups == 0) {
    if (device.overlap_factor > 0) {
      result.notes.push_back("overlap_factor " + std::to_string(device.overlap_factor) +
                             " kept from the base hardware: the traces hold no OVERLAP_F_B to fit it on");
    }
    return;
  }
  if (hidden.empty()) {
    result.notes.push_back("overlap_factor kept at " + std::to_string(device.overlap_factor) + ": none of the traces' " +
                           std::to_string(groups) + " OVERLAP_F_B has halves that also ran alone to compare with");
    return;
  }
  const double m = median(hidden);
  device.overlap_factor = std::clamp(m, 0.0, 1.0);
  std::sort(hidden.begin(), hidden.end());
  const double q1 = hidden[hidden.size() / 4], q3 = hidden[(3 * hidden.size()) / 4];
  char line[400];
  std::snprintf(line, sizeof line,
                "overlap_factor %.3f: the median over %zu OVERLAP_F_B of %d run(s) hid %.1f%% of the shorter half "
                "(quartiles %.1f%% and %.1f%%; each one's span against its halves' medians alone in the same run; "
                "%d without such halves left out)%s",
                device.overlap_factor, hidden.size(), with, 100 * m, 100 * q1, 100 * q3, skipped,
                m < 0   ? ", clamped to 0: the halves ran one after the other, and slower than the same actions elsewhere in "
                          "the step (where other ranks computed less beside them)"
                : m > 1 ? ", clamped to 1: the spans were shorter than the longer half alone"
                        : "");
  result.notes.push_back(line);
  result.coefficients.push_back({"overlap_factor", device.overlap_factor, "median of " + std::to_string(hidden.size()) + " OVERLAP_F_B"});
}

}  // namespace pipetwin::calibration::fitting
