// Ring collectives as SimGrid mailbox messages.
#include "sim/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <simgrid/s4u.hpp>

namespace sg4 = simgrid::s4u;

namespace pipetwin::sim {
namespace {
int payload = 0;
}  // namespace

void ring(int stage, int replica, int D, int steps, double chunk, const std::string& tag) {
  const auto box = [&](int to, int i) {
    return sg4::Mailbox::by_name(tag + "/" + std::to_string(stage) + "/" + std::to_string(to) + "/" + std::to_string(i));
  };
  for (int i = 0; i < steps; ++i) {
    auto put = box((replica + 1) % D, i)->put_async(&payload, static_cast<uint64_t>(std::max(1.0, std::ceil(chunk))));
    box(replica, i)->get<int>();
    put->wait();
  }
}

}  // namespace pipetwin::sim
