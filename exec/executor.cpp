// run_rank(): one rank of `pipetwin run`, from rendezvous to its report.
//
//   rendezvous (store, clocks, group) -> build local stages -> barrier
//   for each step: RankInterpreter over TorchBackend, timed -> report
//   -> rank 0 gathers every report through the store
#include <ATen/Parallel.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <sched.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "exec/core_probe.hpp"
#include "exec/gloo_backoff.hpp"
#include "exec/report.hpp"
#include "exec/run.hpp"
#include "exec/torch_backend.hpp"
#include "exec/torch_tensor_parallel.hpp"
#include "schedule/channels.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace ps = pipetwin::schedule;

namespace {

// The first line of an exception's message, without LibTorch's C++ backtrace.
std::string message_of(const std::exception& e) {
  std::string what;
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    what = c10->what_without_backtrace();
  } else {
    what = e.what();
  }
  const auto nl = what.find('\n');
  std::string first = nl == std::string::npos ? what : what.substr(0, nl);
  // NCCL's errors say what went wrong on the line after "Last error:"
  // (e.g. "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device ...").
  const auto last = what.find("Last error:\n");
  if (last != std::string::npos) {
    const auto begin = last + 12, end = what.find('\n', begin);
    const std::string reason = what.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (!reason.empty()) first += " (NCCL: " + reason + ")";
  }
  return first;
}

std::string explain(const std::string& what, const ps::Program& p, const Placement& where, const ps::Action& a) {
  const bool lost = what.find("onnection closed") != std::string::npos || what.find("reset by peer") != std::string::npos ||
                    what.find("Broken pipe") != std::string::npos || what.find("EOF") != std::string::npos;
  const bool late = what.find("imed out") != std::string::npos;
  if (!ps::is_transfer(a.op)) {
    // STEP and REDUCE_GRAD wait on the stage's data group, the other actions on its tensor group.
    const bool data = a.op == ps::Op::STEP || a.op == ps::Op::REDUCE_GRAD;
    if ((!lost && !late) || (data ? where.data : where.tensor) <= 1) return what;
    std::string group;
    for (const int d : data ? where.data_group(where.pipeline_rank) : where.tensor_group()) {
      group += (group.empty() ? "" : ", ") + std::to_string(d);
    }
    const std::string name = data ? "data group (ranks " : "tensor-parallel group (ranks ";
    return (lost ? "lost a rank of its " : "a rank of its ") + name + group +
           (lost ? ") (it exited or died): " : ") did not answer in time: ") + what;
  }
  const int peer = where.device_at(ps::peer_of(p, a).value);
  if (lost) return "lost rank " + std::to_string(peer) + " (it closed the connection: it exited or died): " + what;
  if (late) return "rank " + std::to_string(peer) + " did not answer in time: " + what;
  return what;
}

// The CPUs this process may run on: its affinity mask (taskset, cgroup
// cpusets), else the machine's.
int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Intra-op threads when --threads does not say: the usable cores over the ranks on this host.
int default_threads(int cores, const RankEnv& env) {
  return std::max(1, cores / std::max(1, env.local_world_size));
}

// Why `device` cannot serve `ranks_here` ranks on this host ("" when it can).
std::string device_problem(Device device, int ranks_here) {
  if (device == Device::Cpu) return "";
  if (!torch::cuda::is_available()) return "--device cuda, but no CUDA device is usable here";
  const int gpus = static_cast<int>(torch::cuda::device_count());
  if (ranks_here > gpus) {
    return "--device cuda with " + std::to_string(ranks_here) + " ranks on this host, but only " + std::to_string(gpus) +
           " CUDA device(s) are visible: NCCL needs a GPU of its own for each rank (it refuses two ranks on one GPU); "
           "use at most " + std::to_string(gpus) + " rank(s) per host, or --device cpu";
  }
  return "";
}

at::Device pick_device(const RunConfig& c, const RankEnv& env) {
  if (const auto why = device_problem(c.device, env.local_world_size); !why.empty()) {
    throw Error("rank " + std::to_string(env.rank) + ": " + why);
  }
  if (c.device == Device::Cpu) return at::kCPU;
  const int index = env.local_rank % static_cast<int>(torch::cuda::device_count());
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  // fp32 means IEEE fp32, as on the CPU: cuDNN's convolutions default to
  // TF32 (10-bit mantissa), which moved a conv net's weights by 0.3 from
  // the CPU's in three steps. cuBLAS is IEEE by default; say so anyway.
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  return {at::kCUDA, static_cast<c10::DeviceIndex>(index)};
}

