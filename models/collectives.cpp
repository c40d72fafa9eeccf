// The collectives' table (closed forms, message patterns) and the
// all-reduce's choice between the ring and the tree.
#include "models/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "schedule/error.hpp"
#include "schedule/names.hpp"

namespace pipetwin::models {

namespace {
constexpr schedule::NameTable<Collective, 3> kAllReduceChoices{
    "collective algorithm", {{{Collective::Auto, "auto"}, {Collective::Ring, "ring"}, {Collective::Tree, "tree"}}}};
}  // namespace

std::string_view collective_name(Collective c) { return kAllReduceChoices.name(c); }
Collective parse_collective(std::string_view name) { return kAllReduceChoices.parse(name); }
const std::vector<std::string>& collective_algorithm_names() {
  static const auto names = kAllReduceChoices.names();
  return names;
}

int tree_depth(int members) {
  int h = 0;
  while ((2 << h) <= members) ++h;
  return h;
}

double ring_all_reduce_seconds(const Link& link, double bytes, int members) {
  if (members <= 1) return 0;
  return 2.0 * (members - 1) * (link.latency_s + std::ceil(bytes / members) / link.bandwidth);
}

double tree_all_reduce_seconds(const Link& link, double bytes, int members, int chunks) {
  if (members <= 1) return 0;
  chunks = std::max(1, chunks);
  return 2.0 * (tree_depth(members) + chunks - 1) * (link.latency_s + std::ceil(bytes / chunks) / link.bandwidth);
}

int tree_chunks(const Link& link, double bytes, int members) {
  int best = 1;
  double best_s = tree_all_reduce_seconds(link, bytes, members, 1);
  if (tree_depth(members) <= 1) return best;  // one step per phase: chunks only add latencies
  for (int c = 2; c <= kMaxTreeChunks; ++c) {
    const double s = tree_all_reduce_seconds(link, bytes, members, c);
    if (s < best_s) best = c, best_s = s;
  }
  return best;
}

Collective choose_all_reduce(Collective asked, const Link& ring_link, const Link& tree_link, double bytes, int members) {
  if (asked != Collective::Auto) return asked;
  const double tree = tree_all_reduce_seconds(tree_link, bytes, members, tree_chunks(tree_link, bytes, members));
  return tree < ring_all_reduce_seconds(ring_link, bytes, members) ? Collective::Tree : Collective::Ring;
}

Link group_tree_link(const Topology& topology, int width) {
  const Link ring = topology.group_ring_link(width);  // checks the width
  if (topology.kind == TopologyKind::Cluster) return {ring.latency_s, ring.bandwidth / 2};
  return ring;
}

Link data_group_link(const Topology& topology, int width, int replicas, int rank) {
  return data_subgroup_link(topology, width, replicas, rank, replicas, 1);
}

namespace {
// A shared host's calibrated all-to-all link, where it has one: its own, else the collectives'.
const Link* calibrated_exchange(const Topology& topology) {
  if (topology.kind != TopologyKind::SharedHost) return nullptr;
  if (topology.exchange.bandwidth > 0) return &topology.exchange;
  return topology.collective.bandwidth > 0 ? &topology.collective : nullptr;
}

// A cluster's NIC that several members send through (G/N GPUs to a NIC, or
// tensor groups narrower than G/N on one) carries all their off-node bytes:
// how many members (their first devices `firsts`, groups of `width`) send
// through the NIC of firsts[0]'s off-node route; 1 where none leaves the
// node, or off a cluster.
int nic_sharers(const Topology& topology, const std::vector<int>& firsts, int width) {
  if (topology.kind != TopologyKind::Cluster) return 1;
  const int node = firsts.front() / topology.devices_per_host;
  const auto off = std::find_if(firsts.begin(), firsts.end(), [&](int d) { return d / topology.devices_per_host != node; });
  if (off == firsts.end()) return 1;
  const std::string nic = topology.route_group(firsts.front(), *off, width).front().link;
  return static_cast<int>(std::count_if(firsts.begin(), firsts.end(), [&](int d) {
    return d / topology.devices_per_host == node && topology.route_group(d, *off, width).front().link == nic;
  }));
}
}  // namespace

AllToAll all_to_all(const Topology& topology, int width, int replicas, int rank, int members) {
  AllToAll out;
  if (members <= 1) return out;
  const Link* calibrated = calibrated_exchange(topology);
  const bool nodes = topology.kind == TopologyKind::Cluster || topology.kind == TopologyKind::MultiHost;
  const int first = width * replicas * rank;
  std::vector<int> firsts{first};
  for (int m = 1; m < members; ++m) {
    const int device = width * (m + replicas * rank);
    firsts.push_back(device);
    const Link l = calibrated != nullptr ? *calibrated : topology.path_group(first, device, width);
    out.latency_s = std::max(out.latency_s, l.latency_s);
    const bool off = nodes && device / topology.devices_per_host != first / topology.devices_per_host;
    (off ? out.off_node_s : out.on_node_s) += 1 / l.bandwidth / members;
  }
  out.off_node_s *= nic_sharers(topology, firsts, width);
  return out;
}

AllToAll all_to_all_folded(const Topology& topology, int width, int replicas, int rank, int members) {
  AllToAll out;
  const int n = members * width;
  if (n <= 1) return out;
  const Link* calibrated = calibrated_exchange(topology);
  const bool nodes = topology.kind == TopologyKind::Cluster || topology.kind == TopologyKind::MultiHost;
  const int first = width * replicas * rank;
  std::vector<int> devices{first};
  for (int m = 0; m < members; ++m) {
    for (int t = 0; t < width; ++t) {
      const int device = width * (m + replicas * rank) + t;
      if (device == first) continue;
      devices.push_back(device);
      const Link l = calibrated != nullptr ? *calibrated : topology.path(first, device);
      out.latency_s = std::max(out.latency_s, l.latency_s);
      const bool off = nodes && device / topology.devices_per_host != first / topology.devices_per_host;
      (off ? out.off_node_s : out.on_node_s) += 1 / l.bandwidth / n;
    }
  }
  out.off_node_s *= nic_sharers(topology, devices, 1);
  return out;
}

Link data_subgroup_link(const Topology& topology, int width, int replicas, int rank, int members, int stride) {
  // A shared host's collectives, calibrated: their own step rate.
  if (topology.kind == TopologyKind::SharedHost && topology.collective.bandwidth > 0) return topology.collective;
  const int first = width * replicas * rank;
  Link worst{0, 0};
  for (int m = 1; m < members; ++m) {
    const Link l = topology.path_group(first, width * (m * stride + replicas * rank), width);
    worst.latency_s = std::max(worst.latency_s, l.latency_s);
    worst.bandwidth = worst.bandwidth == 0 ? l.bandwidth : std::min(worst.bandwidth, l.bandwidth);
  }
  if (worst.bandwidth == 0) worst.bandwidth = 1e300;  // one replica: nothing crosses
  return worst;
}

namespace {

using Way = Message::Way;

// Rings: `steps` rounds, each sending bytes / n to the next member and
// receiving from the previous one.
double ring_pass_seconds(const Link& link, double bytes, int members, int steps) {
  if (members <= 1) return 0;
  return steps * (link.latency_s + std::ceil(bytes / members) / link.bandwidth);
}
void ring_round(int member, int members, double bytes, std::vector<Message>& out) {
  out.push_back({Way::Send, (member + 1) % members, bytes / members});
  out.push_back({Way::Receive, (member + members - 1) % members, 0});
}

// The tree (heap order): rounds 0 .. C reduce, round r receiving chunk r
// from the children while it sends chunk r - 1 to the parent; rounds C + 1
// .. 2C + 1 broadcast, receiving chunk b from the parent while it sends
// chunk b - 1 to the children (b = r - C - 1).
int tree_rounds(int, int chunks) { return 2 * (std::max(1, chunks) + 1); }
void tree_round(int member, int members, double bytes, int chunks, int round, std::vector<Message>& out) {
  chunks = std::max(1, chunks);
  const double chunk = bytes / chunks;
  const bool reducing = round <= chunks;
  const int k = reducing ? round : round - chunks - 1;
  const bool has_parent = member > 0;
  const int parent = (member - 1) / 2;
  if (reducing) {
    for (const int c : {2 * member + 1, 2 * member + 2}) {
      if (c < members && k < chunks) out.push_back({Way::Receive, c, 0});
    }
    if (has_parent && k >= 1) out.push_back({Way::Send, parent, chunk});
  } else {
    if (has_parent && k < chunks) out.push_back({Way::Receive, parent, 0});
    for (const int c : {2 * member + 1, 2 * member + 2}) {
      if (c < members && k >= 1) out.push_back({Way::Send, c, chunk});
    }
  }
}

// All-to-all: in one round, every member sends ⌈bytes / n⌉ to each of the
// n - 1 others and receives as much from each, all at once. On a
// full-bisection topology (each member one port, both ways, into a
// non-blocking switch: `link` is the route between two members, the
// bandwidth one port's) each port carries (n - 1) of those parts each way,
// side by side:
//   latency + (n - 1) · ⌈bytes / n⌉ / bandwidth
// ((n - 1)/n · bytes / bandwidth when n divides the bytes).
double all_to_all_seconds(const Link& link, double bytes, int members, int) {
  if (members <= 1) return 0;
  return link.latency_s + (members - 1) * std::ceil(bytes / members) / link.bandwidth;
}
void all_to_all_round(int member, int members, double bytes, int, int, std::vector<Message>& out) {
  for (int i = 1; i < members; ++i) out.push_back({Way::Receive, (member + members - i) % members, 0});
  for (int i = 1; i < members; ++i) out.push_back({Way::Send, (member + i) % members, bytes / members});
}

// The table: one row per schedule::CollectiveAlgorithm, in its order.
const CollectiveEntry kCollectives[] = {
    {CollectiveAlgorithm::RingAllReduce, "ring all-reduce",
     [](const Link& l, double b, int n, int) { return ring_all_reduce_seconds(l, b, n); },
     [](int n, int) { return 2 * (n - 1); },
     [](int m, int n, double b, int, int, std::vector<Message>& out) { ring_round(m, n, b, out); }},
    {CollectiveAlgorithm::TreeAllReduce, "tree all-reduce", tree_all_reduce_seconds, tree_rounds, tree_round},
    {CollectiveAlgorithm::RingReduceScatter, "ring reduce-scatter",
     [](const Link& l, double b, int n, int) { return ring_pass_seconds(l, b, n, n - 1); },
     [](int n, int) { return n - 1; },
     [](int m, int n, double b, int, int, std::vector<Message>& out) { ring_round(m, n, b, out); }},
    {CollectiveAlgorithm::RingAllGather, "ring all-gather",
     [](const Link& l, double b, int n, int) { return ring_pass_seconds(l, b, n, n - 1); },
     [](int n, int) { return n - 1; },
     [](int m, int n, double b, int, int, std::vector<Message>& out) { ring_round(m, n, b, out); }},
    {CollectiveAlgorithm::AllToAll, "all-to-all", all_to_all_seconds, [](int, int) { return 1; }, all_to_all_round},
};

}  // namespace

const CollectiveEntry& collective(CollectiveAlgorithm algorithm) {
  for (const auto& row : kCollectives) {
    if (row.algorithm == algorithm) return row;
  }
  throw Error("collective algorithm " + std::to_string(static_cast<int>(algorithm)) + " has no row in the table");
}

int bucket_chunks(int chunks, double bucket, double total) {
  return std::max(1, static_cast<int>(std::lround(chunks * bucket / total)));
}

std::vector<GradientBucket> gradient_buckets(double bytes, double cap, double first_cap) {
  if (bytes <= 0) return {};
  if (cap <= 0 || (cap >= bytes && (first_cap <= 0 || first_cap >= bytes))) return {{bytes, 1}};
  std::vector<GradientBucket> out;
  double done = 0;
  if (first_cap > 0 && first_cap < bytes) {
    done = first_cap;
    out.push_back({first_cap, first_cap / bytes});
  }
  const auto n = static_cast<std::size_t>(std::ceil((bytes - done) / cap - 1e-9));
  out.reserve(out.size() + n);
  for (std::size_t i = 0; i < n; ++i) {
    const double b = std::min(cap, bytes - done);
    done += b;
    out.push_back({b, i + 1 == n ? 1.0 : done / bytes});
  }
  return out;
}

double bucketed_reduce_end(const std::vector<GradientBucket>& buckets, double backward_start, double backward_s,
                           const std::function<double(double)>& seconds, double stream_free) {
  double end = std::max(backward_start, stream_free);
  for (const auto& b : buckets) end = std::max(end, backward_start + b.ready * backward_s) + seconds(b.bytes);
  return end;
}

std::string collective_names(const std::vector<Collective>& used) {
  std::string out;
  for (const auto c : {Collective::Ring, Collective::Tree}) {
    if (std::find(used.begin(), used.end(), c) != used.end()) out += (out.empty() ? "" : ", ") + std::string(collective_name(c));
  }
  return out;
}

double prefetched_pass_s(const std::vector<GatheredUnit>& units) {
  double gathered = 0, computed = 0, started = 0;  // the last gather's end, the last compute's end and start
  for (std::size_t u = 0; u < units.size(); ++u) {
    const double issued = u == 0 ? 0 : started;  // one ahead: when the unit before it started computing
    gathered = std::max(issued, gathered) + units[u].gather_s;
    started = std::max(computed, gathered);
    computed = started + units[u].compute_s;
  }
  return computed;
}

}  // namespace pipetwin::models
