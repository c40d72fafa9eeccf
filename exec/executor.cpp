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
#include <cstdio>
#include <filesystem>
#include <thread>

#include "exec/report.hpp"
#include "exec/run.hpp"
#include "exec/torch_backend.hpp"
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
  return nl == std::string::npos ? what : what.substr(0, nl);
}

std::string explain(const std::string& what, const ps::Program& p, const ps::Action& a) {
  if (!ps::is_transfer(a.op)) return what;
  const int peer = ps::peer_of(p, a).value;
  const bool lost = what.find("onnection closed") != std::string::npos || what.find("reset by peer") != std::string::npos ||
                    what.find("Broken pipe") != std::string::npos || what.find("EOF") != std::string::npos;
  if (lost) return "lost rank " + std::to_string(peer) + " (it closed the connection: it exited or died): " + what;
  if (what.find("imed out") != std::string::npos) return "rank " + std::to_string(peer) + " did not answer in time: " + what;
  return what;
}

int default_threads(const RankEnv& env) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, env.local_world_size));
}

at::Device pick_device(const RunConfig& c, const RankEnv& env) {
  if (c.device == "cpu") return at::kCPU;
  if (c.device != "cuda") throw Error("--device must be cpu or cuda, got '" + c.device + "'");
  if (!torch::cuda::is_available()) {
    throw Error("rank " + std::to_string(env.rank) + ": --device cuda, but no CUDA device is usable here");
  }
  const int index = env.local_rank % static_cast<int>(torch::cuda::device_count());
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  return {at::kCUDA, static_cast<c10::DeviceIndex>(index)};
}

void save_weights(const std::string& dir, const TorchBackend& backend) {
  std::filesystem::create_directories(dir);
  for (const auto& [_, stage] : backend.stages()) {
    for (const auto& [layer, tensors] : stage->weights()) {
      const std::string path = dir + "/layer_" + std::to_string(layer) + ".pt";
      const std::string tmp = path + ".tmp" + std::to_string(::getpid());
      torch::save(tensors, tmp);
      std::filesystem::rename(tmp, path);
    }
  }
}

}  // namespace

std::optional<RunResult> run_rank(const RunConfig& c, const RankEnv& env) {
  const auto& p = c.program;
  const std::string me = "rank " + std::to_string(env.rank);
  if (env.world_size != p.num_ranks) {
    throw Error(me + ": WORLD_SIZE is " + std::to_string(env.world_size) + " but the schedule has " +
                std::to_string(p.num_ranks) + " ranks");
  }
  if (p.partition.size() != static_cast<std::size_t>(p.num_stages())) throw Error("the program has no partition");
  const at::Device device = pick_device(c, env);
  if (device.is_cuda()) ps::check_in_order_channels(p);
  const int threads = c.threads > 0 ? c.threads : default_threads(env);
  at::set_num_threads(threads);
  MemoryMeter* meter = device.is_cuda() ? nullptr : &MemoryMeter::install(p.num_stages());

  Comm comm(env, device.is_cuda(), std::chrono::milliseconds(static_cast<long>(c.timeout_s * 1000)));
  TorchBackend backend(c, comm, device, meter);
  const SyntheticTask task(c.model, c.seed, c.microbatch_size * p.num_microbatches);
  RankReport report;
  report.rank = env.rank;
  report.host = comm.host();
  report.threads = threads;
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

  for (int step = 0; step < c.steps; ++step) {
    backend.begin_step(step, task.minibatch(step));
    ps::RankInterpreter interpreter(p, ps::RankId{env.rank});
    while (!interpreter.done()) {
      const ps::Action action = interpreter.next();
      try {
        interpreter.step(backend);
      } catch (const std::exception& e) {
        throw Error(me + ", step " + std::to_string(step) + ", action " + ps::to_string(action) + " (#" +
                    std::to_string(interpreter.position()) + " of its list): " + explain(message_of(e), p, action));
      }
    }
    try {
      ps::Timeline t;
      t.ranks.resize(p.num_ranks);
      t.ranks[env.rank] = backend.end_step();
      report.steps.push_back(std::move(t));
    } catch (const std::exception& e) {
      throw Error(me + ", end of step " + std::to_string(step) + ": " + message_of(e));
    }
    if (backend.holds_last_stage()) report.losses.push_back(backend.step_loss());
  }

  report.stage_peak_stash_bytes = backend.stage_peak_stash_bytes();
  for (const auto& [s, stage] : backend.stages()) report.stage_peak_versions.emplace_back(s, stage->peak_versions());
  report.peak_allocated_bytes = static_cast<double>(meter != nullptr ? meter->peak_bytes() : MemoryMeter::cuda_peak_bytes(device.index()));
  report.peak_rss_bytes = static_cast<double>(MemoryMeter::peak_rss_bytes());
  if (!c.save_weights.empty()) save_weights(c.save_weights, backend);

  comm.publish("report/" + std::to_string(env.rank), report.to_json().dump());
  if (env.rank != 0) return std::nullopt;
  std::vector<RankReport> reports;
  for (int r = 0; r < env.world_size; ++r) {
    reports.push_back(RankReport::from_json(nlohmann::json::parse(comm.fetch("report/" + std::to_string(r)))));
  }
  return assemble(std::move(reports), p.num_stages());
}

}  // namespace pipetwin::exec
