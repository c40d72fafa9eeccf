// build_scenario: load, check, generate, lower, partition, validate.
#include "twin/scenario.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "models/layer_graph.hpp"
#include "models/stage_table.hpp"
#include "models/partition.hpp"
#include "models/layout.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::twin {

namespace {

std::vector<schedule::LayerRange> partition_from_file(const std::string& path) {
  const std::string text = schedule::read_file(path);
  if (text.find("rank ") != std::string::npos || text.find('{') != std::string::npos) {
    auto ranges = schedule::read_program(path).partition;
    if (ranges.empty()) throw Error(path + ": this schedule holds no partition line");
    return ranges;
  }
  // Bare "begin:end" ranges, whitespace separated.
  std::vector<schedule::LayerRange> ranges;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    const auto colon = word.find(':');
    try {
      std::size_t used = 0;
      if (colon == std::string::npos) throw std::invalid_argument("no colon");
      const int begin = std::stoi(word.substr(0, colon), &used);
      const int end = std::stoi(word.substr(colon + 1));
      ranges.push_back({begin, end});
    } catch (const std::exception&) {
      throw Error(path + ": '" + word + "' is not a layer range begin:end");
    }
  }
  if (ranges.empty()) throw Error(path + ": no layer ranges (expected begin:end per stage)");
  return ranges;
}

}  // namespace

namespace {

// A calibrated device (one with per-kind curves) asked for a model with kinds
// it has no curve of: said, with what times them instead.
void note_uncalibrated_kinds(Scenario& sc) {
  std::vector<models::Device> devices = sc.hardware.devices;
  devices.push_back(sc.hardware.device);
  for (const auto& d : devices) {
    if (d.kinds.empty()) continue;
    std::string missing;
    for (const auto& layer : sc.model.layers) {
      const std::string kind(models::kind_name(layer.kind));
      if (d.kinds.count(kind) || missing.find(kind) != std::string::npos) continue;
      missing += (missing.empty() ? "" : ", ") + kind;
    }
    if (missing.empty()) continue;
    const bool pooled = d.kinds.count(std::string(models::kDefaultKind)) > 0;
    sc.hardware_notes.push_back(sc.hardware.name + " (" + d.name + ") has no curve for " + sc.model.name +
                       "'s layers of kind " + missing + ": " +
                       (pooled ? "they are timed on its `default` curve (every kind its calibration saw, pooled, its fixed "
                                 "cost per operator of the layer), which carries to other kinds only roughly"
                               : "they are timed on the device's base curve") +
                       "; `pipetwin calibrate --microbench --model MODEL.yaml` measures them");
    return;
  }
}

}  // namespace

std::unique_ptr<Scenario> build_scenario(const ScenarioSpec& o) {
  return build_scenario(models::in_topological_order(models::load_model(o.model)), models::load_hardware(o.hardware), o,
                        true);
}