// One-time allocations of the first matrix products on this thread's stream
// (the cuBLAS / cuBLASLt workspaces: 32 MiB on Hopper) would otherwise land
// in the first forward's allocator growth and be counted as stash.
void warm_up_cuda(at::Device device, at::ScalarType dtype) {
  for (const auto t : {at::kFloat, dtype}) {
    const auto a = at::ones({8, 8}, at::TensorOptions(t).device(device));
    (void)at::addmm(a, a, a);
    (void)at::linear(a, a, a[0]);
    (void)at::matmul(a.view({2, 4, 8}), a);
  }
  torch::cuda::synchronize();
}

// CUDA: the host waits on the GPU (a synchronize, a copy from the host)
// behind NCCL operations it does not see; when a peer is gone they never
// complete, and ProcessGroupNCCL's watchdog (given a longer timeout, see
// Comm) would end the process with SIGABRT and a stack trace. This ends
// the rank first, naming what it was doing, its peers and why. It also
// outlives the rank's teardown after an error (aborting NCCL communicators
// whose peer died can block): when leaving takes longer than the timeout,
// it ends the rank with the error that made it leave.
class ProgressWatch {
 public:
  ProgressWatch(double timeout_s, std::string peers) : timeout_s_(timeout_s), peers_(std::move(peers)) {
    thread_ = std::thread([this] { loop(); });
  }
  ~ProgressWatch() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  ProgressWatch(const ProgressWatch&) = delete;
  ProgressWatch& operator=(const ProgressWatch&) = delete;

  void at(std::string what) {
    std::lock_guard lock(mutex_);
    what_ = std::move(what);
    since_ = std::chrono::steady_clock::now();
  }

  // The rank is leaving with `error`: from now on, the time it takes.
  void leaving(std::string error) {
    std::lock_guard lock(mutex_);
    what_ = std::move(error);
    leaving_ = true;
    since_ = std::chrono::steady_clock::now();
  }

 private:
  void loop() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(200));
      const double stuck = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
      if (stop_ || stuck <= timeout_s_) continue;
      if (leaving_) {
        std::fprintf(stderr, "pipetwin: error: %s\n(this rank then spent %.0f s leaving, its transfers with rank(s) %s "
                     "never ending; ended without finishing)\n", what_.c_str(), stuck, peers_.c_str());
        std::fflush(stderr);
        std::_Exit(1);
      }
      std::fprintf(stderr,
                   "pipetwin: error: %s: no progress for %.0f s: the GPU waits for a transfer with rank(s) %s that "
                   "never completed (a peer exited, died or is stuck; --timeout sets how long to wait)\n",
                   what_.c_str(), stuck, peers_.c_str());
      std::fflush(stderr);
      std::_Exit(1);  // NCCL may hold this process's threads: no unwinding
    }
  }

  double timeout_s_;
  std::string peers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false, leaving_ = false;
  std::string what_ = "starting";
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  std::thread thread_;
};

