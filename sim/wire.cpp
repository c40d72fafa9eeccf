// The timeline's wire format (sim/wire.hpp).
#include "sim/wire.hpp"

#include <cstdint>

namespace ps = pipetwin::schedule;

namespace pipetwin::sim {

// Beside the op: the action is overlapped (Action::overlapped).
constexpr int32_t kOverlappedBit = 1 << 16;

std::string encode(const ps::Timeline& t) {
  std::string out;
  put<uint64_t>(out, t.ranks.size());
  for (const auto& rank : t.ranks) {
    put<uint64_t>(out, rank.size());
    for (const auto& a : rank) {
      put<int32_t>(out, static_cast<int32_t>(a.action.op) | (a.action.overlapped ? kOverlappedBit : 0));
      put<int32_t>(out, a.action.stage.value);
      put<int32_t>(out, a.action.microbatch ? a.action.microbatch->value : -1);
      put<double>(out, a.start);
      put<double>(out, a.end);
    }
  }
  return out;
}

ps::Timeline decode(const std::string& in) {
  std::size_t pos = 0;
  ps::Timeline t;
  t.ranks.resize(take<uint64_t>(in, pos));
  for (auto& rank : t.ranks) {
    rank.resize(take<uint64_t>(in, pos));
    for (auto& a : rank) {
      const int32_t op = take<int32_t>(in, pos);
      a.action.op = static_cast<ps::Op>(op & ~kOverlappedBit);
      a.action.overlapped = (op & kOverlappedBit) != 0;
      a.action.stage = ps::StageId{take<int32_t>(in, pos)};
      const int mb = take<int32_t>(in, pos);
      if (mb >= 0) a.action.microbatch = ps::MicrobatchId{mb};
      a.start = take<double>(in, pos);
      a.end = take<double>(in, pos);
    }
  }
  return t;
}

}  // namespace pipetwin::sim