namespace {

// --max-active-stages places FSDP's UNSHARD/RESHARD: only where ZeRO-3 keeps the weights.
void check_max_active(const schedule::Program& p, const ScenarioSpec& o) {
  if (o.max_active_stages > 0 && (p.zero != 3 || p.reshard_after_forward)) {
    throw Error("--max-active-stages " + std::to_string(o.max_active_stages) + " needs --zero 3 --reshard-after-forward off "
                "(its UNSHARD gathers a stage whose weights are then kept until its RESHARD); here zero is " +
                std::to_string(p.zero) + (p.zero == 3 ? " with resharding after the forward" : ""));
  }
}

// T, D and their options onto a Program, with the data-parallel reductions.
void set_parallelism(schedule::Program& p, const ScenarioSpec& o) {
  p.tensor_parallel = std::max(1, o.tensor_parallel);
  // D counts every replica of the weights: the data groups' times their context ranks.
  p.context_parallel = std::max(1, o.context_parallel);
  p.data_parallel = std::max(1, o.data_parallel) * p.context_parallel;
  p.expert_parallel = std::max(1, o.expert_parallel);
  if (o.expert_tensor_parallel != 0 && o.expert_tensor_parallel != 1 && o.expert_tensor_parallel != p.tensor_parallel) {
    throw Error("--expert-tensor " + std::to_string(o.expert_tensor_parallel) + ": 1 or --tensor T (" +
                std::to_string(p.tensor_parallel) + ")");
  }
  p.expert_tensor_parallel = o.expert_tensor_parallel == 1 && p.tensor_parallel > 1 ? 1 : 0;
  if (p.folds_experts() && p.expert_parallel % p.tensor_parallel != 0) {
    throw Error("--expert " + std::to_string(p.expert_parallel) + " with --expert-tensor 1 is not a multiple of --tensor " +
                std::to_string(p.tensor_parallel) + ": each device of a tensor group takes experts of its own");
  }
  if (p.data_parallel % p.expert_replicas() != 0) {
    throw Error("--expert " + std::to_string(p.expert_parallel) + " does not divide the " +
                (p.folds_experts() ? std::to_string(p.data_parallel * p.tensor_parallel) + " devices of --tensor x --data x --context"
                                   : std::to_string(p.data_parallel) + " replicas of the weights (--data x --context)") +
                ": the experts split over " + (p.folds_experts() ? "devices" : "replicas"));
  }
  p.sequence_parallel = o.sequence_parallel;
  p.zero = o.zero;
  p.reshard_after_forward = o.reshard_after_forward;
  if (p.sequence_parallel && p.tensor_parallel == 1) throw Error("--sequence-parallel needs --tensor T > 1");
  if (p.zero < 0 || p.zero > 3) throw Error("--zero " + std::to_string(p.zero) + ": ZeRO's stage is 0, 1, 2 or 3");
  if (p.zero > 0 && p.data_parallel == 1) {
    throw Error(std::string(p.zero == 1 ? "--zero1" : "--zero " + std::to_string(p.zero)) +
                " needs --data D > 1 (it shards over the data group)");
  }
  if (!p.reshard_after_forward && p.zero != 3) {
    throw Error("--reshard-after-forward off needs --zero 3 (only ZeRO-3 shards the weights)");
  }
  check_max_active(p, o);
  if (o.shard_group > 0) {
    if (p.zero == 0) throw Error("--shard-group " + std::to_string(o.shard_group) + " needs --zero 1, 2 or 3 (it groups ZeRO's shards)");
    if (p.data_parallel % o.shard_group != 0) {
      throw Error("--shard-group " + std::to_string(o.shard_group) + " does not divide --data " + std::to_string(p.data_parallel));
    }
    p.shard_group = o.shard_group;
  }
  if (p.num_devices() > std::numeric_limits<int>::max()) {
    throw Error("--tensor " + std::to_string(p.tensor_parallel) + " x --ranks " + std::to_string(p.num_ranks) +
                " x --data " + std::to_string(p.data_parallel) + " makes " + std::to_string(p.num_devices()) +
                " devices, more than pipetwin numbers");
  }
}

// The Program of a schedule file: K, V, M, the placement and the recompute
// policy are the file's (an option that says otherwise is refused, naming
// both); a compute-only file is lowered by the project's passes.
schedule::Program program_from_file(const StageBound& check_stages, const ScenarioSpec& o, std::vector<std::string>* notes) {
  schedule::Program p = schedule::read_program(o.schedule, notes);
  const auto contradicts = [&](const std::string& option, long long given, long long in_file, const char* what) {
    if (given > 0 && given != in_file) {
      throw Error(option + " " + std::to_string(given) + " contradicts the schedule file " + o.schedule + ", which has " +
                  std::to_string(in_file) + " " + what);
    }
  };
  contradicts("--ranks", o.ranks, p.num_ranks, "ranks");
  contradicts("--microbatches", o.microbatches, p.num_microbatches, "micro-batches");
  contradicts("--virtual", o.virtual_stages, p.stages_per_rank, "stages per rank");
  // A file written for a pipeline alone takes the options' T and D.
  if (p.is_pipeline_only()) {
    set_parallelism(p, o);
  } else {
    contradicts("--tensor", o.tensor_parallel, p.tensor_parallel, "as its tensor-parallel degree");
    contradicts("--data", o.data_parallel, p.data_groups(), "data-parallel replicas");
    contradicts("--context", o.context_parallel, p.context_parallel, "as its context-parallel degree");
    contradicts("--expert", o.expert_parallel, p.expert_parallel, "as its expert-parallel degree");
    contradicts("--expert-tensor", o.expert_tensor_parallel, p.expert_tensor_parallel > 0 ? p.expert_tensor_parallel : p.tensor_parallel,
                "as its experts' tensor-parallel degree");
    const auto flag = [&](const char* option, bool given, bool in_file, const char* what) {
      if (given && !in_file) throw Error(std::string(option) + " contradicts the schedule file " + o.schedule + ", which has " + what + " off");
    };
    flag("--sequence-parallel", o.sequence_parallel, p.sequence_parallel, "sequence_parallel");
    if (o.shard_group > 0 && o.shard_group != p.shard_group) {
      throw Error("--shard-group " + std::to_string(o.shard_group) + " contradicts the schedule file " + o.schedule +
                  ", which has shard_group " + std::to_string(p.shard_group));
    }
    if (o.zero > 0 && o.zero != p.zero) {
      throw Error("--zero " + std::to_string(o.zero) + " contradicts the schedule file " + o.schedule + ", which has zero " +
                  std::to_string(p.zero));
    }
    check_max_active(p, o);
  }
  check_stages(p.num_stages());
  if (!o.recompute.empty()) settle_recompute(p, models::parse_recompute_choice(o.recompute).policy, o.recompute, o.schedule);
  if (!p.partition.empty() && !o.partition.empty()) {
    throw Error("--partition " + o.partition + " contradicts the schedule file " + o.schedule +
                ", which holds its own partition line");
  }
  p = schedule::insert_gradient_reductions(schedule::lower(std::move(p)));
  if (o.max_active_stages > 0) {
    if (schedule::holds_fsdp_actions(p)) {
      throw Error("--max-active-stages " + std::to_string(o.max_active_stages) + " contradicts the schedule file " +
                  o.schedule + ", which places its own UNSHARD and RESHARD");
    }
    p = schedule::insert_unshards(std::move(p), o.max_active_stages);
  }
  validate_file(p, o.schedule);
  return p;
}

// The generator's Program for the shape the options give.
schedule::Program program_from_generator(const StageBound& check_stages, const ScenarioSpec& o) {
  const int V = std::max(1, o.virtual_stages);
  if (o.ranks < 1 || o.microbatches < 1) {
    throw Error("--ranks and --microbatches are needed with a schedule generator (" + o.schedule + ")");
  }
  // Before the schedule is built, which K = 10^6 makes slow.
  check_stages(static_cast<std::int64_t>(o.ranks) * V);
  const auto recompute = models::parse_recompute_choice(o.recompute.empty() ? "none" : o.recompute).policy;
  auto p = schedule::build_schedule(o.schedule, {o.ranks, o.microbatches, V, recompute});
  set_parallelism(p, o);
  p = schedule::insert_gradient_reductions(std::move(p));
  return o.max_active_stages > 0 ? schedule::insert_unshards(std::move(p), o.max_active_stages) : p;
}

// The partition the options ask for, or the schedule file's own.
std::vector<schedule::LayerRange> choose_partition(const Scenario& sc, const std::string& choice) {
  const int n = static_cast<int>(sc.model.layers.size());
  if (choice.empty() && !sc.program.partition.empty()) return sc.program.partition;
  if (choice.empty() || choice == "auto" || choice == "optimal" || choice == "uniform" || choice == "parameters") {
    const auto method = models::parse_method(choice.empty() ? "auto" : choice);
    return models::partition_model(sc.model, sc.hardware, sc.request, method).ranges();
  }
  if (models::is_layout(choice) && !std::filesystem::exists(choice)) {
    auto ranges = models::layout_ranges(sc.model, choice);
    if (static_cast<int>(ranges.size()) != sc.program.num_stages()) {
      throw Error("--partition '" + choice + "': " + std::to_string(ranges.size()) + " stages, but the schedule has " +
                  std::to_string(sc.program.num_stages()) + " (K " + std::to_string(sc.program.num_ranks) + " x V " +
                  std::to_string(sc.program.stages_per_rank) + ")");
    }
    return ranges;
  }
  if (!std::filesystem::exists(choice)) {
    throw Error("--partition '" + choice + "' is neither auto, uniform, parameters, a Megatron-LM layout (Et*3|t*4|...|t*3,L) nor a file");
  }
  auto ranges = partition_from_file(choice);
  if (!ranges.empty() && ranges.back().end != n) {
    throw Error(choice + ": the partition ends at layer " + std::to_string(ranges.back().end) + " but " + sc.model.name +
                " has " + std::to_string(n) + " layers");
  }
  return ranges;
}

}  // namespace