std::string peers_of(const ps::Program& p, const Placement& where) {
  std::set<int> peers;
  for (const auto& a : p.ranks.at(where.pipeline_rank)) {
    if (ps::is_transfer(a.op)) peers.insert(where.device_at(ps::peer_of(p, a).value));
  }
  for (const int d : where.data_group(where.pipeline_rank)) peers.insert(d);
  for (const int t : where.tensor_group()) peers.insert(t);
  peers.erase(where.device_at(where.pipeline_rank));
  std::string out;
  for (const int r : peers) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

// The replicas hold the same weights (their reductions are the same sums):
// replica 0's are saved, ZeRO-3's gathered first by every replica (a
// collective). T > 1: every member gathers its stages' shards (a collective);
// member 0 writes. E > 1: replica 0's expert group gathers the experts.
void save_weights(const std::string& dir, TorchBackend& backend, const Placement& where) {
  if (backend.data_parallel() != nullptr) backend.data_parallel()->gather_weights();
  if (where.replica >= where.expert) return;
  const bool write = where.member == 0 && where.replica == 0;
  if (write) std::filesystem::create_directories(dir);
  for (const auto& [_, stage] : backend.stages()) {
    const auto weights = stage->weights();
    if (!write) continue;
    for (const auto& [layer, tensors] : weights) {
      const std::string path = dir + "/layer_" + std::to_string(layer) + ".pt";
      const std::string tmp = path + ".tmp" + std::to_string(::getpid());
      torch::save(tensors, tmp);
      std::filesystem::rename(tmp, path);
    }
  }
}

// What the data group runs, in words.
std::string data_collectives(const ps::Program& p) {
  std::string kind = "all-reduce";
  if (p.zero == 1) kind = "reduce-scatter, then all-gather in STEP";
  if (p.zero == 2) kind = "reduce-scatter per layer after each micro-batch's backward, all-gather per layer in STEP";
  if (p.zero == 3) {
    kind = p.reshard_after_forward
               ? "all-gather per layer inside F, R, B and I, reduce-scatter per layer after each micro-batch's backward"
               : "all-gather per layer in the step's first F, reduce-scatter per layer in REDUCE_GRAD";
  }
  if (p.shard_group > 0 && p.shard_group < p.data_parallel) {
    kind += "; HSDP: inside groups of " + std::to_string(p.shard_group) +
            " replicas, the reduced shard all-reduced across the groups in STEP";
  }
  return kind;
}

// What this process's groups reduce, for the report (the durations are the
// REDUCE_GRAD actions of the trace; a tensor group's collectives run inside F, B, R).
nlohmann::json describe_collectives(const ps::Program& p, const Placement& where, const TorchBackend& backend,
                                    Device device) {
  nlohmann::json out = nlohmann::json::array();
  const std::string via(backend_name(device));
  if (const DataParallel* dp = backend.data_parallel()) {
    const auto buckets = dp->bucket_counts();
    for (const auto& [stage, bytes] : dp->stage_bytes()) {
      out.push_back({{"dimension", "data"},
                     {"stage", stage},
                     {"kind", data_collectives(p)},
                     {"bytes", bytes},
                     {"group", where.data_group(where.pipeline_rank)},
                     {"backend", via}});
      // Bucketed: how many, and how many went out before the last backward ended (in the last step).
      if (const auto b = buckets.find(stage); b != buckets.end()) {
        out.back()["buckets"] = b->second.first;
        out.back()["buckets_in_backward"] = b->second.second;
      }
    }
  }
  if (where.tensor > 1) {
    out.push_back({{"dimension", "tensor"},
                   {"kind", p.sequence_parallel ? "all-gather and reduce-scatter per layer, inside F, B, R"
                                                : "all-reduce per layer, inside F, B, R"},
                   {"group", where.tensor_group()},
                   {"backend", via}});
  }
  if (where.expert > 1) {
    out.push_back({{"dimension", "expert"},
                   {"kind", "all-to-all per routed block: dispatch and combine in F and R, both again in B (or I)"},
                   {"group", where.expert_group(where.pipeline_rank)}, {"backend", via}});
    if (where.expert < where.data) {
      out.push_back({{"dimension", "expert data"}, {"kind", "all-reduce of the routed experts' gradients, with the data group's"},
                     {"group", where.expert_peers(where.pipeline_rank)}, {"backend", via}});
    }
  }
  return out;
}

// This replica's share of the mini-batch: the samples [d M b, (d + 1) M b).
Batch share(Batch batch, const Placement& where, std::int64_t per_replica) {
  if (where.data == 1) return batch;
  batch.inputs = batch.inputs.narrow(0, where.replica * per_replica, per_replica);
  batch.targets = batch.targets.narrow(0, where.replica * per_replica, per_replica);
  return batch;
}

// One mini-batch: every action of this rank's list in its order, then its
// timeline and (on the last stage) its loss into the report.
void run_step(int step, const ps::Program& p, const RankEnv& env, const Placement& where, TorchBackend& backend,
              const SyntheticTask& task, std::optional<ProgressWatch>& watch, RankReport& report) {
  const std::string me = "rank " + std::to_string(env.rank);
  const std::string at_step = me + ", step " + std::to_string(step);
  if (watch) watch->at(at_step + ", its start");
  try {
    backend.begin_step(step, share(task.minibatch(step), where, task.batch() / where.data));
  } catch (const std::exception& e) {
    throw Error(at_step + ", its start: " + message_of(e));
  }
  const double collectives_before = tp_collective_seconds();
  const ExchangeTotals exchanges_before = expert_exchange_totals();
  const DataParallel::Gathers gathers_at_start =
      backend.data_parallel() != nullptr ? backend.data_parallel()->step_gathers() : DataParallel::Gathers{};
  const double gathers_before = backend.data_parallel() != nullptr ? backend.data_parallel()->gather_wait_s() : 0;
  ps::RankInterpreter interpreter(p, ps::RankId{where.pipeline_rank});
  while (!interpreter.done()) {
    const ps::Action action = interpreter.next();
    if (watch) {
      watch->at(at_step + ", action " + ps::to_string(action) + " (#" + std::to_string(interpreter.position()) +
                " of its list)");
    }
    try {
      interpreter.step(backend);
    } catch (const std::exception& e) {
      throw Error(me + ", step " + std::to_string(step) + ", action " + ps::to_string(action) + " (#" +
                  std::to_string(interpreter.position()) + " of its list): " + explain(message_of(e), p, where, action));
    }
  }
  if (watch) watch->at(me + ", end of step " + std::to_string(step));
  try {
    ps::Timeline t;
    t.ranks.resize(p.num_ranks);
    t.ranks[where.pipeline_rank] = backend.end_step();
    report.steps.push_back(std::move(t));
    if (const double cpu = backend.step_compute_cpu_s(); cpu >= 0) report.compute_cpu_s.push_back(cpu);
    if (where.tensor > 1) report.tp_collective_s.push_back(tp_collective_seconds() - collectives_before);
    if (where.data > 1 && (p.zero == 1 || p.zero == 2)) {
      const DataParallel::Gathers now = backend.data_parallel()->step_gathers();
      report.all_gather.push_back({{"calls", now.calls - gathers_at_start.calls},
                                   {"seconds", now.seconds - gathers_at_start.seconds},
                                   {"bytes", now.part_bytes - gathers_at_start.part_bytes}});
    }
    if (where.expert > 1) {
      const ExchangeTotals now = expert_exchange_totals();
      report.all_to_all.push_back({{"calls", now.calls - exchanges_before.calls},
                                   {"seconds", now.seconds - exchanges_before.seconds},
                                   {"bytes", now.bytes - exchanges_before.bytes}});
    }
    if (where.data > 1 && p.zero >= 2) report.gather_wait_s.push_back(backend.data_parallel()->gather_wait_s() - gathers_before);
  } catch (const std::exception& e) {
    throw Error(me + ", end of step " + std::to_string(step) + ": " + message_of(e));
  }
  if (backend.holds_last_stage()) {
    const double loss = backend.step_loss();
    if (!std::isfinite(loss)) {
      throw Error(me + ", step " + std::to_string(step) + ": the loss is " + std::to_string(loss) +
                  ": the training diverged (a smaller --lr?)");
    }
    report.losses.push_back(loss);
  }
}

}  // namespace

