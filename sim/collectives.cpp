// run_collective: a row of the collectives' table as SimGrid mailbox messages.
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

void run_collective(const models::CollectiveEntry& entry, const std::string& tag, int group, int member, int members,
                    double bytes, int chunks, const RoundWork& work) {
  using Way = models::Message::Way;
  if (members <= 1) return;
  const std::string prefix = tag + "/" + std::to_string(group) + "/";
  const auto box = [&](int from, int to) { return sg4::Mailbox::by_name(prefix + std::to_string(from) + ">" + std::to_string(to)); };
  std::vector<models::Message> round;
  std::vector<int*> sinks;
  std::vector<sg4::CommPtr> posted;
  const int rounds = entry.rounds(members, chunks);
  for (int r = 0; r < rounds; ++r) {
    round.clear();
    entry.round(member, members, bytes, chunks, r, round);
    if (round.empty()) continue;
    if (work.host != nullptr) {
      double sent = 0;
      for (const auto& m : round) sent += m.way == Way::Send ? m.bytes : 0;
      if (sent * work.seconds_per_byte > 0) {
        sg4::Exec::init()->set_flops_amount(sent * work.seconds_per_byte * kSpeed)->set_host(work.host)->set_bound(kSpeed)
            ->start()->wait();
      }
    }
    sinks.assign(round.size(), nullptr);
    posted.clear();
    for (std::size_t i = 0; i < round.size(); ++i) {
      const auto& m = round[i];
      if (m.way == Way::Send) {
        const double size = work.host != nullptr ? 1.0 : std::max(1.0, std::ceil(m.bytes));
        posted.push_back(box(member, m.peer)->put_async(&payload, static_cast<uint64_t>(size)));
      } else {
        posted.push_back(box(m.peer, member)->get_async<int>(&sinks[i]));
      }
    }
    // The later way's run first, each run in its order.
    for (std::size_t end = round.size(); end > 0;) {
      std::size_t begin = end - 1;
      while (begin > 0 && round[begin - 1].way == round[end - 1].way) --begin;
      for (std::size_t i = begin; i < end; ++i) posted[i]->wait();
      end = begin;
    }
  }
}

}  // namespace pipetwin::sim
