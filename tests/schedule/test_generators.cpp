// Every generator x K in 1..8 x M in 1..16 (x V in {2,3} for interleaved,
// V = 2 for zb-v): valid, the dry run takes the analytic number of steps, the
// stash peaks are the analytic ones, and every file format round-trips. Then
// literal schedules (zb-v's as PyTorch prints it) and refused shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "schedule/channels.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/memory.hpp"
#include "schedule/validate.hpp"

namespace ps = pipetwin::schedule;

namespace {

struct Shape {
  std::string name;
  int K, M, V;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.name << " K=" << s.K << " M=" << s.M << " V=" << s.V;
}

std::vector<Shape> all_shapes() {
  std::vector<Shape> shapes;
  for (const auto& g : ps::generators()) {
    for (int K = 1; K <= 8; ++K) {
      for (int M = 1; M <= 16; ++M) {
        if (g.name == "dualpipe-v" && M < 2 * K) continue;  // refused, as PyTorch does (DualPipeV below)
        if (!g.virtual_stages) {
          shapes.push_back({std::string(g.name), K, M, std::max(1, g.fixed_stages_per_rank)});
          continue;
        }
        // PyTorch's flexible interleaving: M a multiple of its rounds max(1, M / K).
        if (g.name != "looped-bfs" && M % std::max(1, M / K) != 0) continue;
        for (int V : {2, 3}) shapes.push_back({std::string(g.name), K, M, V});
      }
    }
  }
  return shapes;
}

class EveryShape : public ::testing::TestWithParam<Shape> {
 protected:
  ps::Program program() const {
    const auto& s = GetParam();
    return ps::build_schedule(s.name, {s.K, s.M, s.V, ps::RecomputePolicy::None});
  }
};

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  std::string n = info.param.name + "_K" + std::to_string(info.param.K) + "_M" + std::to_string(info.param.M) +
                  "_V" + std::to_string(info.param.V);
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

}  // namespace

TEST_P(EveryShape, IsValidAndMakesProgress) {
  const auto report = ps::validate(program());
  EXPECT_FALSE(report.dry_run.deadlocked());
  EXPECT_FALSE(report.lowered);  // build_schedule already lowered it
  EXPECT_EQ(report.program, program());
}

