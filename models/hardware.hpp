// Devices, links and topologies, the hardware presets, and the YAML hardware
// spec (a preset name, a file, or a file that overrides a preset's fields).
//
// Heterogeneous hardware lists one device per rank under `devices:`, each
// starting from the file's `device` (or from its own `preset:`):
//
//   preset: v100
//   devices: [{}, {}, {preset: p100}, {preset: p100}]     # ranks 0-1 V100, 2-3 P100
//
// Units in code: seconds, bytes, FLOP/s, bytes/s. Units in YAML: *_us
// (microseconds), memory_gb and *_gbps (10^9 bytes, 10^9 bytes/s), FLOP/s.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/model.hpp"
#include "models/yaml_file.hpp"

namespace pipetwin::models {

// Achieved share of peak as a function of the work of one operation:
// eff(w) = max * w / (w + half_flops); half_flops = 0 means always max.
// Calibrated curves may list points (work, efficiency) instead, measured at
// those works (a kind's layer at the micro-batch sizes it ran with): the time
// w / (peak eff) is then linear in w between two points and along the first
// and last segments beyond them, so that an efficiency that rises, peaks and
// falls with the work (caches) is followed.
struct Efficiency {
  double max = 1.0;
  double half_flops = 0;
  std::vector<std::pair<double, double>> points;  // (work, efficiency), increasing work; when given, the curve
  double at(double flops) const;
  friend bool operator==(const Efficiency&, const Efficiency&) = default;
};

// The passes of a layer that time differently. A checkpointed micro-batch's
// forward runs without autograd (ForwardNoGrad); its recompute runs the
// forward again with autograd (Recompute); Backward is the layer's whole
// backward (input and weight gradients: B = I + W).
enum class Pass { Forward, Backward, ForwardNoGrad, Recompute };
std::string_view pass_name(Pass pass);  // forward, backward, forward_nograd, recompute
inline constexpr Pass kPasses[] = {Pass::Forward, Pass::Backward, Pass::ForwardNoGrad, Pass::Recompute};

// Per layer kind (calibrated): the efficiency of each pass, overriding the
// device's `efficiency`. forward_nograd and recompute default to forward.
// Under kDefaultKind, the curves a calibration fitted on all the kinds it saw
// at once, for a layer whose kind it did not see (another model's).
inline constexpr std::string_view kDefaultKind = "default";
struct KindEfficiency {
  Efficiency forward, backward;
  std::optional<Efficiency> forward_nograd, recompute;
  // The curves' fixed cost (half_flops) is per operator of the layer
  // (models::operators), not per layer: a calibration's pooled curve, fitted
  // on kinds of many operators a layer (a Transformer block's 14) and applied
  // to kinds of few (a linear layer's 2). A curve of points ignores it.
  bool per_operator = false;
  const Efficiency& of(Pass pass) const;
  friend bool operator==(const KindEfficiency&, const KindEfficiency&) = default;
};

// Fixed time per compute action of a stage, whatever its layers: the
// framework's cost of entering a stage's forward or backward (not per layer,
// unlike op_overhead). forward_nograd and recompute default to forward.
struct ActionOverheads {
  double forward_s = 0, backward_s = 0;
  std::optional<double> forward_nograd_s, recompute_s;
  double of(Pass pass) const;
  friend bool operator==(const ActionOverheads&, const ActionOverheads&) = default;
};

struct Device {
  std::string name;
  double peak_flops_fp32 = 0;
  double peak_flops_half = 0;  // bf16 / fp16 (tensor cores, MXU)
  Efficiency efficiency;
  double memory_bytes = 0;
  double memory_bandwidth = 0;   // bytes/s
  // The share of memory_bandwidth a layer's elementwise kernels achieve
  // (LayerCost::forward_traffic): in (0, 1].
  double memory_efficiency = 1.0;
  double op_overhead_s = 0;      // per compute operation (kernel launch)
  double transfer_overhead_s = 0;  // per transfer, on top of the link
  double send_bandwidth = 0;       // bytes/s the sender itself writes (the sender's cost per byte); 0: none
  // The runtime waits for each send to arrive before its next action
  // (StageCosts::blocking_sends); false: sends are posted and left to fly.
  bool blocking_sends = false;
  // The share of the shorter action of an OVERLAP_F_B (a forward and a
  // backward of two micro-batches issued together) hidden under the longer
  // (StageCosts::overlap_factor): 0, the sum, runs them one after the other
  // (PyTorch's runtime by default, the executor); calibrate fits it from the
  // traces' OVERLAP_F_B where they hold some. In [0, 1].
  double overlap_factor = 0;
  // Calibrated refinements (absent from the presets):
  std::map<std::string, KindEfficiency> kinds;  // by kind_name(), or kDefaultKind: per-kind curves
  ActionOverheads action_overhead;              // per compute action of a stage
  // Per pass, seconds per byte of a layer's weights on top of its curve, for
  // the layers of calibrated kinds (an embedding's table excepted): a
  // layer whose weights do not stay in the caches streams them from memory
  // in each pass, and with few samples a micro-batch that time is not hidden
  // behind its FLOPs. Fitted where the traces' partitions put layers of one
  // kind with different weights on different stages; 0: none.
  ActionOverheads weight_stream;
  double weight_stream_seconds(Pass pass, double bytes) const { return weight_stream.of(pass) * bytes; }
  std::optional<double> step_overhead_s;        // optimizer step's fixed cost; default op_overhead_s
  // Receiver's cost of taking a message out of the transport once it is there
  // (a copy), on top of the link: recv_overhead + bytes / recv_bandwidth.
  double recv_overhead_s = 0;
  double recv_bandwidth = 0;  // bytes/s; 0: no cost per byte
  // The first forward of each stage in a step reads the stage's weights at
  // this rate (the optimizer step left other data in the caches): weight
  // bytes / this on top of that action. bytes/s; 0: no such cost.
  double cold_weights_bandwidth = 0;
  double recv_seconds(double bytes) const {
    return recv_overhead_s + (recv_bandwidth > 0 ? bytes / recv_bandwidth : 0);
  }
  double peak_flops(Precision p) const;
  // Time of one operation of `flops` work at this device's efficiency.
  double compute_seconds(double flops, Precision p) const;
  // Time of one layer's pass of `flops` work: the kind's curve when `kinds`
  // has one, else compute_seconds(). 0 for no work.
  // `operators`: the layer's (models::operators), for a per_operator curve.
  double layer_seconds(std::string_view kind, Pass pass, double flops, Precision p, int operators = 1) const;
  // Time of a layer's memory-bound traffic (bytes read and written by its
  // elementwise kernels) at memory_bandwidth × memory_efficiency; 0 where a
  // calibrated curve covers the kind (the measured times include it) or the
  // device gives no bandwidth.
  double traffic_seconds(std::string_view kind, double bytes) const;
  // The least time a pass can take on its weights: `bytes` of them read (a
  // forward's or an input gradient's matrix products read every weight) or
  // read and written (a weight gradient accumulates into every one), at
  // memory_bandwidth × memory_efficiency (traffic_seconds' rate). A micro-batch of a few samples
  // reuses each weight too little to hide that behind its FLOPs (a roofline's
  // memory side); 0 when the device gives no bandwidth. Applied to every kind,
  // calibrated or not: a curve fitted on larger micro-batches does not know it.
  double weight_seconds(double bytes) const;
  // The kind's curves; else the calibrated `default` (every kind a calibration
  // saw, pooled: for the kinds it did not see); else none (the device's curve).
  const KindEfficiency* kind_curves(std::string_view kind) const;
  bool has_kind(std::string_view kind) const { return kind_curves(kind) != nullptr; }
  double step_overhead() const { return step_overhead_s.value_or(op_overhead_s); }
  friend bool operator==(const Device&, const Device&) = default;
};

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

struct Hardware {
  std::string name;
  std::string source;  // where the figures come from
  Device device;       // every rank's device, unless `devices` lists them one by one
  Topology topology;
  std::vector<Device> devices;  // heterogeneous hardware: rank r on devices[r]; empty: `device` everywhere
  // The device of each of `ranks` ranks; throws when `devices` lists fewer.
  std::vector<Device> rank_devices(int ranks) const;
  // "4 x V100 PCIe", or the devices one by one when they differ.
  std::string describe_devices(int ranks) const;
};

const std::vector<std::string>& preset_names();
Hardware preset(const std::string& name);  // throws, listing the valid names
Hardware hardware_from_yaml(const YamlFields& fields);
// The hardware as a self-contained YAML file (no preset) that
// hardware_from_yaml() reads back to the same values (17 significant digits).
// `extra` (a YAML mapping's text, e.g. "calibration:\n  ...") is appended.
std::string hardware_to_yaml(const Hardware& hardware, const std::string& header_comment = "",
                             const std::string& extra = "");
// A preset name, or a YAML file (which may start from `preset:` and override fields).
Hardware load_hardware(const std::string& name_or_path);

}  // namespace pipetwin::models