void check_runnable(const models::Model& model, const ps::Program& p) {
  if (model.gradients() != model.precision) {
    throw Error("run: " + model.name + " has grad_precision " + std::string(models::precision_name(model.gradients())) +
                ", but the executor keeps each gradient in its weight's precision (" +
                std::string(models::precision_name(model.precision)) +
                "): grad_precision is for planning a Megatron-LM-style run; leave it out to run");
  }
  for (int l = 0; l < static_cast<int>(model.layers.size()) && p.tensor_parallel > 1; ++l) {
    check_tensor_parallel(model, l, p.tensor_parallel, p.sequence_parallel);
  }
  if (p.data_parallel > 1) {
    for (const int v : p.weight_versions) {
      if (v > 1) {
        throw Error("run: -d " + std::to_string(p.data_parallel) + " with weight stashing (" + std::to_string(v) +
                    " weight versions): asynchronous replicas would each hold their own versions; use a synchronous "
                    "schedule, or -d 1");
      }
    }
  }
}

// Keeps freed heap memory in the process: no allocation is served by its own
// mmap (which free() would unmap) and the heap's top is never trimmed. With
// glibc's defaults, a GPipe step whose backwards free many stashed activations
// hands those pages back to the kernel and faults them in again, zeroed, on
// the next allocations: in resnet-small K=1 M=8 (micro-batch 2) that took the
// backwards after the first from 84 to 113 ms and the step from 0.99 to 1.19 s
// (scripts/bench_malloc.py, docs/execution.md). A GPU's caching allocator never does this.
bool keep_freed_memory() {
#if defined(__GLIBC__)
  return ::mallopt(M_MMAP_MAX, 0) == 1 && ::mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1;
#else
  return false;
#endif
}

void check_device(Device device, int ranks_here) {
  if (const auto why = device_problem(device, ranks_here); !why.empty()) throw Error(why);
}