TEST_P(EveryShape, DryRunTakesTheAnalyticNumberOfSteps) {
  const auto& s = GetParam();
  const auto run = ps::dry_run(program());
  const double steps = run.timeline.makespan();
  const int K = s.K, M = s.M, V = s.V;
  // The one-pass list is each rank's idle_fraction, bit for bit.
  const auto idle = run.timeline.idle_fractions();
  ASSERT_EQ(idle.size(), run.timeline.ranks.size());
  for (int r = 0; r < static_cast<int>(idle.size()); ++r) EXPECT_EQ(idle[r], run.timeline.idle_fraction(ps::RankId{r}));
  if (s.name == "gpipe" || s.name == "1f1b" || s.name == "pipedream") {
    EXPECT_DOUBLE_EQ(steps, 2.0 * (M + K - 1));
    // Idle share of every rank, and so the bubble: (K-1)/(M+K-1) with F = B.
    const double analytic = static_cast<double>(K - 1) / (M + K - 1);
    for (int r = 0; r < K; ++r) EXPECT_NEAR(run.timeline.idle_fraction(ps::RankId{r}), analytic, 1e-12);
    EXPECT_NEAR(run.timeline.bubble_fraction(), analytic, 1e-12);
  } else if (s.name == "zb-h1") {
    // F = I = W = 1: 3M + K - 1 once M >= K (bubble (K-1)(F+I-W)); never worse than 1F1B's 3(M+K-1).
    if (M >= K) {
      EXPECT_DOUBLE_EQ(steps, 3.0 * M + K - 1);
    }
    EXPECT_LE(steps, 3.0 * (M + K - 1));
  } else if (s.name == "zb-h2") {
    // F = I = W = 1, M >= 2K-1: Figure 3 (bottom)'s parallelogram, rank r busy
    // without a gap from r to 3M + r, so 3M + K - 1 steps with K - 1 idle on
    // every rank (as zb-h1's one step). Fewer micro-batches: never worse than 1F1B.
    if (M >= 2 * K - 1) {
      EXPECT_DOUBLE_EQ(steps, 3.0 * M + K - 1);
      for (int r = 0; r < K; ++r) EXPECT_NEAR(run.timeline.idle_fraction(ps::RankId{r}), (K - 1.0) / (3 * M + K - 1), 1e-12);
    }
    EXPECT_LE(steps, 3.0 * (M + K - 1));
  } else if (s.name == "interleaved-1f1b") {
    // Megatron: the bubble shrinks by V; with every chunk op 1 step: 2(VM + K - 1)
    // when M is a multiple of K. PyTorch's relaxed rule runs M < K micro-batches
    // as if each chunk had K: 2(VK + M - 1). Otherwise no faster than the first.
    if (M % K == 0) {
      EXPECT_DOUBLE_EQ(steps, 2.0 * (V * M + K - 1));
    } else if (M < K) {
      EXPECT_DOUBLE_EQ(steps, 2.0 * (V * K + M - 1));
    } else {
      EXPECT_GE(steps, 2.0 * (V * M + K - 1));
    }
  } else if (s.name == "combined-1f1b") {
    // With an OVERLAP_F_B its two halves in turn (nothing hidden), the one
    // more warm-up forward costs no step: interleaved-1f1b's (counted, not derived).
    EXPECT_DOUBLE_EQ(steps, ps::dry_run(ps::build_schedule("interleaved-1f1b", {K, M, V})).timeline.makespan());
  } else if (s.name == "zb-v") {
    // F = I = W = 1 on each of the 2 stages of a rank (6M busy steps): K-1
    // idle steps once 2M >= 3K-1, as `schedule --list` states it (measured
    // here, not derived).
    const double expected = std::max(6.0 * M + K - 1, 4.0 * M + 4.0 * K - 2);
    EXPECT_DOUBLE_EQ(steps, expected);
    for (int r = 0; r < K; ++r) EXPECT_NEAR(run.timeline.idle_fraction(ps::RankId{r}), 1 - 6.0 * M / expected, 1e-12);
  } else if (s.name == "dualpipe-v") {
    // Every compute action 1 step (an OVERLAP_F_B its two halves in turn, its
    // sends after both, as PyTorch lowers one): 4M + 3K - 2 for M >= 2K, as
    // `schedule --list` states it (counted here, not derived). With each
    // half's send right after it, it was 4M + 2K - 1.
    EXPECT_DOUBLE_EQ(steps, 4.0 * M + 3 * K - 2);
  } else if (s.name == "v-half" || s.name == "v-min") {
    // F = I = W = 1 on each stage (6M busy steps a rank): the idle steps
    // `schedule --list` states once M >= K+2 (counted, not derived), and
    // never fewer than a rank's own work.
    const int idle = s.name == "v-min" ? (K == 1 ? 0 : 4 * K - 5 - (K % 3 == 0 ? 2 : 0))
                                       : (K == 1 ? 0 : K == 2 ? 1 : K % 2 == 1 ? 3 * K - 4 : 3 * K - 7);
    if (M >= K + 2) {
      EXPECT_DOUBLE_EQ(steps, 6.0 * M + idle);
    }
    EXPECT_GE(steps, 6.0 * M);
  }
}

