// Routes through a topology: the hops between two devices or two
// tensor-parallel groups, and the ring collectives inside a group.
#include <algorithm>
#include <string>
#include <vector>

#include "models/topology.hpp"
#include "schedule/error.hpp"

namespace pipetwin::models {

std::string_view topology_name(TopologyKind kind) {
  switch (kind) {
    case TopologyKind::AllToAll: return "all-to-all";
    case TopologyKind::PcieTree: return "pcie-tree";
    case TopologyKind::MultiHost: return "multi-host";
    case TopologyKind::SharedHost: return "shared-host";
    case TopologyKind::Cluster: return "cluster";
  }
  return "?";
}

std::string_view network_name(Network network) {
  switch (network) {
    case Network::FatTree: return "fat-tree";
    case Network::Rail: return "rail";
  }
  return "?";
}

namespace {

// "3" for one device (or NIC, or rail), "0-7" for a span of them.
std::string span(int first, int last) {
  return first == last ? std::to_string(first) : std::to_string(first) + "-" + std::to_string(last);
}

// The route between the spans of `w` GPUs starting at a and at b (w = 1: two
// GPUs) on a cluster (the model in hardware.hpp); stream t runs a + t -> b + t.
std::vector<Hop> cluster_route(const Topology& t, int a, int b, int w) {
  const int g = t.devices_per_host, n = t.nics_per_host;
  if (n < 1 || g % n != 0) {
    throw Error("cluster topology: nics_per_host (" + std::to_string(n) + ") must divide devices_per_host (" +
                std::to_string(g) + ")");
  }
  const int na = a / g, nb = b / g, la = a % g, lb = b % g;
  const auto node = [](int i) { return "n" + std::to_string(i); };
  if (na == nb) {  // through the NVSwitch: each span's w ports
    const Link ports{t.intra.latency_s, t.intra.bandwidth * w};
    return {{node(na) + "-gpu" + span(la, la + w - 1) + "-nvsw", ports},
            {node(nb) + "-gpu" + span(lb, lb + w - 1) + "-nvsw", ports}};
  }
  // Local GPU l sends through NIC l·N/G: a span's NICs are i..j.
  const int ia = la * n / g, ja = (la + w - 1) * n / g, ib = lb * n / g, jb = (lb + w - 1) * n / g;
  const auto nic = [&](int at, int i, int j) {
    return Hop{node(at) + "-nic" + span(i, j), {t.inter.latency_s, t.inter.bandwidth * (j - i + 1)}};
  };
  const int pa = na / t.nodes_per_leaf, pb = nb / t.nodes_per_leaf;
  // Rail: NIC i reaches NIC i of its pod through rail switch i alone; spans on
  // the same NICs (ia = ib) keep every stream on its rail.
  if (pa == pb && (t.network == Network::FatTree || ia == ib)) return {nic(na, ia, ja), nic(nb, ib, jb)};
  const double per_node = t.inter.bandwidth * t.nodes_per_leaf / t.oversubscription;  // one rail's uplink
  const auto uplink = [&](int pod, int i, int j) -> Hop {
    const std::string leaf = "leaf" + std::to_string(pod);
    if (t.network == Network::FatTree) return {leaf + "-up", {0, per_node * n}};
    return {leaf + "-rail" + span(i, j) + "-up", {0, per_node * (j - i + 1)}};
  };
  return {nic(na, ia, ja), uplink(pa, ia, ja), uplink(pb, ib, jb), nic(nb, ib, jb)};
}

// Groups of `width` devices fit the topology; throws otherwise.
void check_group_width(const Topology& t, int width) {
  if (width < 1) throw Error("tensor-parallel groups need at least 1 device, got " + std::to_string(width));
  if (width == 1) return;
  if (t.kind == TopologyKind::Cluster) {
    if (t.devices_per_host % width != 0) {
      throw Error("tensor-parallel groups of " + std::to_string(width) + " GPUs do not divide a node's " +
                  std::to_string(t.devices_per_host) + " GPUs (devices_per_host): a group must stay inside a node");
    }
  } else if (t.kind != TopologyKind::AllToAll && t.kind != TopologyKind::SharedHost) {
    throw Error("tensor parallelism (groups of " + std::to_string(width) +
                " devices) needs a `cluster`, an `all-to-all` or a `shared-host` topology, not " +
                std::string(topology_name(t.kind)));
  }
}

}  // namespace

std::vector<Hop> Topology::route_group(int a, int b, int width) const {
  check_group_width(*this, width);
  if (width == 1) return route(a, b);
  for (const int d : {a, b}) {
    if (d < 0 || d % width != 0) {
      throw Error("device " + std::to_string(d) + " is not the first of a tensor-parallel group of " +
                  std::to_string(width));
    }
  }
  if (a == b) return {};
  if (kind == TopologyKind::Cluster) return cluster_route(*this, a, b, width);
  // A shared host: every process's stream on the loopback, as one rank's.
  if (kind == TopologyKind::SharedHost) return route(a, b);
  // All-to-all: the w pair links (a + t, b + t) as one.
  const auto group = [&](int d) { return "dev" + span(d, d + width - 1); };
  return {{group(std::min(a, b)) + "-" + group(std::max(a, b)), {intra.latency_s, intra.bandwidth * width}}};
}

Link Topology::group_ring_link(int width) const {
  check_group_width(*this, width);
  if (kind == TopologyKind::Cluster) return {2 * intra.latency_s, intra.bandwidth};
  // A shared host: its calibrated collectives' rounds (Gloo's ring), else the loopback.
  if (kind == TopologyKind::SharedHost && tensor_collective.bandwidth > 0) return tensor_collective;
  if (kind == TopologyKind::SharedHost && collective.bandwidth > 0) return collective;
  return intra;
}

double Topology::ring_all_reduce_seconds(double bytes, int width) const {
  return 2 * ring_all_gather_seconds(bytes, width);
}

double Topology::ring_all_gather_seconds(double bytes, int width) const {
  const Link step = group_ring_link(width);
  if (width == 1) return 0;
  return (width - 1) * (step.latency_s + bytes / (width * step.bandwidth));
}

int Topology::nodes_for(int devices) const { return (devices + devices_per_host - 1) / devices_per_host; }

std::vector<Hop> Topology::route(int a, int b) const {
  const auto dev = [](int d) { return "dev" + std::to_string(d); };
  if (a == b) return {};
  switch (kind) {
    case TopologyKind::AllToAll:
      return {{dev(std::min(a, b)) + "-" + dev(std::max(a, b)), intra}};
    case TopologyKind::PcieTree: {
      const int sa = a / devices_per_switch, sb = b / devices_per_switch;
      const auto up = [&](int d, int s) { return Hop{dev(d) + "-sw" + std::to_string(s), intra}; };
      if (sa == sb) return {up(a, sa), up(b, sb)};
      return {up(a, sa), {"sw" + std::to_string(sa) + "-host", bridge}, {"sw" + std::to_string(sb) + "-host", bridge},
              up(b, sb)};
    }
    case TopologyKind::SharedHost:
      return {{"loopback", intra}};
    case TopologyKind::MultiHost: {
      const int ha = a / devices_per_host, hb = b / devices_per_host;
      if (ha == hb) return {{dev(std::min(a, b)) + "-" + dev(std::max(a, b)), intra}};
      return {{"host" + std::to_string(ha) + "-net", inter}, {"host" + std::to_string(hb) + "-net", inter}};
    }
    case TopologyKind::Cluster:
      return cluster_route(*this, a, b, 1);
  }
  return {};
}

namespace {

// A route as one link: latencies add up, the narrowest hop sets the bandwidth.
Link as_one_link(const std::vector<Hop>& hops) {
  Link total{0, 0};
  for (const auto& hop : hops) {
    total.latency_s += hop.spec.latency_s;
    total.bandwidth = total.bandwidth == 0 ? hop.spec.bandwidth : std::min(total.bandwidth, hop.spec.bandwidth);
  }
  if (total.bandwidth == 0) total.bandwidth = 1e300;  // same device or group: no transfer cost
  return total;
}

}  // namespace

Link Topology::path_group(int a, int b, int width) const { return as_one_link(route_group(a, b, width)); }

Link Topology::path(int a, int b) const { return as_one_link(route(a, b)); }

}  // namespace pipetwin::models
