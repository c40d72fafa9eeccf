// The transfer part of fit(): per (sender stage, direction) the sends and
// their receives, then the sender's cost, the link's latency and bandwidth,
// the receiver's cost, and with more ranks than cores what each send and
// receive waits for a core.
#include "calibration/fit_parts.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "calibration/least_squares.hpp"
#include "models/stage_costs.hpp"
#include "schedule/interpreter.hpp"

namespace pipetwin::calibration::fitting {
namespace ps = pipetwin::schedule;
namespace pm = pipetwin::models;

namespace {

// A link whose transfers take no time per byte (the send holds them).
constexpr double kUnbounded = 1e18;  // bytes/s

// The link groups of one run, from its paced timeline.
void add_link_groups(const TraceRun& run, const pm::Hardware& base, std::vector<LinkGroup>& links) {
  const auto& p = run.program;
  const ps::Timeline timeline = paced(run.trace.timeline);
  std::map<ps::MessageKey, std::pair<int, ps::TimedAction>> sends;  // key -> (rank, action)
  for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
    for (const auto& a : timeline.ranks[r]) {
      if (ps::is_send(a.action.op)) sends[ps::message_of(a.action)] = {static_cast<int>(r), a};
    }
  }
  const pm::StageCostModel probe(run.model, base, request_of(run));
  std::map<std::pair<int, bool>, std::vector<Receive>> receives;
  std::map<std::pair<int, bool>, std::vector<double>> send_durations;
  for (std::size_t r = 0; r < timeline.ranks.size(); ++r) {
    for (const auto& a : timeline.ranks[r]) {
      if (!ps::is_recv(a.action.op)) continue;
      const auto it = sends.find(ps::message_of(a.action));
      if (it == sends.end()) continue;
      const ps::TimedAction& send = it->second.second;
      receives[{send.action.stage.value, send.action.op == ps::Op::SEND_F}].push_back(
          {a.start - send.end, a.end - send.end, run.clock_uncertainty_s.at(r) + run.clock_uncertainty_s.at(it->second.first)});
    }
  }
  for (const auto& [key, entry] : sends) {
    const auto& a = entry.second.action;
    send_durations[{a.stage.value, a.op == ps::Op::SEND_F}].push_back(entry.second.end - entry.second.start);
  }
  for (const auto& [key, durations] : send_durations) {
    const auto [s, forward] = key;
    const auto [i, j] = p.partition.at(s);
    LinkGroup g;
    g.run = &run;
    g.stage = s;
    g.forward = forward;
    g.bytes = probe.cut_bytes(forward ? j : i);
    g.send = median(durations);
    g.sends = durations;
    g.receives = receives[key];
    links.push_back(g);
  }
}

// The sender's cost, affine in the bytes it writes.
void fit_send(const Inputs& in, const std::vector<LinkGroup>& links, pm::Device& device, FitResult& result) {
  Problem prob;
  prob.params = {non_negative("send.overhead_s"), non_negative("send.seconds_per_byte", "every send carries as many bytes")};
  for (const auto& g : links) {
    if (!in.transfers_from(*g.run)) continue;
    prob.x.push_back({1, g.bytes});
    prob.y.push_back(g.send);
  }
  if (prob.y.empty()) return;
  const Solution sol = robust_solve(prob);
  device.transfer_overhead_s = sol.value[0];
  device.send_bandwidth = sol.value[1] > 0 ? 1 / sol.value[1] : 0;
  record(result.coefficients, prob, sol);
}

// The link from the receives that were waiting when their send ended, and
// whose own cost (take) would have run out by then: they end with the
// arrival (sets each group's waited and flight). `base_link` when none;
// the coefficients go to `keep` when given.
pm::Link fit_link(const Inputs& in, std::vector<LinkGroup>& links, const pm::Link& base_link,
                  const std::function<double(double)>& take, std::vector<Coefficient>* keep) {
  Problem prob;
  Param slope;
  slope.name = "link.seconds_per_byte";
  slope.on_dependent = Param::OnDependent::FixValue;
  slope.fixed_value = 1 / base_link.bandwidth;
  slope.why_dependent = "every transfer carries as many bytes: the base bandwidth is kept";
  slope.why_bounded = "bounded at 0: the sender's cost holds the transfer (unbounded link bandwidth)";
  prob.params = {non_negative("link.latency_s"), slope};
  for (auto& g : links) {
    if (!in.transfers_from(*g.run)) continue;
    std::vector<double> flights;
    for (const auto& r : g.receives) {
      if (r.start + r.uncertainty + take(g.bytes) <= 0) flights.push_back(r.end);
    }
    g.waited = static_cast<int>(flights.size());
    if (flights.empty()) continue;
    g.flight = median(flights);
    prob.x.push_back({1, g.bytes});
    prob.y.push_back(g.flight);
  }
  if (prob.y.empty()) return base_link;
  const Solution sol = robust_solve(prob, /*relative=*/false);
  if (keep != nullptr) record(*keep, prob, sol);
  return pm::Link{sol.value[0], sol.value[1] > 0 ? 1 / sol.value[1] : kUnbounded};
}

// The receiver's cost, affine in bytes, from the receives that started
// after their message had arrived on `link` (sets each group's arrived and take).
void fit_receive(const Inputs& in, std::vector<LinkGroup>& links, const pm::Link& link, pm::Device& device,
                 FitResult& result) {
  Problem prob;
  prob.params = {non_negative("recv.overhead_s"), non_negative("recv.seconds_per_byte", "every receive takes as many bytes")};
  for (auto& g : links) {
    if (!in.transfers_from(*g.run)) continue;
    std::vector<double> takes;
    for (const auto& r : g.receives) {
      if (r.start - r.uncertainty >= link.seconds(g.bytes)) takes.push_back(r.end - r.start);
    }
    g.arrived = static_cast<int>(takes.size());
    if (takes.empty()) continue;
    g.take = median(takes);
    prob.x.push_back({1, g.bytes});
    prob.y.push_back(g.take);
  }
  if (!prob.y.empty()) {
    const Solution sol = robust_solve(prob);
    device.recv_overhead_s = sol.value[0];
    device.recv_bandwidth = sol.value[1] > 0 ? 1 / sol.value[1] : 0;
    record(result.coefficients, prob, sol);
  } else if (!links.empty()) {
    result.notes.push_back("no receive started after its message had arrived: taking a message costs nothing");
  }
}

// What each send, and each receive that found its message, of the runs
// `pick` keeps also waited for a core: the mean excess over the model above
// (means, not medians: the rare long wait is the cost), recorded as
// `<name>.send_s` and `<name>.recv_s` "in runs with <runs>". 0 where none.
std::pair<double, double> mean_core_waits(const std::vector<LinkGroup>& links, const pm::Device& device,
                                          const pm::Link& link, const std::function<bool(const TraceRun&)>& pick,
                                          const std::string& name, const std::string& runs, FitResult& result) {
  std::vector<double> send_excess, recv_excess;
  for (const auto& g : links) {
    if (!pick(*g.run)) continue;
    const double send_model = device.transfer_overhead_s + (device.send_bandwidth > 0 ? g.bytes / device.send_bandwidth : 0);
    for (const double d : g.sends) send_excess.push_back(d - send_model);
    for (const auto& r : g.receives) {
      if (r.start - r.uncertainty >= link.seconds(g.bytes)) recv_excess.push_back(r.end - r.start - device.recv_seconds(g.bytes));
    }
  }
  const auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (const double x : v) sum += x;
    return v.empty() ? 0.0 : std::max(0.0, sum / static_cast<double>(v.size()));
  };
  const std::pair<double, double> waits{mean(send_excess), mean(recv_excess)};
  if (!send_excess.empty()) {
    result.coefficients.push_back({name + ".send_s", waits.first,
                                   "mean excess of " + std::to_string(send_excess.size()) + " sends in runs with " + runs});
  }
  if (!recv_excess.empty()) {
    result.coefficients.push_back({name + ".recv_s", waits.second,
                                   "mean excess of " + std::to_string(recv_excess.size()) +
                                       " receives that found their message, in runs with " + runs});
  }
  return waits;
}