schedule::Program scenario_program(const models::Model& model, const ScenarioSpec& spec, std::vector<std::string>* notes) {
  return scenario_program(spec, [&](std::int64_t stages) { models::check_stage_count(model, stages); }, notes);
}

schedule::Program scenario_program(const ScenarioSpec& spec, const StageBound& check_stages, std::vector<std::string>* notes) {
  return is_schedule_file(spec.schedule) ? program_from_file(check_stages, spec, notes)
                                         : program_from_generator(check_stages, spec);
}

void settle_recompute(schedule::Program& p, schedule::RecomputePolicy given, const std::string& word, const std::string& file) {
  if (p.leaves_recompute_open()) {
    p.recompute = given;
  } else if (given != p.recompute) {
    throw Error("--recompute " + word + " contradicts the schedule file " + file + ", whose recompute is " +
                std::string(schedule::recompute_name(p.recompute)));
  }
}

schedule::ValidationReport validate_file(const schedule::Program& p, const std::string& file) {
  try {
    return schedule::validate(p);  // a file is input: every send has its receive, and it makes progress
  } catch (const Error& e) {
    throw Error(file + ": " + e.what());
  }
}

void check_context_attention(const std::string& attention, int largest_context) {
  if (!attention.empty() && largest_context <= 1) {
    throw Error("--context-attention " + attention + " needs --context C > 1 (it shares keys and values over C)");
  }
}

