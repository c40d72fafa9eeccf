// Ring and tree collectives as SimGrid mailbox messages.
#include "sim/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <simgrid/s4u.hpp>
#include <vector>

#include "sim/platform.hpp"

namespace sg4 = simgrid::s4u;

namespace pipetwin::sim {
namespace {
int payload = 0;
}  // namespace

void ring(int stage, int replica, int D, int steps, double chunk, const std::string& tag, const RoundWork& work) {
  const auto box = [&](int to, int i) {
    return sg4::Mailbox::by_name(tag + "/" + std::to_string(stage) + "/" + std::to_string(to) + "/" + std::to_string(i));
  };
  const double bytes = work.host != nullptr ? 1.0 : std::max(1.0, std::ceil(chunk));
  for (int i = 0; i < steps; ++i) {
    if (work.host != nullptr && chunk * work.seconds_per_byte > 0) {
      sg4::Exec::init()->set_flops_amount(chunk * work.seconds_per_byte * kSpeed)->set_host(work.host)->set_bound(kSpeed)
          ->start()->wait();
    }
    auto put = box((replica + 1) % D, i)->put_async(&payload, static_cast<uint64_t>(bytes));
    box(replica, i)->get<int>();
    put->wait();
  }
}

void tree(int stage, int replica, int D, int chunks, double bytes, const std::string& tag) {
  const auto size = static_cast<uint64_t>(std::max(1.0, std::ceil(bytes / chunks)));
  // One mailbox per tree edge and phase, named by its child: each edge's
  // chunks go one after the other, so they match in order.
  const auto box = [&](const char* phase, int child) {
    return sg4::Mailbox::by_name(tag + "/" + std::to_string(stage) + "/" + phase + "/" + std::to_string(child));
  };
  std::vector<int> children;
  for (const int c : {2 * replica + 1, 2 * replica + 2}) {
    if (c < D) children.push_back(c);
  }
  std::vector<int*> sinks(children.size());
  // Reduce: chunk k from every child, then chunk k to the parent, with the
  // children's chunk k + 1 already asked for.
  std::vector<sg4::CommPtr> from_children;
  const auto ask_children = [&] {
    from_children.clear();
    for (std::size_t c = 0; c < children.size(); ++c) from_children.push_back(box("up", children[c])->get_async<int>(&sinks[c]));
  };
  ask_children();
  for (int k = 0; k < chunks; ++k) {
    sg4::Comm::wait_all(from_children);
    if (k + 1 < chunks) ask_children();
    if (replica > 0) box("up", replica)->put(&payload, size);
  }
  // Broadcast: chunk k from the parent (chunk k + 1 asked for at once), then to every child.
  int* sink = nullptr;
  sg4::CommPtr from_parent = replica > 0 ? box("down", replica)->get_async<int>(&sink) : nullptr;
  for (int k = 0; k < chunks; ++k) {
    if (from_parent) {
      from_parent->wait();
      from_parent = k + 1 < chunks ? box("down", replica)->get_async<int>(&sink) : nullptr;
    }
    std::vector<sg4::CommPtr> to_children;
    for (const int c : children) to_children.push_back(box("down", c)->put_async(&payload, size));
    sg4::Comm::wait_all(to_children);
  }
}

}  // namespace pipetwin::sim