// With more ranks than cores, a rank that sends or takes a message also
// waits for a core, from those runs' transfers.
void fit_core_waits(const Inputs& in, const std::vector<LinkGroup>& links, const pm::Device& device, double slower,
                    double slower_action_s, pm::Topology& topology, FitResult& result) {
  topology.oversubscribed_compute = slower;
  topology.oversubscribed_action_s = slower_action_s;
  std::tie(topology.oversubscribed_send_s, topology.oversubscribed_recv_s) = mean_core_waits(
      links, device, topology.intra, [&](const TraceRun& run) { return !in.transfers_from(run); }, "oversubscribed",
      "more ranks than cores", result);
}

// With as many ranks as cores, a send or a receive that found its message
// now and then waits milliseconds for a core (the transport's threads find
// every core computing), from those runs' transfers. None where no run has
// as many ranks as cores.
void fit_full_host_waits(const Inputs& in, const std::vector<LinkGroup>& links, const pm::Device& device,
                         pm::Topology& topology, FitResult& result) {
  // As the simulator counts them (T x K x D processes); a run of one rank has no sends.
  const auto full = [&](const TraceRun& run) {
    return in.transfers_from(run) && run.program.num_devices() * threads_of(run) == topology.host_cores;
  };
  std::tie(topology.full_host_send_s, topology.full_host_recv_s) =
      mean_core_waits(links, device, topology.intra, full, "full_host", "as many ranks as cores", result);
}

}  // namespace