bool is_schedule_file(const std::string& schedule) {
  for (const auto& g : schedule::generators()) {
    if (g.name == schedule) return false;
  }
  std::error_code ec;
  return std::filesystem::exists(schedule, ec);
}

std::unique_ptr<Scenario> build_scenario(const models::Model& model, const models::Hardware& hardware,
                                         const ScenarioSpec& o, bool validate) {
  auto sc = std::make_unique<Scenario>();
  sc->model = models::with_precision(model, o.precision);
  sc->hardware = hardware;
  auto& r = sc->request;
  const bool from_file = is_schedule_file(o.schedule);
  // A bad word is refused first; uniform and block say how a checkpoint is re-run.
  if (!o.recompute.empty()) r.checkpoint = models::parse_recompute_choice(o.recompute).checkpoint;
  r.optimizer = models::parse_optimizer(o.optimizer);
  r.collective = models::parse_collective(o.collective.empty() ? "auto" : o.collective);
  if (!(o.grad_bucket_mb >= 0)) throw Error("--grad-bucket-mb must be 0 (no buckets) or positive, not " + std::to_string(o.grad_bucket_mb));
  r.gradient_bucket_bytes = o.grad_bucket_mb * 1e6;
  if (!(o.grad_bucket_first_mb >= 0)) {
    throw Error("--grad-bucket-first-mb must be 0 (as the others) or positive, not " + std::to_string(o.grad_bucket_first_mb));
  }
  if (o.grad_bucket_first_mb > 0 && o.grad_bucket_mb <= 0) {
    throw Error("--grad-bucket-first-mb sizes the first of the gradient buckets: give --grad-bucket-mb too");
  }
  r.gradient_first_bucket_bytes = o.grad_bucket_first_mb * 1e6;
  if (!o.context_attention.empty() && o.context_attention != "ring" && o.context_attention != "all-gather") {
    throw Error("--context-attention " + o.context_attention + ": ring or all-gather");
  }
  check_context_attention(o.context_attention, o.context_parallel);
  r.context_all_gather = o.context_attention == "all-gather";
  // A generator's shape is known before its Program is built; a file's from the file.
  // The batch splits over the D replicas, then into each one's M micro-batches.
  const auto check_batch = [&](int microbatches, int replicas) {
    const std::int64_t per_step = static_cast<std::int64_t>(microbatches) * replicas;
    const std::int64_t batch = o.batch > 0 ? o.batch : per_step;
    if (per_step > 0 && batch % per_step != 0) {
      throw Error("--batch " + std::to_string(batch) + " does not split into --microbatches " +
                  std::to_string(microbatches) +
                  (replicas > 1 ? " equal micro-batches on each of --data " + std::to_string(replicas) + " replicas"
                                : " equal micro-batches"));
    }
    r.microbatch_size = static_cast<int>(batch / per_step);
    sc->samples = static_cast<double>(batch);
  };
  if (!from_file) check_batch(o.microbatches, std::max(1, o.data_parallel));
  sc->program = scenario_program(sc->model, o, &sc->notes);
  if (from_file) check_batch(sc->program.num_microbatches, sc->program.data_groups());
  r.program = sc->program;  // the costs need no partition: placement and stash counts
  sc->program.partition = choose_partition(*sc, o.partition);
  if (validate && !from_file) schedule::validate(sc->program);  // throws with the grid if anything is wrong
  sc->costs = std::make_unique<models::StageCostModel>(sc->model, sc->hardware, r);
  note_uncalibrated_kinds(*sc);
  return sc;
}

