// `pipetwin run`: execute one configuration for real with LibTorch.
//
// Without RANK in the environment this process is the launcher: it checks
// the configuration, then starts K processes of itself (torchrun-style
// environment) and watches them. With RANK set (by the launcher, torchrun,
// Slurm or mpirun) it is one rank; rank 0 prints the summary and writes the
// measured trace.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "calibration/noise.hpp"
#include "cli/app.hpp"
#include "cli/commands.hpp"
#include "cli/scenario_options.hpp"
#include "exec/launcher.hpp"
#include "exec/run.hpp"
#include "models/summary.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "schedule/measured_costs.hpp"
#include "schedule/names.hpp"
#include "schedule/trace.hpp"

namespace pipetwin::cli {
namespace {

// --malloc: whether freed memory stays in the process.
constexpr schedule::NameTable<bool, 2> kHeaps{"malloc policy", {{{true, "keep"}, {false, "system"}}}};

struct Options {
  twin::ScenarioSpec scenario;
  int steps = 3;
  std::string device = "cpu", trace, save_weights, summary_out, heap = "keep";
  double lr = 0.001;
  std::uint64_t seed = 0;
  int threads = 0, master_port = 0;
  double timeout = 120;
  bool json = false;
};

// The run's noise with what calibration/noise.hpp makes of it: busy, and the
// relative error the measurement alone may carry.
nlohmann::json noise_json(const exec::RunNoise& noise) {
  auto j = noise.to_json();
  const auto n = calibration::Noise::from_json(j);
  j["busy"] = n.busy();
  j["band_rel"] = n.band();
  return j;
}

nlohmann::json measured_json(const exec::RunResult& r, const twin::Scenario& sc) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rank : r.ranks) {
    ranks.push_back({{"rank", rank.rank}, {"pipeline_rank", rank.pipeline_rank < 0 ? rank.rank : rank.pipeline_rank},
                     {"replica", rank.replica}, {"host", rank.host}, {"threads", rank.threads},
                     {"malloc", rank.heap}, {"host_cores", rank.host_cores}, {"sched_slice_s", rank.sched_slice_s},
                     {"gloo_backoffs", rank.gloo_backoffs},
                     {"peak_allocated_bytes", rank.peak_allocated_bytes}, {"baseline_bytes", rank.baseline_bytes},
                     {"peak_rss_bytes", rank.peak_rss_bytes}, {"clock_offset_s", rank.clock_offset_s},
                     {"clock_uncertainty_s", rank.clock_uncertainty_s}});
    if (!rank.collectives.empty()) ranks.back()["collectives"] = rank.collectives;
    // T > 1: per step, the seconds it spent in its tensor group's collectives.
    if (!rank.tp_collective_s.empty()) ranks.back()["tp_collective_s"] = rank.tp_collective_s;
    // E > 1: per step, its expert group's all-to-alls (calls, seconds, bytes sent).
    if (!rank.all_to_all.empty()) ranks.back()["all_to_all"] = rank.all_to_all;
    // ZeRO-1: per step, its STEPs' all-gathers (calls, seconds, bytes of its parts).
    if (!rank.all_gather.empty()) ranks.back()["all_gather"] = rank.all_gather;
    // ZeRO-2 and 3: per step, the seconds it waited for the weights' all-gathers.
    if (!rank.gather_wait_s.empty()) ranks.back()["gather_wait_s"] = rank.gather_wait_s;
  }
  nlohmann::json stages = nlohmann::json::array();
  for (int s = 0; s < sc.program.num_stages(); ++s) {
    stages.push_back({{"stage", s}, {"peak_stash_bytes", r.stage_peak_stash_bytes.at(s)},
                      {"predicted_peak_stash_bytes", sc.predicted_stash_bytes(s)},
                      {"weight_versions", r.stage_weight_versions.at(s)}});
  }
  nlohmann::json measured{{"steps", r.step_times_s.size()}, {"step_times_s", r.step_times_s},
          {"bubble_fractions", r.bubble_fractions}, {"losses", r.losses},
          {"representative_step", r.representative_step}, {"wall_s", r.wall_s}, {"ranks", ranks}, {"stages", stages},
          {"noise", noise_json(r.noise)}};
  // With D > 1: where the whole data group had posted each reduction of the
  // trace's step (calibrate times the collectives from there).
  if (r.representative_step < static_cast<int>(r.reduction_posts.size()) &&
      !r.reduction_posts[r.representative_step].empty()) {
    measured["reduction_posts_s"] = r.reduction_posts[r.representative_step];
  }
  return measured;
}