std::optional<RunResult> run_rank(const RunConfig& c, const RankEnv& env) {
  const auto& p = c.program;
  const std::string me = "rank " + std::to_string(env.rank);
  if (env.world_size != p.num_devices()) {
    throw Error(me + ": WORLD_SIZE is " + std::to_string(env.world_size) + " but the schedule has " +
                (p.is_pipeline_only() ? std::to_string(p.num_ranks) + " ranks"
                                      : std::to_string(p.num_devices()) + " devices (T " + std::to_string(p.tensor_parallel) +
                                            " x K " + std::to_string(p.num_ranks) + " x D " +
                                            std::to_string(p.data_parallel) + ")"));
  }
  check_runnable(c.model, p);
  const Placement where = Placement::of(p, env.rank);
  if (p.partition.size() != static_cast<std::size_t>(p.num_stages())) throw Error("the program has no partition");
  const at::Device device = pick_device(c, env);
  const bool kept = !device.is_cuda() && c.keep_freed_memory && keep_freed_memory();
  if (device.is_cuda()) {
    ps::check_in_order_channels(p);
    warm_up_cuda(device, dtype_of(c.model.precision));
  }
  const int cores = usable_cores();
  const int threads = c.threads > 0 ? c.threads : default_threads(cores, env);
  at::set_num_threads(threads);
  MemoryMeter* meter = device.is_cuda() ? nullptr : &MemoryMeter::install(p.num_stages());

  // Declared before what it watches, so that it runs on while they are torn
  // down after an error.
  std::optional<ProgressWatch> watch;
  Comm comm(env, device.is_cuda(), std::chrono::milliseconds(static_cast<long>(c.timeout_s * 1000)));
  TorchBackend backend(c, comm, device, meter);
  // Every replica derives the whole mini-batch (M b D samples) and takes its share.
  const SyntheticTask task(c.model, c.seed, c.microbatch_size * p.num_microbatches * p.data_parallel);
  RankReport report;
  report.rank = env.rank;
  report.pipeline_rank = where.pipeline_rank;
  report.replica = where.replica;
  report.member = where.member;
  report.host = comm.host();
  report.threads = threads;
  report.heap = device.is_cuda() ? "cuda-caching" : kept ? "keep" : "system";
  report.host_cores = cores, report.sched_slice_s = host_scheduler_slice_s();
  report.clock_offset_s = comm.clock_offset();
  report.clock_uncertainty_s = comm.clock_uncertainty();
  comm.barrier("start");
  if (meter != nullptr) {
    meter->reset_peaks();
    report.baseline_bytes = static_cast<double>(meter->live_bytes());
  } else {
    MemoryMeter::cuda_reset_peak(device.index());
    report.baseline_bytes = static_cast<double>(MemoryMeter::cuda_live_bytes(device.index()));
  }

  if (device.is_cuda() && p.num_devices() > 1) watch.emplace(c.timeout_s, peers_of(p, where));
  try {
    report.host_samples.push_back(sample_host(true));
    for (int step = 0; step < c.steps; ++step) {
      run_step(step, p, env, where, backend, task, watch, report);
      report.host_samples.push_back(sample_host(step + 1 == c.steps));
    }
  } catch (const std::exception& e) {
    if (watch) watch->leaving(e.what());
    throw;
  }

  watch.reset();
  report.stage_peak_stash_bytes = backend.stage_peak_stash_bytes();
  for (const auto& [s, stage] : backend.stages()) report.stage_peak_versions.emplace_back(s, stage->peak_versions());
  report.collectives = describe_collectives(p, where, backend, c.device);
  report.peak_allocated_bytes = static_cast<double>(meter != nullptr ? meter->peak_bytes() : MemoryMeter::cuda_peak_bytes(device.index()));
  report.peak_rss_bytes = static_cast<double>(MemoryMeter::peak_rss_bytes());
  report.gloo_backoffs = static_cast<double>(gloo_backoffs());
  if (!c.save_weights.empty()) save_weights(c.save_weights, backend, where);
  comm.publish("report/" + std::to_string(env.rank), report.to_json().dump());
  if (env.rank != 0) return std::nullopt;
  std::vector<RankReport> reports;
  for (int r = 0; r < env.world_size; ++r) {
    reports.push_back(RankReport::from_json(nlohmann::json::parse(comm.fetch("report/" + std::to_string(r)))));
  }
  return assemble(std::move(reports), p.num_stages());
}

}  // namespace pipetwin::exec