TEST_P(EveryShape, PeakStashIsAnalytic) {
  const auto& s = GetParam();
  const auto memory = ps::account_memory(program());
  int overall = 0;
  for (const auto& m : memory) {
    const int stage = m.stage.value;
    overall = std::max(overall, m.peak_activations);
    EXPECT_EQ(m.peak_inputs, 0);
    if (s.name == "gpipe") {
      EXPECT_EQ(m.peak_activations, s.M) << "stage " << stage;
    }
    if (s.name == "1f1b" || s.name == "pipedream") {
      EXPECT_EQ(m.peak_activations, std::min(s.K - stage, s.M)) << "stage " << stage;
    }
    if (s.name == "zb-h1") {  // as `schedule --list` states it
      EXPECT_EQ(m.peak_activations, std::min(s.K, s.M)) << "stage " << stage;
    }
    if (s.name == "zb-h2") {  // as `schedule --list` states it: 2K-1 on every stage, the paper's (2p-1) on stage 0
      EXPECT_EQ(m.peak_activations, std::min(2 * s.K - 1, s.M)) << "stage " << stage;
    }
    if (s.name == "combined-1f1b") {  // the extra warm-up forward: at most one micro-batch more than interleaved-1f1b
      const auto plain = ps::account_memory(ps::build_schedule("interleaved-1f1b", {s.K, s.M, s.V}));
      EXPECT_GE(m.peak_activations, plain.at(stage).peak_activations) << "stage " << stage;
      EXPECT_LE(m.peak_activations, plain.at(stage).peak_activations + 1) << "stage " << stage;
    }
    if (s.name == "dualpipe-v") {  // as `schedule --list` states it: 2K down to 1 along the V (M >= 2K)
      EXPECT_EQ(m.peak_activations, 2 * s.K - stage) << "stage " << stage;
    }
    if (s.name == "zb-v") {  // as `schedule --list` states it: 2K down to 1 along the V
      EXPECT_EQ(m.peak_activations, std::min(2 * s.K - stage, s.M)) << "stage " << stage;
    }
    if (s.name == "pipedream") {
      // One version per in-flight mini-batch once the window is in steady state.
      EXPECT_LE(m.weight_versions, s.K - stage) << "stage " << stage;
      if (s.M >= 2 * s.K - 2) {
        EXPECT_EQ(m.weight_versions, s.K - stage) << "stage " << stage;
      }
    }
    if (s.name != "pipedream") {
      EXPECT_EQ(m.weight_versions, 1);
    }
  }
  // V-Half and V-Min: a rank's two stages together, at once, as the paper
  // counts them (a forward stashes, its W frees), peak at 2 min(M, (K+2)/2)
  // and 2 min(M, (K+4)/3) stage micro-batches on the busiest rank, none above.
  if (s.name == "v-half" || s.name == "v-min") {
    const int bound = 2 * std::min(s.M, s.name == "v-half" ? (s.K + 2) / 2 : (s.K + 4) / 3);
    const auto p = program();
    int busiest = 0;
    for (const auto& rank : p.ranks) {
      int now = 0, peak = 0;
      for (const auto& a : rank) {
        now += a.op == ps::Op::F ? 1 : a.op == ps::Op::W ? -1 : 0;
        peak = std::max(peak, now);
      }
      EXPECT_LE(peak, bound);
      busiest = std::max(busiest, peak);
    }
    EXPECT_EQ(busiest, bound);
  }
  // ZB-H1 keeps 1F1B's largest stash over the pipeline.
  if (s.name == "zb-h1") {
    EXPECT_EQ(overall, std::min(s.K, s.M));
  }
}

TEST_P(EveryShape, GeneratorWeightVersionsMatchTheAccounting) {
  const auto p = program();
  const auto memory = ps::account_memory(p);
  for (const auto& m : memory) EXPECT_EQ(p.weight_versions[m.stage.value], m.weight_versions);
}

// An in-order transport (NCCL pairs a channel's messages in the order they
// are issued) can run every generator's Program: on each (sender, receiver)
// channel the receives come in send order.
TEST_P(EveryShape, EveryChannelIsReceivedInSendOrder) {
  EXPECT_NO_THROW(ps::check_in_order_channels(program()));
}