std::unique_ptr<Scenario> scenario_of(const models::Model& model, const models::Hardware& hardware,
                                      schedule::Program program, int microbatch_size, double batch,
                                      models::Optimizer optimizer, models::Collective collective,
                                      models::LayerCheckpoint checkpoint) {
  auto sc = std::make_unique<Scenario>();
  sc->model = model;
  sc->hardware = hardware;
  sc->program = std::move(program);
  sc->samples = batch;
  auto& r = sc->request;
  r.program = sc->program;
  r.microbatch_size = microbatch_size;
  r.optimizer = optimizer;
  r.collective = collective;
  r.checkpoint = checkpoint;
  sc->costs = std::make_unique<models::StageCostModel>(sc->model, sc->hardware, r);
  return sc;
}

std::vector<std::string> Scenario::data_parallel_collectives() const {
  std::vector<std::string> names;
  if (program.data_parallel <= 1) return names;
  for (int s = 0; s < program.num_stages(); ++s) {
    const auto [i, j] = program.partition.at(s);
    names.emplace_back(models::collective_name(costs->reduce_algorithm(i, j, s)));
  }
  return names;
}

std::string Scenario::collectives_used() const {
  std::vector<models::Collective> used = costs->tp_algorithms();
  for (const auto& name : data_parallel_collectives()) used.push_back(models::parse_collective(name));
  const std::string names = models::collective_names(used);
  return std::string(models::collective_name(request.collective)) + (names.empty() ? "" : ": " + names);
}

std::string Scenario::recompute_name() const {
  return models::recompute_choice_name({program.recompute, request.checkpoint});
}

double Scenario::predicted_stash_bytes(int s) const {
  const auto [i, j] = program.partition.at(s);
  return costs->stash(s).peak_bytes(costs->whole_stash_bytes(i, j), costs->checkpoint_stash_bytes(i, j), costs->weight_grad_bytes(i, j));
}

schedule::TraceMetadata Scenario::configuration() const {
  schedule::TraceMetadata m;
  m.model = model.name;
  m.hardware = hardware.name;
  m.schedule = program.schedule;
  m.ranks = program.num_ranks;
  m.stages_per_rank = program.stages_per_rank;
  m.microbatches = program.num_microbatches;
  m.microbatch_size = request.microbatch_size;
  m.batch = samples;
  m.recompute = recompute_name();
  m.partition = program.partition;
  return m;
}

