// Links and topologies: how devices connect (NVLink switch, PCIe tree,
// hosts over a network, processes of one host, GPU clusters), the routes
// between devices and tensor-parallel groups, and closed-form ring collectives.
// Units: seconds, bytes/s.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pipetwin::models {

struct Link {
  double latency_s = 0;
  double bandwidth = 0;  // bytes/s, each direction
  double seconds(double bytes) const { return latency_s + bytes / bandwidth; }
  friend bool operator==(const Link&, const Link&) = default;
};

enum class TopologyKind {
  AllToAll,  // every device pair has its own link (NVLink switch, TPU ICI)
  PcieTree,  // devices under PCIe switches, switches under the host bridge
  MultiHost, // devices_per_host all-to-all inside a host, hosts over a network
  SharedHost,  // every rank is a process on one host of host_cores cores (a CPU box)
  Cluster,     // GPU nodes (NVSwitch inside, NICs out) under leaf switches, leaves under a spine
};
std::string_view topology_name(TopologyKind kind);

// A cluster's network between the nodes' NICs (TopologyKind::Cluster).
enum class Network {
  FatTree,  // every NIC of a node under the node's leaf switch
  Rail,     // rail-optimised: NIC i of every node of a pod under that pod's rail switch i
};
std::string_view network_name(Network network);  // fat-tree, rail

// One hop of a route, named so that sim/ can create each link once.
struct Hop {
  std::string link;  // e.g. "dev3-sw0", "sw0-host", "host1-net"
  Link spec;
};