void print_text(const exec::RunResult& r, const twin::Scenario& sc, const models::RunSummary& s, const nlohmann::json& m,
                const Options& o) {
  std::printf("%s\n", sc.headline().c_str());
  std::printf("measured     %zu steps on %s (%s), median step %d shown; step times:", r.step_times_s.size(),
              o.device.c_str(), std::string(exec::backend_name(exec::parse_device(o.device))).c_str(), r.representative_step);
  for (const double t : r.step_times_s) std::printf(" %.4g", t);
  std::printf(" s\n");
  std::printf("step time    %.6g s   throughput %.6g samples/s\n", s.step_time_s, s.throughput);
  std::printf("bubble       %.2f%% overall; idle per rank:", 100 * s.bubble);
  for (const double i : s.idle) std::printf(" %.1f%%", 100 * i);
  std::printf("\n");
  std::printf("efficiency   %.3f: the schedule allows %.6g s on these per-stage times with free transfers\n",
              m["pipeline_efficiency"].get<double>(), m["bubble_limited_step_s"].get<double>());
  if (!r.losses.empty()) std::printf("loss         %.5g -> %.5g\n", r.losses.front(), r.losses.back());
  std::printf("stash        peak bytes per stage, measured (predicted by the IR's accounting):\n");
  for (const auto& st : m["stages"]) {
    std::printf("  stage %d: %.4g MB (%.4g MB)%s\n", st["stage"].get<int>(), st["peak_stash_bytes"].get<double>() / 1e6,
                st["predicted_peak_stash_bytes"].get<double>() / 1e6,
                st["weight_versions"].get<int>() > 1
                    ? (", " + std::to_string(st["weight_versions"].get<int>()) + " weight versions").c_str()
                    : "");
  }
  std::printf("ranks        peak allocated / peak RSS (MB), threads, clock offset to rank 0 (uncertainty):\n");
  for (const auto& rank : r.ranks) {
    std::printf("  rank %d on %s: %.1f / %.1f, %d, %+.1f us (+-%.1f us)\n", rank.rank, rank.host.c_str(),
                rank.peak_allocated_bytes / 1e6, rank.peak_rss_bytes / 1e6, rank.threads, rank.clock_offset_s * 1e6,
                rank.clock_uncertainty_s * 1e6);
  }
  const auto noise = calibration::Noise::from_json(m["noise"]);
  std::printf("noise        %s\n", noise.describe().c_str());
  if (noise.busy()) std::printf("             %s\n", calibration::judge(std::nullopt, noise).why.c_str());
  if (!o.trace.empty()) std::printf("trace        %s (Chrome trace of step %d: open in Perfetto)\n", o.trace.c_str(), r.representative_step);
}

// The run's outputs, checked before any rank starts: a run of minutes must not
// end in an output it cannot write (with the others written), nor write one
// file over another or over one of its inputs.
void check_outputs(const Options& o) {
  namespace fs = std::filesystem;
  struct Named {
    std::string flag, path;
  };
  std::vector<Named> outs;
  if (!o.trace.empty()) outs.push_back({"--trace", o.trace});
  if (!o.summary_out.empty()) outs.push_back({"--summary", o.summary_out});
  if (!o.save_weights.empty()) outs.push_back({"--save-weights", o.save_weights});
  std::vector<Named> ins{{"--model", o.scenario.model}, {"--hardware", o.scenario.hardware},
                         {"--partition", o.scenario.partition}, {"--schedule", o.scenario.schedule}};
  std::error_code ec;
  const auto real = [&](const std::string& p) { return fs::weakly_canonical(p, ec).string(); };
  for (std::size_t i = 0; i < outs.size(); ++i) {
    for (std::size_t j = i + 1; j < outs.size(); ++j) {
      if (real(outs[i].path) == real(outs[j].path)) {
        throw Error(outs[j].path + ": given to both " + outs[i].flag + " and " + outs[j].flag);
      }
    }
    for (const auto& in : ins) {
      if (!in.path.empty() && fs::is_regular_file(in.path, ec) && real(in.path) == real(outs[i].path)) {
        throw Error(outs[i].path + ": " + outs[i].flag + " would write over the " + in.flag + " file");
      }
    }
    const fs::path target = real(outs[i].path);
    const bool folder_wanted = outs[i].flag == "--save-weights";
    if (fs::exists(target, ec) && fs::is_directory(target, ec) != folder_wanted) {
      throw Error(outs[i].path + ": " + outs[i].flag + (folder_wanted ? " needs a folder, and this is a file"
                                                                      : " needs a file, and this is a folder"));
    }
    fs::path parent = target.parent_path();  // the nearest folder that exists: --save-weights creates the rest
    while (folder_wanted && !parent.empty() && !fs::exists(parent, ec)) parent = parent.parent_path();
    if (parent.empty()) parent = ".";
    if (!fs::is_directory(parent, ec)) {
      throw Error(outs[i].path + ": " + outs[i].flag + ": the folder " + parent.string() + " does not exist");
    }
    if (::access(parent.c_str(), W_OK) != 0) {
      throw Error(outs[i].path + ": " + outs[i].flag + ": cannot write in " + parent.string());
    }
  }
}