nlohmann::json Scenario::describe() const {
  auto j = configuration().configuration_json();
  j["precision"] = models::precision_name(model.precision);
  if (!program.is_pipeline_only()) {  // absent for a pipeline alone, as in its traces
    j["tensor_parallel"] = program.tensor_parallel;
    j["data_parallel"] = program.data_parallel;
    j["sequence_parallel"] = program.sequence_parallel;
    j["shard_optimizer"] = program.shard_optimizer();
    if (program.zero > 1) j["zero"] = program.zero;
    if (program.zero == 3) j["reshard_after_forward"] = program.reshard_after_forward;
    if (program.shard_group > 0) j["shard_group"] = program.shard_group;
    if (program.context_parallel > 1) {
      j["context_parallel"] = program.context_parallel;
      j["context_attention"] = request.context_all_gather ? "all-gather" : "ring";
    }
    if (program.expert_parallel > 1) {
      j["expert_parallel"] = program.expert_parallel;
      j["expert_tensor_parallel"] = program.folds_experts() ? 1 : program.tensor_parallel;
    }
    j["devices"] = program.num_devices();
    j["collective"] = models::collective_name(request.collective);  // as asked; what each all-reduce used:
    std::vector<std::string> tp;
    for (const auto c : costs->tp_algorithms()) tp.emplace_back(models::collective_name(c));
    j["collectives"] = {{"data_parallel", data_parallel_collectives()}, {"tensor_parallel", tp}};
  }
  return j;
}

schedule::TraceMetadata trace_metadata(const Scenario& sc, const ScenarioSpec& o, std::string producer) {
  auto m = sc.configuration();
  m.producer = std::move(producer);
  m.model_spec = schedule::read_file(o.model);
  m.hardware_spec = std::filesystem::exists(o.hardware) ? schedule::read_file(o.hardware) : o.hardware;
  for (int s = 0; s < sc.program.num_stages(); ++s) m.predicted_stash_bytes_per_stage.push_back(sc.predicted_stash_bytes(s));
  m.program = schedule::to_text(sc.program);  // what ran: calibrate and compare read it back
  m.optimizer = std::string(models::optimizer_name(sc.request.optimizer));  // its state is in the step's traffic
  return m;
}

std::string Scenario::headline() const {
  char line[4096];
  std::snprintf(line, sizeof line, "%s on %s (%s), %s, K=%d V=%d M=%d, batch %g, recompute %s",
                model.name.c_str(), hardware.describe_devices(program.num_ranks).c_str(),
                std::string(models::topology_name(hardware.topology.kind)).c_str(), program.schedule.c_str(),
                program.num_ranks, program.stages_per_rank, program.num_microbatches, samples,
                recompute_name().c_str());
  std::string out = line;
  if (model.precision == models::Precision::FP8) out += ", fp8";
  if (!program.is_pipeline_only()) {
    const int C = program.context_parallel;
    const int E = program.expert_parallel;
    out += ", T=" + std::to_string(program.tensor_parallel) + (C > 1 ? " C=" + std::to_string(C) : "") +
           (E > 1 ? " E=" + std::to_string(E) + (program.folds_experts() ? " (ETP 1)" : "") : "") +
           " D=" + std::to_string(program.data_groups()) + " (" +
           std::to_string(program.num_devices()) + " devices" + (program.sequence_parallel ? ", sequence parallel" : "") +
           (program.zero > 0 ? ", ZeRO-" + std::to_string(program.zero) : "") +
           (program.zero == 3 && !program.reshard_after_forward ? " (weights kept through the step)" : "") +
           (program.shard_group > 0 ? " in groups of " + std::to_string(program.shard_group) + " (HSDP)" : "") + ", all-reduce " + collectives_used() + ")";
  }
  return out;
}

}  // namespace pipetwin::twin