TEST_P(EveryShape, EveryFormatRoundTrips) {
  const auto p = program();
  EXPECT_EQ(ps::parse_text(ps::to_text(p), "mem.txt"), p);
  EXPECT_EQ(ps::parse_json(ps::to_json(p), "mem.json"), p);
  // CSV carries no header: shape, map and policy are inferred; the name is not kept.
  auto from_csv = ps::parse_csv(ps::to_csv(p), "mem.csv");
  from_csv.schedule = p.schedule;
  from_csv.weight_versions = p.weight_versions;
  EXPECT_EQ(from_csv, p);
}

INSTANTIATE_TEST_SUITE_P(AllGenerators, EveryShape, ::testing::ValuesIn(all_shapes()), shape_name);

// The whole of GPipe for K=3, M=4, as the literal fill-drain diagonal.
TEST(GPipe, LiteralSchedule) {
  const auto run = ps::dry_run(ps::generate("gpipe", {3, 4}));
  std::vector<std::string> cells;
  for (int r = 0; r < 3; ++r) {
    std::string row;
    for (const auto& t : run.timeline.ranks[r]) {
      if (ps::is_compute(t.action.op)) row += std::to_string(static_cast<int>(t.start)) + ":" + ps::to_string(t.action) + " ";
    }
    cells.push_back(row);
  }
  EXPECT_EQ(cells[0], "0:0F0 1:0F1 2:0F2 3:0F3 8:0B0 9:0B1 10:0B2 11:0B3 ");
  EXPECT_EQ(cells[1], "1:1F0 2:1F1 3:1F2 4:1F3 7:1B0 8:1B1 9:1B2 10:1B3 ");
  EXPECT_EQ(cells[2], "2:2F0 3:2F1 4:2F2 5:2F3 6:2B0 7:2B1 8:2B2 9:2B3 ");
}

// A channel received out of its send order is refused naming the receiving
// rank, its step and what the channel delivers there; the same receives in
// the other channel kind's group do not collide.
TEST(Channels, OutOfOrderReceivesAreRefusedNamingTheRankAndStep) {
  const auto p = ps::parse_text(
      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B1 0B1 0RECV_B0 0B0\n"
      "rank 1: 1RECV_F1 1F1 1RECV_F0 1F0 1B1 1SEND_B1 1B0 1SEND_B0\n",
      "swapped.txt");
  try {
    ps::check_in_order_channels(p);
    FAIL() << "accepted";
  } catch (const ps::ScheduleError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 1, step 0"), std::string::npos) << what;
    EXPECT_NE(what.find("1RECV_F1 expects 0SEND_F1"), std::string::npos) << what;
    EXPECT_NE(what.find("channel rank 0 -> rank 1 (activations) delivers 0SEND_F0"), std::string::npos) << what;
  }
  // Activations one way and gradients the other, each in its order: accepted,
  // though rank 0 sends F1 before it receives B0 (two channels, not one).
  EXPECT_NO_THROW(ps::check_in_order_channels(ps::parse_text(
      "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1\n"
      "rank 1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1\n",
      "ordered.txt")));
}

TEST(Generators, UnknownNameListsTheValidOnes) {
  try {
    ps::generate("chimera", {2, 4});
    FAIL() << "accepted an unknown schedule";
  } catch (const pipetwin::Error& e) {
    const std::string msg = e.what();
    for (const auto& g : ps::generators()) EXPECT_NE(msg.find(std::string(g.name)), std::string::npos) << msg;
  }
}

TEST(Generators, ImpossibleShapesAreRefused) {
  EXPECT_THROW(ps::generate("1f1b", {0, 4}), pipetwin::Error);
  EXPECT_THROW(ps::generate("1f1b", {2, 0}), pipetwin::Error);
  EXPECT_THROW(ps::generate("gpipe", {2, 4, 2}), pipetwin::Error);            // V=2 needs interleaved
  EXPECT_THROW(ps::generate("interleaved-1f1b", {2, 4, 1}), pipetwin::Error);  // needs V >= 2
  EXPECT_THROW(ps::generate("interleaved-1f1b", {3, 7, 2}), pipetwin::Error);  // 7 not a multiple of its 2 rounds
  EXPECT_NO_THROW(ps::generate("interleaved-1f1b", {3, 4, 2}));                // 1 round of 4: PyTorch's relaxed rule
  EXPECT_THROW(ps::generate("zb-v", {2, 4, 3}), pipetwin::Error);              // zb-v's V is 2
}

