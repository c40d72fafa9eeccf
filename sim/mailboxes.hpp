// Every message's SimGrid mailbox for one replica's pipeline, resolved once
// before the replay (internal to sim/: includes SimGrid).
#pragma once

#include <algorithm>
#include <simgrid/s4u.hpp>
#include <string>
#include <vector>

#include "schedule/interpreter.hpp"

namespace pipetwin::sim {

inline std::string mailbox_name(const schedule::MessageKey& k, int replica) {
  return std::string(k.forward ? "F" : "B") + "/" + std::to_string(k.to_stage.value) + "/" +
         std::to_string(k.microbatch.value) + (replica > 0 ? "/d" + std::to_string(replica) : "");
}

// Every message's mailbox, resolved once before the replay (a lookup by name
// per transfer, with the name built each time, cost about a tenth of the
// replay): index (direction, receiving stage, micro-batch).
class Mailboxes {
 public:
  Mailboxes(const schedule::Program& p, int replica)
      : stages_(p.num_stages()), microbatches_(std::max(1, p.num_microbatches)) {
    boxes_.resize(2 * static_cast<std::size_t>(stages_ + 1) * microbatches_, nullptr);
    for (const auto& rank : p.ranks) {
      for (const auto& a : rank) {
        if (schedule::is_recv(a.op) || schedule::is_send(a.op)) {
          const auto k = schedule::message_of(a);
          auto*& box = boxes_.at(index(k));
          if (!box) box = simgrid::s4u::Mailbox::by_name(mailbox_name(k, replica));
        }
      }
    }
  }
  simgrid::s4u::Mailbox* of(const schedule::Action& a) const { return boxes_.at(index(schedule::message_of(a))); }

 private:
  std::size_t index(const schedule::MessageKey& k) const {
    return (static_cast<std::size_t>(k.forward) * (stages_ + 1) + k.to_stage.value) * microbatches_ + k.microbatch.value;
  }
  int stages_, microbatches_;
  std::vector<simgrid::s4u::Mailbox*> boxes_;
};

}  // namespace pipetwin::sim