// The cluster (TopologyKind::Cluster): nodes of G = devices_per_host GPUs and
// N = nics_per_host NICs, numbered node-major (GPU g is local GPU g % G of
// node g / G); local GPU l sends through NIC l·N/G (G/N GPUs share a NIC).
//   - Inside a node every GPU has one port into a non-blocking NVSwitch
//     (`intra`: one port's latency and bandwidth per direction), so a pair of
//     GPUs is limited only by its two ports: n<node>-gpu<l>-nvsw, up, down.
//   - Between nodes, each NIC (`inter`: one NIC, per direction) connects to a
//     leaf switch; nodes_per_leaf nodes form a pod. The spine above the
//     leaves is not a bottleneck: a leaf's uplinks carry the
//     oversubscription (1: full bisection; 2: half the NICs' bandwidth).
//     fat-tree: the node's NICs all under the pod's leaf; one uplink per leaf,
//       leaf<p>-up, of nodes_per_leaf·N·nic_bw / oversubscription.
//     rail: NIC i of every node of pod p under rail switch (p, i); one uplink
//       per (pod, rail), leaf<p>-rail<i>-up, of nodes_per_leaf·nic_bw /
//       oversubscription. NIC i to NIC j ≠ i goes through the spine even in
//       one pod (up rail i's uplink, down rail j's).
//   Routes: same node {a's port, b's port}; same leaf (fat-tree: same pod;
//   rail: same pod and rail) {a's NIC n<node>-nic<i>, b's NIC}; otherwise
//   {a's NIC, a's uplink, b's uplink, b's NIC}. The uplinks' latency is 0:
//   the switches' (~0.1-0.2 µs an InfiniBand hop) is in the NICs'.
struct Topology {
  TopologyKind kind = TopologyKind::AllToAll;
  int devices_per_host = 8;
  // Cluster (see above): NICs per node (divides devices_per_host), the network,
  // nodes under one leaf switch (a pod), and the leaves' uplink oversubscription (≥ 1).
  int nics_per_host = 1;
  Network network = Network::FatTree;
  int nodes_per_leaf = 32;
  double oversubscription = 1;
  int devices_per_switch = 4;
  int host_cores = 1;  // SharedHost: ranks beyond this count share cores
  // SharedHost, calibrated: the cores' worth of compute that the host gives
  // the ranks computing at once, each at most one core; below host_cores when
  // they slow each other (shared caches and memory, SMT siblings). 0: host_cores.
  double effective_cores = 0;
  // SharedHost, calibrated: the same with more processes than cores, where
  // the ranks computing at once also share their cores' caches with the
  // ranks waiting on them (each resumes on a core another rank has just
  // left); fitted on those runs' steps. 0: as effective_cores.
  double oversubscribed_cores = 0;
  // SharedHost, calibrated: with more ranks than cores, what each send and
  // each receive also waits for a core (the ranks and the transport's threads
  // take turns), on top of the device's transfer costs; in a configuration
  // whose compute bursts are short, no longer than the first of the cores'
  // bursts takes to end (models/stage_table.cpp: mean burst / (cores + 1)).
  double oversubscribed_send_s = 0, oversubscribed_recv_s = 0;
  // SharedHost, calibrated: with as many ranks as cores (two ranks on two),
  // what each send and each receive also waits for a core on average: the
  // transport's threads find every core computing now and then, and a
  // message then waits milliseconds (a few in a hundred). The means over
  // those runs' transfers, on top of the robust fit's typical costs.
  double full_host_send_s = 0, full_host_recv_s = 0;
  // SharedHost, calibrated: with more ranks than cores, how much longer each
  // forward, backward and recompute takes even while no other rank computes
  // (0.08: 8%): the other ranks' processes and the transport's threads wake
  // on its cores. Not the optimizer step (models/stage_table.cpp).
  double oversubscribed_compute = 0;
  // SharedHost, calibrated: with more ranks than cores, the time each
  // forward, backward and recompute also takes whatever its work, on top of
  // oversubscribed_compute's share (a rank's resumption on a core another
  // process has just left: its caches refilled, its threads woken). Fitted
  // with the share where those runs' actions differ enough in size to tell
  // the two apart (calibration/fit_compute.cpp); 0: the share alone.
  double oversubscribed_action_s = 0;
  // SharedHost, calibrated: with more ranks than cores, a rank takes a core
  // when it has work and keeps it until it receives a message (a thread
  // holds its core until it blocks, and a receive blocks even where the
  // message was sent before it: the transport's thread, which needs a core
  // too, hands it over); a rank with work and no core waits, idle (in the
  // measurement, inside the receive that woke it). Otherwise (false) the
  // computing ranks share the cores evenly.
  bool run_to_completion = false;
  // SharedHost, calibrated, with run_to_completion: a rank that has computed
  // this long while another waits for a core gives its core up to that one
  // and queues again, inside its action (the OS's time slices: round robin,
  // the wait part of the action's wall time as a preemption is); 0: never.
  double time_slice_s = 0;
  // SharedHost, calibrated, with run_to_completion: a rank woken by a
  // message while every core is held takes one from a running rank within
  // this long (the scheduler favours a task that slept); the preempted one
  // queues again behind the woken ones, the wait part of its action. 0: never.
  double wake_preempt_s = 0;
  // SharedHost, calibrated, with run_to_completion: each core has its own
  // queue (Linux's run queue per CPU): a rank waits on the core it last ran on
  // unless another is free, a slice ends only for a rank queued on the same
  // core, and a core whose rank blocks pulls one waiting on another (sim/cores.hpp).
  // false: one queue for all the cores.
  bool core_affinity = false;
  // SharedHost, calibrated from data-parallel runs: one round of a ring
  // collective (Gloo's) between processes of the host takes latency_s plus
  // chunk bytes / bandwidth of one core's work (copying through the
  // transport and summing are CPU work): the simulator runs that work on the
  // host's cores beside the ranks' compute, so a collective slows, and is
  // slowed by, the ranks computing at the same time. Alone: latency_s +
  // chunk / bandwidth a round. Bandwidth 0: the loopback `intra` link.
  Link collective;
  // SharedHost, calibrated from tensor-parallel runs: one round of a tensor
  // group's ring collective (inside F, B, R), latency_s + chunk bytes /
  // bandwidth, the waits for the group's other members included (a round's
  // bytes are small; what it costs is mostly the two processes meeting).
  // Bandwidth 0: `collective` (then the loopback).
  Link tensor_collective;
  // SharedHost, calibrated from expert-parallel runs: an expert group's
  // all-to-all (Gloo's alltoall, inside F, B, R), latency_s + (E - 1) bytes /
  // (E · bandwidth) for `bytes` each member exchanges in all. Bandwidth 0:
  // `collective` (then the loopback).
  Link exchange;
  // SharedHost, calibrated from tensor-parallel runs: each compute action of
  // a tensor group's member takes this much longer than its 1/T of the
  // layers' work on the curves, its collectives apart (the split's own
  // operations, T processes' caches): 0.1 is 10%.
  double tensor_compute = 0;
  // The cores' worth of compute that ranks computing at once share, in a
  // program of `processes` processes (T x K x D; any number within the cores
  // gives effective_cores').
  double compute_capacity(std::int64_t processes = 0) const {
    if (processes > host_cores && oversubscribed_cores > 0) return oversubscribed_cores;
    return effective_cores > 0 ? effective_cores : host_cores;
  }
  // Whether the host's capacity for that program is calibrated below its cores.
  bool calibrated_sharing(std::int64_t processes = 0) const {
    return effective_cores > 0 || (processes > host_cores && oversubscribed_cores > 0);
  }
  Link intra;   // device-device (all-to-all), device-switch (PCIe), inside a host (multi-host), loopback (shared),
                // one GPU's NVSwitch port (cluster)
  Link bridge;  // switch-host bridge (PCIe tree)
  Link inter;   // host-network (multi-host), one NIC (cluster)
  friend bool operator==(const Topology&, const Topology&) = default;
  std::vector<Hop> route(int from_device, int to_device) const;
  // The route as one link: latencies add up, the narrowest hop sets the bandwidth.
  Link path(int from_device, int to_device) const;
  // A tensor-parallel group of `width` consecutive devices run as one actor:
  // the route between the groups whose first devices are `from` and `to`
  // (multiples of width), carrying width parallel streams (device from + t
  // to device to + t). Each hop is the group's share of the resources the
  // streams cross, as one link:
  //   cluster: the span's ports n<node>-gpu<l>-<l+w-1>-nvsw at w·intra; its
  //     NICs i..j n<node>-nic<i>-<j> at (j-i+1)·nic_bw, or, when the span
  //     uses one NIC (or shares it with other spans: w < G/N), that NIC's own
  //     n<node>-nic<i> at nic_bw, the link every span on it shares; fat-tree
  //     uplinks as they are (shared by the whole leaf); rail uplinks of the
  //     span's rails merged, leaf<p>-rail<i>-<j>-up, bandwidths summed.
  //     width divides devices_per_host.
  //   all-to-all: the w pair links, dev<a>-<a+w-1>-dev<b>-<b+w-1> at w·intra.
  //   shared-host: the loopback, as route() (each member a process of the host).
  // Width 1 is route(from, to); any other width on another kind throws. One
  // platform holds groups of one width: spans of different widths over the
  // same ports are different links.
  std::vector<Hop> route_group(int from, int to, int width) const;
  // The link each step of a ring collective (all-reduce, all-gather,
  // reduce-scatter) over a tensor-parallel group of `width` devices crosses:
  // every device sends to its successor while it receives from its
  // predecessor. Cluster: inside a node, through the non-blocking NVSwitch,
  // each step is limited by each GPU's own port: {2·intra.latency (two
  // ports), intra.bandwidth}. All-to-all: the pair link, intra. Shared host:
  // `tensor_collective` where calibrated, else `collective` where calibrated,
  // else intra. Throws as route_group does
  // when groups of `width` do not fit.
  Link group_ring_link(int width) const;
  // route_group as one link (as path() is route()).
  Link path_group(int from, int to, int width) const;
  // Closed-form ring collectives over `width` devices of `bytes` each
  // (Patarasuk and Yuan, JPDC 2009; NCCL's ring): all-reduce
  // 2(w-1)·(latency + bytes/(w·bandwidth)); all-gather and reduce-scatter
  // (w-1)·(latency + bytes/(w·bandwidth)), on group_ring_link(w). 0 for w = 1.
  double ring_all_reduce_seconds(double bytes, int width) const;
  double ring_all_gather_seconds(double bytes, int width) const;
  // Nodes that `devices` devices occupy: ceil(devices / devices_per_host).
  int nodes_for(int devices) const;
};

}  // namespace pipetwin::models
