// All-reduce closed forms (ring, tree) and the choice between them.
#include "models/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "schedule/error.hpp"
#include "schedule/names.hpp"

namespace pipetwin::models {

namespace {
constexpr schedule::NameTable<Collective, 3> kCollectives{
    "collective algorithm", {{{Collective::Auto, "auto"}, {Collective::Ring, "ring"}, {Collective::Tree, "tree"}}}};
}  // namespace

std::string_view collective_name(Collective c) { return kCollectives.name(c); }
Collective parse_collective(std::string_view name) { return kCollectives.parse(name); }
const std::vector<std::string>& collective_algorithm_names() {
  static const auto names = kCollectives.names();
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
  // A shared host's collectives, calibrated: their own step rate.
  if (topology.kind == TopologyKind::SharedHost && topology.collective.bandwidth > 0) return topology.collective;
  const int first = width * replicas * rank;
  Link worst{0, 0};
  for (int d = 1; d < replicas; ++d) {
    const Link l = topology.path_group(first, width * (d + replicas * rank), width);
    worst.latency_s = std::max(worst.latency_s, l.latency_s);
    worst.bandwidth = worst.bandwidth == 0 ? l.bandwidth : std::min(worst.bandwidth, l.bandwidth);
  }
  if (worst.bandwidth == 0) worst.bandwidth = 1e300;  // one replica: nothing crosses
  return worst;
}

std::string collective_names(const std::vector<Collective>& used) {
  std::string out;
  for (const auto c : {Collective::Ring, Collective::Tree}) {
    if (std::find(used.begin(), used.end(), c) != used.end()) out += (out.empty() ? "" : ", ") + std::string(collective_name(c));
  }
  return out;
}

}  // namespace pipetwin::models
