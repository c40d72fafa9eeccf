// The collectives' table (models/collectives.hpp): every algorithm has its
// row, whose closed form is the algorithm's, and whose message pattern sends
// what it says: each member's sends are received by their peers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "models/collectives.hpp"

namespace pm = pipetwin::models;
using A = pipetwin::schedule::CollectiveAlgorithm;
using Way = pm::Message::Way;

namespace {

const std::vector<A> kAll = {A::RingAllReduce, A::TreeAllReduce, A::RingReduceScatter, A::RingAllGather, A::AllToAll};

// Every member's messages: (from, to) of each send, and of each receive.
using Pairs = std::vector<std::pair<int, int>>;
void messages(const pm::CollectiveEntry& row, int n, double bytes, int chunks, Pairs& sends, Pairs& receives,
              double& bytes_sent) {
  std::vector<pm::Message> round;
  for (int m = 0; m < n; ++m) {
    for (int r = 0; r < row.rounds(n, chunks); ++r) {
      round.clear();
      row.round(m, n, bytes, chunks, r, round);
      for (const auto& msg : round) {
        EXPECT_NE(msg.peer, m);
        EXPECT_TRUE(msg.peer >= 0 && msg.peer < n);
        if (msg.way == Way::Send) {
          sends.emplace_back(m, msg.peer);
          bytes_sent += msg.bytes;
        } else {
          receives.emplace_back(msg.peer, m);
        }
      }
    }
  }
  std::sort(sends.begin(), sends.end());
  std::sort(receives.begin(), receives.end());
}

}  // namespace

TEST(Collectives, EveryAlgorithmHasItsRow) {
  for (const A a : kAll) {
    EXPECT_EQ(pm::collective(a).algorithm, a);
    EXPECT_FALSE(pm::collective(a).name.empty());
  }
  const pm::Link link{4e-6, 20e9};
  // The rings: their rounds of latency + ⌈bytes / n⌉ / bandwidth.
  EXPECT_DOUBLE_EQ(pm::collective(A::RingAllReduce).seconds(link, 8e6, 4, 1), pm::ring_all_reduce_seconds(link, 8e6, 4));
  EXPECT_DOUBLE_EQ(pm::collective(A::RingAllReduce).seconds(link, 8e6, 4, 1), 6 * (4e-6 + 2e6 / 20e9));
  EXPECT_DOUBLE_EQ(pm::collective(A::RingReduceScatter).seconds(link, 8e6, 4, 1), 3 * (4e-6 + 2e6 / 20e9));
  EXPECT_DOUBLE_EQ(pm::collective(A::RingAllGather).seconds(link, 8e6, 4, 1), 3 * (4e-6 + 2e6 / 20e9));
  EXPECT_DOUBLE_EQ(pm::collective(A::TreeAllReduce).seconds(link, 8e6, 5, 4), pm::tree_all_reduce_seconds(link, 8e6, 5, 4));
  for (const A a : kAll) EXPECT_EQ(pm::collective(a).seconds(link, 8e6, 1, 1), 0);
}

// Whatever the row, the members' sends are their peers' receives (a pair's
// messages match in order), and the ring all-reduce sends 2(n-1) · bytes / n per
// member, the tree each chunk once up and once down every edge.
TEST(Collectives, EachRowsSendsAreItsPeersReceives) {
  for (const A a : kAll) {
    for (const int n : {2, 3, 5, 8}) {
      Pairs sends, receives;
      double sent = 0;
      messages(pm::collective(a), n, 1e6, 4, sends, receives, sent);
      EXPECT_EQ(sends, receives) << pm::collective(a).name << " n=" << n;
      const double want = a == A::RingAllReduce   ? n * 2.0 * (n - 1) * 1e6 / n
                          : a == A::TreeAllReduce ? 2.0 * (n - 1) * 1e6
                          : a == A::AllToAll      ? n * (n - 1) * (1e6 / n)
                                                  : n * (n - 1.0) * 1e6 / n;
      EXPECT_NEAR(sent, want, 1e-6) << pm::collective(a).name << " n=" << n;
    }
  }
}

// All-to-all over n members, each with one port {latency, bandwidth} into a
// non-blocking switch: each member sends ⌈bytes / n⌉ to each of the n - 1
// others at once through its port:
//   latency + (n - 1) · ⌈bytes / n⌉ / bandwidth.
TEST(Collectives, AllToAllIsOneLatencyAndTheBytesThatLeaveEachMember) {
  const pm::Link port{3e-6, 25e9};
  const auto& row = pm::collective(A::AllToAll);
  EXPECT_EQ(row.name, "all-to-all");
  // 8 members of 64 MB: 7 parts of 8 MB through each port at 25 GB/s, 2.24 ms, and one latency.
  EXPECT_DOUBLE_EQ(row.seconds(port, 64e6, 8, 1), 3e-6 + 7 * 8e6 / 25e9);
  EXPECT_NEAR(row.seconds(port, 64e6, 8, 1), 2.243e-3, 1e-15);
  // 10 bytes over 4 members: parts of 3 bytes (whole bytes, as the replay's messages).
  EXPECT_DOUBLE_EQ(row.seconds(port, 10, 4, 1), 3e-6 + 3 * 3 / 25e9);
  EXPECT_EQ(row.seconds(port, 64e6, 1, 1), 0);
  // The bandwidth term is (n-1)/n of the message: half of it over 2, nearly all of it over 64.
  for (const int n : {2, 4, 16, 64}) {
    EXPECT_NEAR(row.seconds(port, 64e6, n, 1) - port.latency_s, (n - 1.0) / n * 64e6 / 25e9, 1e-15) << n;
  }
  EXPECT_LT(row.seconds(port, 64e6, 8, 1), pm::ring_all_reduce_seconds(port, 64e6, 8));
}

// One round: each member receives from and sends bytes / n to every other
// member, each peer once.
TEST(Collectives, AllToAllIsOneRoundBetweenEveryPair) {
  const auto& row = pm::collective(A::AllToAll);
  const int n = 5;
  EXPECT_EQ(row.rounds(n, 1), 1);
  for (int m = 0; m < n; ++m) {
    std::vector<pm::Message> round;
    row.round(m, n, 1e6, 1, 0, round);
    std::vector<int> to, from;
    for (const auto& msg : round) {
      (msg.way == Way::Send ? to : from).push_back(msg.peer);
      if (msg.way == Way::Send) EXPECT_DOUBLE_EQ(msg.bytes, 2e5);
    }
    std::sort(to.begin(), to.end());
    std::sort(from.begin(), from.end());
    std::vector<int> others;
    for (int p = 0; p < n; ++p) {
      if (p != m) others.push_back(p);
    }
    EXPECT_EQ(to, others) << m;
    EXPECT_EQ(from, others) << m;
  }
}