// What `simulate` prices and the executor does not run: torchtitan's
// per-operator recompute, FP8, mixtures of experts, context parallelism,
// ZeRO-2 and 3 under sequence parallelism, and buckets beside ZeRO.
void refuse_simulated_only(const twin::Scenario& sc) {
  if (sc.request.checkpoint.by_op()) {
    throw Error("--recompute op: simulated only; the executor recomputes whole stages (none, full, except-last), layer "
                "groups (uniform[:N], block:N) or attention cores (selective)");
  }
  if (sc.model.precision == models::Precision::FP8) {
    throw Error("precision fp8: simulated only; the executor runs fp32, bf16 or fp16 (this CPU has no FP8 products)");
  }
  if (sc.model.family == "moe") {
    exec::check_moe_run(sc.model, sc.program.expert_parallel);  // -t > 1: refused as for family llm
  }
  if (sc.program.expert_parallel > 1) {
    const char* what = sc.program.zero > 0                                 ? "--zero"
                       : sc.program.shard_group > 0                        ? "--shard-group"
                       : sc.request.gradient_bucket_bytes > 0 ||
                               sc.request.gradient_first_bucket_bytes > 0 ? "--grad-bucket-mb"
                                                                           : nullptr;
    if (what != nullptr) {
      throw Error(std::string("--expert ") + std::to_string(sc.program.expert_parallel) + " with " + what +
                  ": simulated only; the executor reduces the experts' gradients apart, whole (--zero 0, no buckets)");
    }
  }
  if (sc.program.context_parallel > 1) {
    throw Error("--context " + std::to_string(sc.program.context_parallel) +
                ": simulated only; the executor gives each replica whole samples");
  }
  if (sc.program.zero > 1 && sc.program.sequence_parallel) {
    throw Error("--zero " + std::to_string(sc.program.zero) +
                " with --sequence-parallel: simulated only; the executor's ZeRO-2 and 3 reduce each micro-batch's "
                "gradients before the tensor group has summed its replicated ones");
  }
  const bool buckets = sc.request.gradient_bucket_bytes > 0 || sc.request.gradient_first_bucket_bytes > 0;
  if (buckets && (sc.program.zero > 0 || sc.program.sequence_parallel)) {
    throw Error(std::string("--grad-bucket-mb with ") + (sc.program.zero > 0 ? "--zero" : "--sequence-parallel") +
                ": simulated only; the executor's buckets are DDP's all-reduces (--zero 0, no sequence parallelism)");
  }
}

