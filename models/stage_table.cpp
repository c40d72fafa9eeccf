// stage_table: one StageCosts per stage of the Program's partition.
#include "models/stage_table.hpp"

#include <algorithm>
#include <utility>

#include "schedule/error.hpp"

namespace pipetwin::models {

namespace {

// Each transfer's wait for a core on a shared host. As many processes as
// cores: now and then the transport's threads find every core computing (the
// full host's fitted means). More: each waits for a core (the fitted mean),
// but no longer than the first of the cores' compute bursts takes to end:
// from a random moment each burst's rest is uniform on [0, b] for bursts of
// one length b, and the first of C ends after b / (C + 1) on average. A model
// of short actions (mlp-small's 0.4 ms) waits that much less than the one
// calibrated on long ones; a rank woken by its message waits for a core too.
void add_core_waits(const Topology& topo, const schedule::Program& program, std::vector<schedule::StageCosts>& table) {
  const int S = static_cast<int>(table.size());
  if (topo.kind != TopologyKind::SharedHost || S == 0) return;
  const int processes = program.num_devices();
  double send = 0, recv = 0;
  if (processes == topo.host_cores && topo.host_cores > 1) {
    send = topo.full_host_send_s, recv = topo.full_host_recv_s;
  } else if (processes > topo.host_cores) {
    double burst = 0;
    for (const auto& t : table) burst += (t.forward_s + t.backward_s) / 2;
    const double bound = burst / S / (topo.host_cores + 1);
    send = std::min(topo.oversubscribed_send_s, bound), recv = std::min(topo.oversubscribed_recv_s, bound);
    for (auto& t : table) t.recv_wake_s = recv;
  }
  for (int s = 0; s < S; ++s) {
    auto& t = table[static_cast<std::size_t>(s)];
    t.send_overhead_s += send;
    if (s > 0) t.activation_recv_s += recv;
    if (s + 1 < S) t.gradient_recv_s += recv;
  }
}

// ZeRO-3: FSDP's all-gathers of the weights, where compute does not cover
// them: before every forward, recompute and backward (input gradient) where
// a unit's weights are freed after each use; once per step, before the
// stage's first forward, where they are kept (reshard_after_forward off).
// A stage whose rank's list holds UNSHARDs (PyTorch's lowering, or
// insert_unshards) is gathered by them instead: their collectives are the
// simulator's, at their places in the order.
void add_weight_gathers(const StageCostModel& costs, const schedule::Program& program, int s, bool unshards,
                        schedule::StageCosts& t) {
  if (program.zero != 3) return;
  using schedule::Op;
  const auto [i, j] = program.partition[s];
  if (!program.reshard_after_forward) {
    if (unshards) {
      t.unshard_bytes = costs.unshard_bytes(i, j);
    } else {
      t.first_forward_extra_s += costs.gather_exposed_s(i, j, s, Op::F);
    }
    return;
  }
  for (auto [d, op] : {std::pair{&t.forward_s, Op::F}, std::pair{&t.recompute_s, Op::R}, std::pair{&t.backward_s, Op::B},
                       std::pair{&t.input_grad_s, Op::I}}) {
    *d += costs.gather_exposed_s(i, j, s, op);
  }
}

// By stage: whether its rank's list gathers it by UNSHARD.
std::vector<bool> unsharded_stages(const schedule::Program& program) {
  std::vector<bool> out(static_cast<std::size_t>(program.num_stages()), false);
  for (const auto& actions : program.ranks) {
    for (const auto& a : actions) {
      if (a.op == schedule::Op::UNSHARD) out.at(static_cast<std::size_t>(a.stage.value)) = true;
    }
  }
  return out;
}

// Expert parallelism's all-to-alls in layers [i, j) of stage s: their time
// in each pass, and their count and size for sim/'s messages.
void add_expert_exchanges(const StageCostModel& costs, int i, int j, int s, schedule::StageCosts& t) {
  t.a2a_forward_s = t.a2a_backward_s = costs.a2a_pass_s(i, j, s);
  t.a2a_recompute_s = costs.a2a_recompute_s(i, j, s);
  const auto exchanges = costs.expert_exchanges(i, j);
  t.a2a_exchanges = exchanges.count;
  t.a2a_bytes = exchanges.bytes;
  t.a2a_recompute_exchanges = costs.recompute_exchanges(i, j).count;
}

}  // namespace

std::vector<schedule::StageCosts> stage_table(const StageCostModel& costs, const Hardware& hw,
                                              const schedule::Program& program) {
  const int S = program.num_stages();
  if (static_cast<int>(program.partition.size()) != S) {
    throw Error("the program has no partition (layers per stage); partition it first");
  }
  // Replica 0's groups: stage s's rank's first device and the route between two groups.
  const int T = program.tensor_parallel;
  const auto rank = [&](int s) { return program.first_device(0, program.rank_of(schedule::StageId{s})); };
  const auto path = [&](int a, int b) { return hw.topology.path_group(a, b, T); };
  const auto unshards = unsharded_stages(program);
  std::vector<schedule::StageCosts> table;
  for (int s = 0; s < S; ++s) {
    const auto [i, j] = program.partition[s];
    schedule::StageCosts t;
    t.forward_s = costs.scheduled_forward_s(i, j, s);
    t.input_grad_s = costs.input_grad_s(i, j, s);
    t.weight_grad_s = costs.weight_grad_s(i, j, s);
    t.backward_s = costs.backward_s(i, j, s);
    t.recompute_s = costs.recompute_action_s(i, j, s);
    t.step_s = costs.step_s(i, j, s);
    t.first_forward_extra_s = costs.cold_forward_s(i, j, s);
    t.reduce_bytes = costs.reduce_bytes(i, j);
    t.gather_bytes = costs.gather_bytes(i, j);
    t.reduce_collective = costs.reduce_collective(i, j, s);
    t.reduce_chunks = costs.reduce_chunks(i, j, s);
    t.reduce_bucket_bytes = costs.gradient_bucket_bytes(i, j);
    t.reduce_each_microbatch = costs.reduces_each_microbatch() && program.data_parallel > 1;
    add_weight_gathers(costs, program, s, unshards[static_cast<std::size_t>(s)], t);
    t.reduce_first_bucket_bytes = costs.gradient_first_bucket_bytes();
    t.tp_forward_s = costs.tp_forward_s(i, j);
    t.tp_backward_s = costs.tp_backward_s(i, j);
    add_expert_exchanges(costs, i, j, s, t);
    t.send_overhead_s = costs.device_of(s).transfer_overhead_s;
    t.send_s_per_byte = costs.device_of(s).send_bandwidth > 0 ? 1 / costs.device_of(s).send_bandwidth : 0;
    t.blocking_sends = costs.device_of(s).blocking_sends;
    t.overlap_factor = costs.device_of(s).overlap_factor;
    // A stage's receives (there are only where the neighbour is on another rank).
    if (s > 0) t.activation_recv_s = costs.device_of(s).recv_seconds(costs.cut_bytes(i));
    if (s + 1 < S) t.gradient_recv_s = costs.device_of(s).recv_seconds(costs.cut_bytes(j));
    const auto& topo = hw.topology;
    // A tensor group's member on a shared host: its compute beyond 1/T of the work, the collectives apart.
    if (topo.kind == TopologyKind::SharedHost && T > 1 && topo.tensor_compute > 0) {
      using schedule::Op;
      const double c = 1 + topo.tensor_compute;
      for (auto [d, op] : {std::pair{&t.forward_s, Op::F}, std::pair{&t.recompute_s, Op::R}, std::pair{&t.backward_s, Op::B},
                           std::pair{&t.input_grad_s, Op::I}, std::pair{&t.weight_grad_s, Op::W}}) {
        const double comm = t.tp_share(op);
        if (*d > comm) *d = comm + (*d - comm) * c;
      }
      t.first_forward_extra_s *= c;
    }
    // More processes (T x K x D) than a shared host's cores: compute is
    // slower (each transfer's wait for a core: add_core_waits, after the loop).
    if (topo.kind == TopologyKind::SharedHost && program.num_devices() > topo.host_cores) {
      const double slower = 1 + topo.oversubscribed_compute;
      // Not the optimizer step: ranks reach it one by one as the pipeline
      // drains, and it streams memory rather than computing (measured: in
      // mlp-small K = 4 M = 2 on 2 cores, the steps took 0.96 times what the
      // curves give alone, the forwards 1.4 and the backwards 1.25 times).
      for (double* d : {&t.forward_s, &t.first_forward_extra_s, &t.input_grad_s, &t.weight_grad_s, &t.backward_s, &t.recompute_s}) *d *= slower;
      // And a time per action whatever its work (not the first forward's cold read: part of that action).
      for (double* d : {&t.forward_s, &t.input_grad_s, &t.weight_grad_s, &t.backward_s, &t.recompute_s}) {
        if (*d > 0) *d += topo.oversubscribed_action_s;
      }
    }
    if (s + 1 < S) {
      t.activation_bytes = costs.cut_bytes(j);
      t.activation_transfer_s = path(rank(s), rank(s + 1)).seconds(t.activation_bytes);
    }
    if (s > 0) {
      t.gradient_bytes = costs.cut_bytes(i);
      t.gradient_transfer_s = path(rank(s), rank(s - 1)).seconds(t.gradient_bytes);
    }
    table.push_back(t);
  }
  add_core_waits(hw.topology, program, table);
  return table;
}

}  // namespace pipetwin::models
