// check_in_order_channels(): per (sender, receiver, kind) channel, receives in send order.
#include "schedule/channels.hpp"

#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "schedule/grid.hpp"
#include "schedule/interpreter.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::schedule {

void check_in_order_channels(const Program& p) {
  using Channel = std::tuple<int, int, bool>;
  std::map<Channel, std::vector<Action>> sent;
  for (int r = 0; r < static_cast<int>(p.ranks.size()); ++r) {
    for (const auto& a : p.ranks[r]) {
      if (is_send(a.op)) sent[{r, peer_of(p, a).value, a.op == Op::SEND_F}].push_back(a);
    }
  }
  std::map<Channel, std::size_t> next;
  for (int r = 0; r < static_cast<int>(p.ranks.size()); ++r) {
    for (std::size_t i = 0; i < p.ranks[r].size(); ++i) {
      const Action& a = p.ranks[r][i];
      if (!is_recv(a.op)) continue;
      const Channel ch{peer_of(p, a).value, r, a.op == Op::RECV_F};
      const auto& queue = sent[ch];
      const std::size_t k = next[ch]++;
      const Action want = matching_send(a);
      if (k < queue.size() && queue[k] == want) continue;
      const std::string delivered = k < queue.size() ? to_string(queue[k]) : std::string("nothing");
      throw ScheduleError(RankId{r}, i,
                          to_string(a) + " expects " + to_string(want) + ", but in send order channel rank " +
                              std::to_string(std::get<0>(ch)) + " -> rank " + std::to_string(r) +
                              (std::get<2>(ch) ? " (activations)" : " (gradients)") + " delivers " + delivered +
                              " there (an in-order transport such as NCCL needs each channel received in send order)",
                          format_order_grid(p, {GridMark{RankId{r}, i}}));
    }
  }
}

}  // namespace pipetwin::schedule