int run_rank(const Options& o, const exec::RankEnv& env) {
  const auto sc = twin::build_scenario(o.scenario);
  refuse_simulated_only(*sc);  // also under torchrun, Slurm or mpirun, where no launcher checked it
  if (env.rank == 0) print_notes(o.scenario.schedule, sc->notes);
  exec::RunConfig c;
  c.model = sc->model;
  c.program = sc->program;
  c.microbatch_size = sc->request.microbatch_size;
  c.checkpoint = sc->request.checkpoint;
  c.bucket_bytes = sc->request.gradient_bucket_bytes;
  c.first_bucket_bytes = sc->request.gradient_first_bucket_bytes;
  c.steps = o.steps;
  c.device = exec::parse_device(o.device);
  c.optimizer = sc->request.optimizer;  // parsed once, with the scenario
  c.lr = o.lr;
  c.seed = o.seed;
  c.threads = o.threads;
  c.keep_freed_memory = kHeaps.parse(o.heap);
  c.timeout_s = o.timeout;
  c.save_weights = o.save_weights;
  const auto result = exec::run_rank(c, env);
  if (!result) return 0;

  const auto& timeline = result->steps.at(result->representative_step);
  auto summary = models::summarize(timeline, sc->samples, *sc->costs, sc->program.partition, "measured", &sc->program);
  auto measured = measured_json(*result, *sc);
  // Pipeline efficiency: the step the schedule's dependencies allow on the
  // measured per-stage times (transfers free), against the measured step.
  const double bound = schedule::bubble_limited_step(timeline, sc->program);
  measured["bubble_limited_step_s"] = bound;
  measured["pipeline_efficiency"] = summary.step_time_s > 0 ? bound / summary.step_time_s : 0;
  auto j = sc->describe();
  j["device"] = o.device;
  j["summary"] = summary.to_json();
  j["measured"] = measured;
  if (!o.trace.empty()) {
    auto meta = twin::trace_metadata(*sc, o.scenario, "pipetwin run");
    meta.sections = {{"device", o.device}, {"summary", j["summary"]}, {"measured", j["measured"]},
                     {"step", result->representative_step}};
    schedule::write_chrome_trace(o.trace, {timeline, meta.to_json(), {}});
  }
  if (!o.summary_out.empty()) schedule::write_file_atomic(o.summary_out, j.dump(1) + "\n");
  if (o.json) {
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    print_text(*result, *sc, summary, measured, o);
  }
  return 0;
}

}  // namespace

Run add_run_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  o->scenario.hardware = "cpu";
  o->scenario.optimizer = "adam";
  auto* cmd = app.add_subcommand("run", "Train one configuration for real: LibTorch, one process per rank, c10d");
  add_scenario_options(cmd, o->scenario);
  cmd->get_option("--hardware")->required(false)->description(
      "Hardware preset or YAML file, for the partition and the predicted memory (default: cpu)");
  cmd->add_option("--steps", o->steps, "Mini-batches to train")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_option("--device", o->device, "cpu (Gloo) or cuda (NCCL)")->check(CLI::IsMember(exec::device_names()))->capture_default_str();
  cmd->add_option("--lr", o->lr, "Learning rate")
      ->check(kPositive)
      ->check(CLI::Validator(
          [](std::string& v) { return std::isfinite(std::stod(v)) ? std::string() : "must be a finite number, got " + v; },
          "FINITE"))
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the weights and of the synthetic data")->capture_default_str();
  cmd->add_option("--threads", o->threads, "Intra-op threads per rank (0: cores / ranks on this host)")
      ->check(CLI::Range(0, 1024))->capture_default_str();
  cmd->add_option("--malloc", o->heap,
                  "CPU ranks: keep (freed memory stays in the process, as a GPU's caching allocator keeps it) or "
                  "system (glibc's defaults: pages freed by a backward go back to the kernel and fault in again)")
      ->check(CLI::IsMember(kHeaps.names()))->capture_default_str();
  cmd->add_option("--trace", o->trace, "Write the measured timeline (median step) as a Chrome trace");
  cmd->add_option("--summary", o->summary_out, "Write the JSON summary to this file");
  cmd->add_option("--save-weights", o->save_weights, "Directory: every layer's weights after the last step");
  cmd->add_option("--master-port", o->master_port, "Port of the launcher's rendezvous store (0: any free port)")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "Seconds to wait for a peer (rendezvous, each transfer)")
      ->check(CLI::Range(1.0, 86400.0))->capture_default_str();
  cmd->add_flag("--json", o->json, "Machine-readable summary");
  return [o] {
    if (const auto env = exec::rank_env_from_environment()) return run_rank(*o, *env);
    // Configuration errors reported once, before the ranks start; K from the schedule (a file has its own).
    const auto sc = twin::build_scenario(o->scenario);
    exec::check_runnable(sc->model, sc->program);
    refuse_simulated_only(*sc);
    const int ranks = static_cast<int>(sc->program.num_devices());
    check_outputs(*o);
    exec::check_device(exec::parse_device(o->device), ranks);
    exec::launch_local(command_line(), {ranks, o->master_port, o->timeout, 5.0});
    return 0;
  };
}

}  // namespace pipetwin::cli
