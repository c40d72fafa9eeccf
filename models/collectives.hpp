// The collectives as one table (schedule::CollectiveAlgorithm): each row
// its name, its closed form and its message pattern, which sim/ replays on
// the platform's routes as it reads it. And the all-reduce's two algorithms,
// NCCL's ring and its tree modelled simply; the choice between them by
// predicted time, as NCCL's tuner chooses by its own.
//
// The tree stands for NCCL's double binary tree (two trees, each carrying half
// the data, every rank a leaf in one of them) as one binary tree: member i's
// parent is (i - 1) / 2 (heap order, member 0 the root, depth h = ⌊log2 n⌋).
// The bytes, cut into C chunks of ⌈bytes / C⌉, are reduced up to the root,
// then broadcast down; each phase is pipelined (a member forwards chunk k
// while it receives chunk k + 1), so each takes h + C - 1 steps of
// latency + chunk / bandwidth when every tree edge has its own link:
//   tree   2(h + C - 1) · (latency + ⌈bytes / C⌉ / bandwidth)
//   ring   2(n - 1) · (latency + ⌈bytes / n⌉ / bandwidth)
// The ring pays 2(n-1) latencies and 2(n-1)/n · bytes / bandwidth; the tree
// 2(h + C - 1) latencies and 2(1 + (h-1)/C) · bytes / bandwidth: the tree
// wins for small messages over many members, the ring for large ones (and
// always over two members).
#pragma once

#include <algorithm>
#include <functional>
#include <string_view>
#include <vector>

#include "models/hardware.hpp"
#include "schedule/collective.hpp"