TEST(Generators, InterleavedPlacesChunksRoundRobin) {
  const auto p = ps::generate("interleaved-1f1b", {2, 4, 2});
  ASSERT_EQ(p.num_stages(), 4);
  EXPECT_EQ(p.rank_of(ps::StageId{0}), ps::RankId{0});
  EXPECT_EQ(p.rank_of(ps::StageId{1}), ps::RankId{1});
  EXPECT_EQ(p.rank_of(ps::StageId{2}), ps::RankId{0});
  EXPECT_EQ(p.rank_of(ps::StageId{3}), ps::RankId{1});
}

namespace {

std::vector<std::string> rows(const ps::Program& p) {
  std::vector<std::string> out;
  for (const auto& actions : p.ranks) {
    std::string row;
    for (const auto& cell : ps::to_cells(actions)) row += (row.empty() ? "" : " ") + cell;
    out.push_back(row);
  }
  return out;
}

}  // namespace

// PyTorch 2.13's own order, Nones dropped: get_schedule_ops(ScheduleZBVZeroBubble, K, M, 2).
TEST(ZbV, LiteralScheduleIsPyTorchs) {
  EXPECT_EQ(rows(ps::generate("zb-v", {2, 4})),
            (std::vector<std::string>{
                "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3",
                "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3"}));
  // M < 2K-1: PyTorch pads M to 2K-1 = 5 and drops the padded micro-batches.
  EXPECT_EQ(rows(ps::generate("zb-v", {3, 2})),
            (std::vector<std::string>{"0F0 0F1 5F0 5I0 5W0 5F1 5I1 5W1 0I0 0W0 0I1 0W1",
                                      "1F0 1F1 4F0 4F1 4I0 4W0 4I1 4W1 1I0 1W0 1I1 1W1",
                                      "2F0 3F0 2F1 3F1 3I0 3W0 2I0 2W0 3I1 3W1 2I1 2W1"}));
}

// PyTorch 2.13's own order, its OVERLAP_F_B included: get_schedule_ops(ScheduleDualPipeV, 2, 4, 2).
TEST(DualPipeV, LiteralScheduleIsPyTorchs) {
  EXPECT_EQ(rows(ps::generate("dualpipe-v", {2, 4})),
            (std::vector<std::string>{
                "0F0 0F1 0F2 3F0 3I0 3W0 3F1 (0F3;3B1)OVERLAP_F_B (3F2;0B0)OVERLAP_F_B 3B2 (3F3;0B1)OVERLAP_F_B 3B3 0I2 0W2 "
                "0I3 0W3",
                "1F0 2F0 1F1 2F1 1F2 2B0 (2F2;1B0)OVERLAP_F_B (1F3;2B1)OVERLAP_F_B (2F3;1B1)OVERLAP_F_B 2B2 1B2 2I3 1I3 2W3 "
                "1W3"}));
  const auto p = ps::generate("dualpipe-v", {4, 8});
  ASSERT_EQ(p.stages_per_rank, 2);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p.stage_to_rank[r].value, r);
    EXPECT_EQ(p.stage_to_rank[7 - r].value, r);
  }
  try {
    ps::generate("dualpipe-v", {4, 7});
    FAIL() << "M < 2K accepted";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs at least as many micro-batches as stages (M >= 2K = 8), got M=7"),
              std::string::npos) << e.what();
  }
}