void note_unfitted_transfers(const Inputs& in, std::vector<std::string>& notes) {
  if (!in.all_shared && in.unshared.size() < in.runs.size()) {
    notes.push_back(std::to_string(in.runs.size() - in.unshared.size()) +
                    " run(s) with more ranks x threads than the host's cores: their transfers are not fitted");
  }
}

std::vector<LinkGroup> link_groups(const std::vector<TraceRun>& runs, const pm::Hardware& base) {
  std::vector<LinkGroup> links;
  for (const auto& run : runs) add_link_groups(run, base, links);
  return links;
}

pm::Topology fit_transfers(const Inputs& in, std::vector<LinkGroup>& links, double slower, double slower_action_s,
                           pm::Device& device, FitResult& result) {
  const pm::Hardware& base = in.base;
  pm::Topology topology = base.topology;
  fit_send(in, links, device, result);
  // The link, in two passes: first from every receive that was waiting when
  // its send ended, to tell which receives started after their message had
  // arrived; their durations give the receiver's cost (affine in bytes);
  // then the link again from the receives that had waited longer than that
  // cost (a receive ends at max(start + its cost, arrival): the simulator's
  // rule).
  const pm::Link base_link = base.topology.path(0, 1);
  const pm::Link first = fit_link(in, links, base_link, [](double) { return 0.0; }, nullptr);
  fit_receive(in, links, first, device, result);
  bool any_waited = false;
  for (const auto& g : links) any_waited = any_waited || (in.transfers_from(*g.run) && g.waited > 0);
  if (any_waited) {
    const pm::Link link = fit_link(in, links, base_link, [&](double bytes) { return device.recv_seconds(bytes); },
                                   &result.coefficients);
    if (base.topology.kind != pm::TopologyKind::SharedHost && base.topology.kind != pm::TopologyKind::AllToAll) {
      result.notes.push_back("the link fit sets the topology's intra link; routes of several hops add their latencies");
    }
    topology.intra = link;
  } else if (!links.empty()) {
    result.notes.push_back("no receive was waiting for its message: the link keeps the base latency and bandwidth");
  }
  if (base.topology.kind == pm::TopologyKind::SharedHost) fit_full_host_waits(in, links, device, topology, result);
  if (!in.all_shared && base.topology.kind == pm::TopologyKind::SharedHost) {
    fit_core_waits(in, links, device, slower, slower_action_s, topology, result);
  }
  return topology;
}

}  // namespace pipetwin::calibration::fitting