namespace pipetwin::models {

using schedule::CollectiveAlgorithm;

// One message of a member's round: sent to, or received from, member `peer`
// of the group (0 .. n-1), of `bytes` (a fraction; the replay rounds it up
// to a whole byte, at least 1).
struct Message {
  enum class Way { Send, Receive };
  Way way = Way::Send;
  int peer = 0;
  double bytes = 0;
};

// A collective's row. A member's part is `rounds` rounds; in each it posts
// its messages in their order, then waits for all of them; its next round
// starts when they are done. Over n members each holding `bytes`, with
// `chunks` the pipelining of the algorithms that have one (1 otherwise).
struct CollectiveEntry {
  CollectiveAlgorithm algorithm;
  std::string_view name;
  // Its closed form: alone, the time to the last member's end, with `link`
  // the route between two members, every member's messages of a round on a
  // path of their own (where a round sends several at once, each member's
  // one port into a non-blocking switch). 0 for one member.
  double (*seconds)(const Link& link, double bytes, int members, int chunks);
  int (*rounds)(int members, int chunks);
  // Member `member`'s round `round` (0 .. rounds - 1): its messages, appended to `out`.
  void (*round)(int member, int members, double bytes, int chunks, int round, std::vector<Message>& out);
};
const CollectiveEntry& collective(CollectiveAlgorithm algorithm);

// The all-reduce's algorithm as a request asks for it (auto: the faster).
enum class Collective { Auto, Ring, Tree };
std::string_view collective_name(Collective c);      // auto, ring, tree
Collective parse_collective(std::string_view name);  // throws pipetwin::Error naming the valid ones
const std::vector<std::string>& collective_algorithm_names();  // auto, ring, tree

// The most chunks a tree pipelines a message in (each chunk is a message per
// tree edge and phase in the replay).
inline constexpr int kMaxTreeChunks = 64;

int tree_depth(int members);  // ⌊log2 members⌋; 0 for one member
// Closed forms over `members` devices, each step on `link`; 0 for one member.
double ring_all_reduce_seconds(const Link& link, double bytes, int members);
double tree_all_reduce_seconds(const Link& link, double bytes, int members, int chunks);
// The chunk count (1 .. kMaxTreeChunks) that makes the tree fastest:
// near √((h - 1) · bytes / (latency · bandwidth)), 1 for h ≤ 1.
int tree_chunks(const Link& link, double bytes, int members);
// `asked` when it is Ring or Tree; for Auto, the faster closed form (the
// ring on `ring_link`, the tree on `tree_link` at tree_chunks()), the ring on
// a tie.
Collective choose_all_reduce(Collective asked, const Link& ring_link, const Link& tree_link, double bytes, int members);

// A tensor-parallel group's tree edge: on a cluster, through the NVSwitch, a
// parent's one port carries both children's chunks ({2·intra.latency,
// intra.bandwidth / 2}); on all-to-all, the pair link.
Link group_tree_link(const Topology& topology, int width);

// The data group of pipeline rank k: D groups of `width` devices, replica d's
// first device width·(d + D·k) (Program::first_device). The link that its
// collectives' closed forms use: the slowest route from replica 0's group to
// another's (largest latency, smallest bandwidth; Topology::path_group), a
// whole group's T streams merged. A shared host with a calibrated collective
// link: that link (Topology::collective).
Link data_group_link(const Topology& topology, int width, int replicas, int rank);
// The same over `members` of those replicas, `stride` apart from replica 0
// (0, stride, 2·stride, ...): HSDP's shard group (stride 1) and its
// replicate group (stride the shard group's size).
Link data_subgroup_link(const Topology& topology, int width, int replicas, int rank, int members, int stride);

// An all-to-all over the first `members` replicas (stride 1) of that data
// group, each sending `bytes` in all, bytes / members to each other member
// (its own share stays), every send at once as NCCL's grouped sends post
// them (the CollectiveAlgorithm::AllToAll round): replica 0's sends to the
// members on its node leave through its NVSwitch port, those to other nodes
// through its NIC, one after the other on each port and the two ports side
// by side (a group's `width` streams merged on each route):
//   seconds(bytes) = max latency + max(on node, off node) of
//                    the sum over that port's members m of bytes / members / bandwidth_m.
// A cluster's NIC that several members send through (G/N GPUs to a NIC)
// carries all their off-node bytes: the off-node sum times their number.
// On one node (or any topology without NICs: one port) of one link (α, β),
// α + (members - 1) · bytes / (members · β), the collective table's form.
struct AllToAll {
  double latency_s = 0;                   // the slowest route's
  double on_node_s = 0, off_node_s = 0;   // seconds per byte sent in all, through each port
  double seconds(double bytes) const { return bytes > 0 ? latency_s + bytes * std::max(on_node_s, off_node_s) : 0; }
  friend bool operator==(const AllToAll&, const AllToAll&) = default;
};
AllToAll all_to_all(const Topology& topology, int width, int replicas, int rank, int members);
// The same with each device of those replicas' tensor groups a member of
// its own (`members` replicas x `width` devices, Megatron-LM's MoE parallel
// folding), one stream a route: device 0 of replica 0's group sending
// bytes / (members · width) to each other device.
AllToAll all_to_all_folded(const Topology& topology, int width, int replicas, int rank, int members);

// Gradient buckets (DDP, Megatron-LM's --overlap-grad-reduce): `bytes` cut
// into buckets of `cap` bytes, the last one the rest, in the order the
// backward produces them (the last layer's first), with when each is ready
// as a share of that backward's time: the share of the bytes produced up to
// and including it (gradients come out at an even pace). One bucket of all
// the bytes, ready at 1, where cap is 0 or at least the bytes. `first_cap`
// > 0 caps the first bucket apart (DDP's first bucket of 1 MiB,
// dist._DEFAULT_FIRST_BUCKET_BYTES): the rest then in buckets of `cap`.
struct GradientBucket {
  double bytes = 0;
  double ready = 1;  // (0, 1]: of the backward that produces it
};
std::vector<GradientBucket> gradient_buckets(double bytes, double cap, double first_cap = 0);
// The chunks a bucket of `bucket` of a reduction's `total` bytes is
// pipelined in, where the whole takes `chunks`: its share, at least one.
int bucket_chunks(int chunks, double bucket, double total);
// When the last of `buckets` is reduced, reduced one after the other (one
// stream), each from when it is ready (backward_start + ready ·
// backward_s) and taking seconds(its bytes); the first no earlier than
// `stream_free` either (the stream's earlier reductions: ZeRO-2 and 3's
// micro-batches before this one).
double bucketed_reduce_end(const std::vector<GradientBucket>& buckets, double backward_start, double backward_s,
                           const std::function<double(double)>& seconds, double stream_free = 0);

// A pass over FSDP units, each unit's all-gather issued when the unit before
// it starts computing (the first at the pass's start), the gathers one after
// the other on one stream, each unit computing once its gather and the unit
// before it are done: the pass's time,
//   g_1 + sum over u < n of max(c_u, g_{u+1}) + c_n
// in order of execution.
struct GatheredUnit {
  double gather_s = 0, compute_s = 0;
};
double prefetched_pass_s(const std::vector<GatheredUnit>& units);

// "ring", "tree", or "ring, tree": the algorithms in `used`, each once.
std::string collective_names(const std::vector<Collective>& used);

}  // namespace pipetwin::models