// Megatron-LM's combined 1F1B without pipelining (combined_1f1b.py's
// docstring: phase 0 the first forward, phase i the backward of i-1 with the
// forward of i, the last backward alone), and with it: interleaved-1f1b's
// walk with one more warm-up forward (schedules.py's +1), every steady-state
// backward overlapped with the forward before it.
TEST(Combined1F1B, IsMegatronsCombinedSchedule) {
  EXPECT_EQ(rows(ps::generate("combined-1f1b", {1, 4, 1})),
            (std::vector<std::string>{"0F0 (0F1;0B0)OVERLAP_F_B (0F2;0B1)OVERLAP_F_B (0F3;0B2)OVERLAP_F_B 0B3"}));
  for (const auto& [K, M, V] : std::vector<std::tuple<int, int, int>>{{4, 8, 2}, {2, 8, 3}, {4, 4, 2}, {3, 2, 2}}) {
    const auto plain = ps::generate("interleaved-1f1b", {K, M, V});
    const auto combined = ps::generate("combined-1f1b", {K, M, V});
    const std::string at = "K=" + std::to_string(K) + " M=" + std::to_string(M) + " V=" + std::to_string(V);
    for (int r = 0; r < K; ++r) {
      const auto& a = combined.ranks[r];
      const auto leading = [](const std::vector<ps::Action>& actions) {
        int n = 0;
        while (n < static_cast<int>(actions.size()) && actions[n].op == ps::Op::F) ++n;
        return n;
      };
      // One more warm-up forward than interleaved-1f1b (Megatron-LM's, as PyTorch counts it), unless every forward already was one.
      const int per_round = M / std::max(1, M / K);
      const int warmup = std::min(std::min((V - 1) * per_round + 2 * (K - 1 - r), V * M) + 1, V * M);
      EXPECT_EQ(leading(a), warmup < V * M ? warmup + 1 : V * M) << at << " rank " << r;
      // The same actions, forwards in the same order and backwards in the same order.
      ASSERT_EQ(a.size(), plain.ranks[r].size()) << at;
      const auto only = [](const std::vector<ps::Action>& actions, ps::Op op) {
        std::vector<std::string> out;
        for (const auto& x : actions) {
          if (x.op == op) out.push_back(ps::to_string(ps::Action{x.op, x.stage, x.microbatch}));
        }
        return out;
      };
      EXPECT_EQ(only(a, ps::Op::F), only(plain.ranks[r], ps::Op::F)) << at;
      EXPECT_EQ(only(a, ps::Op::B), only(plain.ranks[r], ps::Op::B)) << at;
      // The first V M - warm-up backwards, one a steady-state step, each
      // overlapped with the forward right before it; the rest not.
      int backwards = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i].op != ps::Op::B) continue;
        const bool steady = backwards++ < V * M - warmup;
        EXPECT_EQ(a[i].overlapped, steady) << at << " " << ps::to_string(a[i]);
        if (steady) {
          ASSERT_EQ(a[i - 1].op, ps::Op::F) << at;
          EXPECT_FALSE(a[i - 1].stage == a[i].stage && a[i - 1].microbatch == a[i].microbatch) << at;
        }
      }
    }
  }
  const auto refused = [](const ps::GeneratorOptions& o) {
    try {
      ps::generate("combined-1f1b", o);
    } catch (const pipetwin::Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refused({4, 8, 1}).find("needs --virtual V >= 2 (stages per rank) with more than one rank"), std::string::npos)
      << refused({4, 8, 1});
}

