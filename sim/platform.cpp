// build_platform: the topology's links and routes as a SimGrid zone.
#include "sim/platform.hpp"

#include <map>
#include <string>

namespace sg4 = simgrid::s4u;
namespace ps = pipetwin::schedule;

namespace pipetwin::sim {

// The platform, built in code:
//   all-to-all:  devN ==[devA-devB]== devM            (one split-duplex link per pair)
//   pcie-tree:   devN --[devN-swS]-- swS --[swS-host]-- host bridge (routes of 2 or 4 hops)
//   multi-host:  NVLink-like pairs inside a host, [hostH-net] links between hosts
//   cluster:     NVSwitch ports inside a node, NICs and leaf uplinks between nodes
//   shared-host: one host of host_cores cores, a loopback link
// With tensor and data parallelism, one host per group of T devices (replica
// d, pipeline rank k: devices T(d + Dk) ..., Megatron-LM's order), its routes
// the topology's routes between groups (Topology::route_group); only the
// pairs that talk get a route: a replica's pipeline ranks, a stage's data group.
std::vector<sg4::Host*> build_platform(const models::Topology& topo, const ps::Program& p) {
  const int K = p.num_ranks, D = p.data_parallel, T = p.tensor_parallel;
  const int groups = K * D;
  auto* zone = sg4::create_full_zone("pipeline");
  std::vector<sg4::Host*> hosts;
  std::map<std::string, sg4::Link*> links;
  const auto link = [&](const models::Hop& hop) {
    auto [it, fresh] = links.emplace(hop.link, nullptr);
    if (fresh) {
      it->second = zone->create_split_duplex_link(hop.link, hop.spec.bandwidth)->set_latency(hop.spec.latency_s)->seal();
    }
    return it->second;
  };
  if (topo.kind == models::TopologyKind::SharedHost) {
    // Calibrated sharing: one core of the capacity's speed, each rank's exec
    // bounded to one core (SimBackend::compute), so that n ranks computing at
    // once each run at min(1, effective_cores / n) (oversubscribed_cores with
    // more processes than cores).
    const std::int64_t processes = p.num_devices();
    auto* host = topo.calibrated_sharing(processes)
                     ? zone->create_host("host", kSpeed * topo.compute_capacity(processes))->set_core_count(1)->seal()
                     : zone->create_host("host", kSpeed)->set_core_count(topo.host_cores)->seal();
    const auto hops = topo.route(0, 1);
    zone->add_route(host->get_netpoint(), host->get_netpoint(), nullptr, nullptr,
                    {sg4::LinkInRoute(link(hops.front()), sg4::LinkInRoute::Direction::UP)}, false);
    if (topo.collective.bandwidth > 0) {
      // Calibrated collectives: their actors on a host of their own, whose
      // loopback is the collective link: its latency per message, each
      // message at once (FATPIPE); a round's bytes are work on the ranks'
      // cores (sim/collectives.hpp RoundWork).
      auto* coll = zone->create_host(kCollectivesHost, kSpeed)->seal();
      auto* l = zone->create_link("collective", 1e15)
                    ->set_latency(topo.collective.latency_s)
                    ->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE)
                    ->seal();
      zone->add_route(coll->get_netpoint(), coll->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(l)}, false);
    }
    zone->seal();
    return std::vector<sg4::Host*>(groups, host);
  }
  // Group g = d + D k holds devices T g ... T g + T - 1.
  for (int g = 0; g < groups; ++g) {
    hosts.push_back(zone->create_host(T == 1 && D == 1 ? "dev" + std::to_string(g) : "group" + std::to_string(g), kSpeed)
                        ->seal());
  }
  const auto add = [&](int a, int b) {
    const auto hops = topo.route_group(T * a, T * b, T);  // width 1: route(a, b)
    std::vector<sg4::LinkInRoute> route;
    const std::size_t half = hops.size() == 1 ? 1 : hops.size() / 2;  // a's side goes up, b's side down
    for (std::size_t h = 0; h < hops.size(); ++h) {
      route.emplace_back(link(hops[h]), h < half ? sg4::LinkInRoute::Direction::UP : sg4::LinkInRoute::Direction::DOWN);
    }
    zone->add_route(hosts[a]->get_netpoint(), hosts[b]->get_netpoint(), nullptr, nullptr, route, true);
  };
  for (int d = 0; d < D; ++d) {
    for (int a = 0; a < K; ++a) {
      for (int b = a + 1; b < K; ++b) add(d + D * a, d + D * b);
    }
  }
  for (int k = 0; k < K; ++k) {
    for (int a = 0; a < D; ++a) {
      for (int b = a + 1; b < D; ++b) add(a + D * k, b + D * k);
    }
  }
  zone->seal();
  return hosts;
}

}  // namespace pipetwin::sim
