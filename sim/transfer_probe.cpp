// simulate_one_transfer: a two-host platform built in code.
//
//   host0 ==[ link: latency, bandwidth, split-duplex ]== host1
#include "sim/transfer_probe.hpp"

#include <simgrid/s4u.hpp>
#include <simgrid/version.h>
#include <xbt/log.h>

namespace sg4 = simgrid::s4u;

namespace pipetwin::sim {

double simulate_one_transfer(double bytes, double bandwidth_Bps, double latency_s) {
  xbt_log_control_set("root.thres:critical");
  int argc = 1;
  char name[] = "pipetwin";
  char* argv[] = {name, nullptr};
  sg4::Engine engine(&argc, argv);
  engine.set_config("network/model:CM02");
  engine.set_config("network/TCP-gamma:0");
  engine.set_config("network/crosstraffic:0");

  auto* zone = sg4::create_full_zone("zone");
  auto* h0 = zone->create_host("host0", 1e9);
  auto* h1 = zone->create_host("host1", 1e9);
  auto* link = zone->create_split_duplex_link("link", bandwidth_Bps)->set_latency(latency_s)->seal();
  zone->add_route(h0->get_netpoint(), h1->get_netpoint(), nullptr, nullptr,
                  {sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)}, true);
  zone->seal();

  double arrival = -1;
  sg4::Actor::create("sender", h0, [bytes] {
    static int payload = 0;
    sg4::Mailbox::by_name("box")->put(&payload, static_cast<uint64_t>(bytes));
  });
  sg4::Actor::create("receiver", h1, [&arrival] {
    sg4::Mailbox::by_name("box")->get<int>();
    arrival = sg4::Engine::get_clock();
  });
  engine.run();
  return arrival;
}

std::string simgrid_version() {
  int major = 0, minor = 0, patch = 0;
  sg_version_get(&major, &minor, &patch);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

}  // namespace pipetwin::sim