// Figure 3 (bottom) of Qi et al., K=4, M=8, read off cell by cell: warm-ups of
// 7, 5, 3, 1 forwards, W of rank r deferred by 2r micro-batches.
TEST(ZbH2, LiteralScheduleIsThePapersFigure) {
  EXPECT_EQ(rows(ps::generate("zb-h2", {4, 8})),
            (std::vector<std::string>{
                "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0I0 0W0 0F7 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7",
                "1F0 1F1 1F2 1F3 1F4 1I0 1F5 1I1 1F6 1I2 1W0 1F7 1I3 1W1 1I4 1W2 1I5 1W3 1I6 1W4 1I7 1W5 1W6 1W7",
                "2F0 2F1 2F2 2I0 2F3 2I1 2F4 2I2 2F5 2I3 2F6 2I4 2W0 2F7 2I5 2W1 2I6 2W2 2I7 2W3 2W4 2W5 2W6 2W7",
                "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3F4 3I4 3F5 3I5 3F6 3I6 3W0 3F7 3I7 3W1 3W2 3W3 3W4 3W5 3W6 3W7"}));
  // Its unit-time dry run is the figure's timing: rank r starts at r and runs without a gap to 3M + r = 24 + r.
  const auto run = ps::dry_run(ps::generate("zb-h2", {4, 8}));
  for (int r = 0; r < 4; ++r) {
    double first = 1e9, last = 0;
    for (const auto& t : run.timeline.ranks[r]) {
      if (!ps::is_compute(t.action.op)) continue;
      first = std::min(first, t.start);
      last = std::max(last, t.end);
    }
    EXPECT_DOUBLE_EQ(first, r) << "rank " << r;
    EXPECT_DOUBLE_EQ(last, 24 + r) << "rank " << r;
  }
}

TEST(ZbH2, HasOneStagePerRank) {
  try {
    ps::generate("zb-h2", {4, 8, 2});
    FAIL() << "accepted --virtual 2";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("schedule zb-h2: has one stage per rank; --virtual 2"), std::string::npos)
        << e.what();
  }
}

TEST(ZbV, PlacesTwoStagesPerRankVShaped) {
  const auto p = ps::generate("zb-v", {4, 8});
  ASSERT_EQ(p.stages_per_rank, 2);
  ASSERT_EQ(p.num_stages(), 8);
  const std::vector<int> expected{0, 1, 2, 3, 3, 2, 1, 0};  // rank r holds stages r and 2K-1-r
  for (int s = 0; s < 8; ++s) EXPECT_EQ(p.rank_of(ps::StageId{s}), ps::RankId{expected[s]}) << "stage " << s;
  for (int r = 0; r < 4; ++r) {
    for (const auto& a : p.ranks[r]) EXPECT_EQ(p.rank_of(a.stage), ps::RankId{r}) << ps::to_string(a);
  }
}

TEST(ZbV, EveryStageAndMicrobatchHasOneFOneIOneW) {
  for (int K : {2, 4, 8}) {
    for (int M = 1; M <= 16; ++M) {
      const auto p = ps::generate("zb-v", {K, M});
      std::map<std::tuple<int, int, ps::Op>, int> seen;
      for (const auto& actions : p.ranks) {
        for (const auto& a : actions) ++seen[{a.stage.value, a.microbatch->value, a.op}];
      }
      EXPECT_EQ(seen.size(), 3u * 2 * K * M) << "K=" << K << " M=" << M;
      for (int s = 0; s < 2 * K; ++s) {
        for (int mb = 0; mb < M; ++mb) {
          for (const auto op : {ps::Op::F, ps::Op::I, ps::Op::W}) {
            EXPECT_EQ((seen[{s, mb, op}]), 1) << "K=" << K << " M=" << M << " " << s << ps::op_name(op) << mb;
          }
        }
      }
    }
  }
}

TEST(ZbV, VirtualIsImpliedTwo) {
  // --virtual left out (1) or given as 2: the same Program; anything else is refused, saying why.
  EXPECT_EQ(ps::generate("zb-v", {3, 5, 1}), ps::generate("zb-v", {3, 5, 2}));
  try {
    ps::generate("zb-v", {3, 5, 4});
    FAIL() << "accepted --virtual 4";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find("places exactly 2 stages per rank; --virtual 4 is not possible"),
              std::string::npos)
        << e.what();
  }
}

TEST(ZbV, PaddingWorkIsBounded) {
  // Every rank walks max(2K-1, M) micro-batches: a large K with M = 1 is refused, not minutes of work.
  EXPECT_THROW(ps::generate("zb-v", {400'000, 1}), pipetwin::Error);
}
