// run_plan: the enumeration, the evaluator's pass on threads, SimGrid's pass
// in child processes, and each candidate's figures.
#include "twin/plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "models/contention.hpp"
#include "models/layer_graph.hpp"
#include "models/partition.hpp"
#include "models/stage_table.hpp"
#include "models/summary.hpp"
#include "models/yaml_file.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "twin/plan_parts.hpp"
#include "twin/scenario.hpp"

namespace pipetwin::twin {
namespace {

std::string fnv(const std::string& text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// A spec file by its contents (the same file elsewhere on another machine is
// the same input), a preset by its name.
std::string input_id(const std::string& spec) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(spec, ec)) return spec + " (preset)";
  return std::filesystem::path(spec).filename().string() + " (contents " + fnv(schedule::read_file(spec)) + ")";
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ",") + w;
  return out;
}

std::string joined(const std::vector<int>& numbers) {
  std::vector<std::string> words;
  for (const int n : numbers) words.push_back(std::to_string(n));
  return joined(words);
}

const schedule::GeneratorInfo* generator(const std::string& schedule) {
  for (const auto& g : schedule::generators()) {
    if (g.name == schedule) return &g;
  }
  return nullptr;
}

bool has_virtual_stages(const std::string& schedule) {
  const auto* g = generator(schedule);
  return g != nullptr && g->virtual_stages;
}

// The V of a generator that takes none (--virtual): its own stages per rank
// (2 for the V-shaped ones, zb-v, v-half and dualpipe-v), else 1. The V the
// candidate's program has, and what the ranking prints.
int own_stages_per_rank(const std::string& schedule) {
  const auto* g = generator(schedule);
  return g != nullptr ? std::max(1, g->fixed_stages_per_rank) : 1;
}

// T: powers of two up to a cluster node's GPUs (1 on other topologies) that
// divide N, the attention heads and the hidden size, where every layer splits.
std::vector<int> tensor_degrees(const models::Model& model, const models::Hardware& hw, int gpus) {
  const int limit = hw.topology.kind == models::TopologyKind::Cluster ? hw.topology.devices_per_host : 1;
  bool splits = true;
  std::int64_t heads = 0, hidden = 0;
  for (const auto& layer : model.layers) {
    splits = splits && layer.cost.tensor_split;
    if (layer.shape.heads > 0) heads = layer.shape.heads, hidden = layer.shape.d_model;
  }
  std::vector<int> out{1};
  for (int t = 2; t <= limit && splits; t *= 2) {
    if (gpus % t != 0 || (heads > 0 && (heads % t != 0 || hidden % t != 0))) continue;
    out.push_back(t);
  }
  return out;
}

// The schedules' (name, V) pairs for K ranks.
std::vector<std::pair<std::string, int>> schedule_shapes(const PlanSpec& o, int ranks, int layers) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& s : o.schedules) {
    if (!has_virtual_stages(s)) {
      out.emplace_back(s, own_stages_per_rank(s));
      continue;
    }
    if (ranks == 1) continue;  // V stages on one rank: the same work, more cuts
    for (const int v : o.virtual_stages) {
      if (static_cast<std::int64_t>(ranks) * v <= layers) out.emplace_back(s, v);
    }
  }
  return out;
}

// The expert-parallel degrees a candidate of `replicas` replicas of the
// weights and tensor groups of T takes: those that divide the replicas (or,
// folded, T x them in whole groups) and a layer's `experts` (1 alone for a
// dense model).
std::vector<int> expert_degrees(const PlanSpec& o, int replicas, int tensor, std::int64_t experts) {
  std::vector<int> out;
  const bool folds = o.expert_tensor == 1 && tensor > 1;
  for (const int e : o.expert) {
    const bool spans = folds ? e % tensor == 0 && replicas % (e / tensor) == 0 : replicas % e == 0;
    if (e == 1 || (experts > 0 && spans && experts % e == 0)) out.push_back(e);
  }
  return out;
}

// HSDP's shard groups a candidate of ZeRO stage `zero` over `replicas`
// takes: 0 (all of them), and each G of PlanSpec::shard_group fewer than the
// replicas that divides them, where ZeRO shards.
std::vector<int> shard_groups(const PlanSpec& o, int zero, int replicas) {
  std::vector<int> out{0};
  if (zero == 0) return out;
  for (const int g : o.shard_group) {
    if (g > 1 && g < replicas && replicas % g == 0) out.push_back(g);
  }
  return out;
}

void add_variants(const PlanSpec& o, const std::vector<std::string>& precisions, Candidate c, std::vector<Candidate>& out) {
  std::vector<bool> sp{c.tensor > 1};
  if (c.tensor > 1 && o.also_without_sequence_parallel) sp.push_back(false);
  std::vector<int> zero{0};
  if (c.data * c.context > 1) zero = o.zero;  // ZeRO shards over every replica of the weights
  for (const auto& r : o.recompute) {
    for (const bool s : sp) {
      for (const int z : zero) {
        for (const int g : shard_groups(o, z, c.data * c.context)) {
          for (const auto& p : precisions) {
            c.recompute = r;
            c.sequence_parallel = s;
            c.zero = z;
            c.shard_group = g;
            c.precision = p;
            c.index = out.size();
            out.push_back(c);
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<Candidate> enumerate_candidates(const PlanSpec& o, const models::Model& model, const models::Hardware& hw) {
  if (o.max_active_stages > 0 && (o.reshard_after_forward || std::find(o.zero.begin(), o.zero.end(), 3) == o.zero.end())) {
    throw Error("--max-active-stages " + std::to_string(o.max_active_stages) +
                " needs ZeRO-3 candidates keeping their weights (--zero ...,3 --reshard-after-forward off)");
  }
  const int n = static_cast<int>(model.layers.size());
  const int max_k = o.max_pp > 0 ? std::min(o.max_pp, n) : n;
  // Each arithmetic asked for, refused here if the model cannot take it; none: the model's.
  std::vector<std::string> precisions;
  for (const auto& p : o.precision) precisions.emplace_back(models::precision_name(models::with_precision(model, p).precision));
  if (precisions.empty()) precisions.emplace_back(models::precision_name(model.precision));
  std::int64_t experts = 0;  // a routed layer's, for E
  for (const auto& l : model.layers) experts = std::max(experts, l.shape.experts);
  std::vector<Candidate> out;
  for (const int t : tensor_degrees(model, hw, o.gpus)) {
    for (int k = 1; k <= max_k && k <= o.gpus / t; ++k) {
      for (const int cp : o.context) {
        if (cp < 1 || (o.gpus / t) % (k * cp) != 0) continue;
        const int d = o.gpus / (t * k * cp);
        for (const int b : o.microbatch_sizes) {
          const std::int64_t per_microbatch = static_cast<std::int64_t>(d) * b;
          if (o.global_batch % per_microbatch != 0) continue;
          const int m = static_cast<int>(o.global_batch / per_microbatch);
          for (const auto& [schedule, v] : schedule_shapes(o, k, n)) {
            if (has_virtual_stages(schedule) && m < k) continue;  // interleaving needs a micro-batch per rank in flight
            Candidate c;
            c.schedule = schedule;
            c.tensor = t, c.pipeline = k, c.data = d, c.context = cp, c.virtual_stages = v, c.microbatches = m;
            c.microbatch_size = b;
            for (const int e : expert_degrees(o, d * cp, t, experts)) {
              c.expert = e;
              add_variants(o, precisions, c, out);
            }
          }
        }
      }
    }
  }
  return out;
}

std::string plan_fingerprint(const std::string& description) { return fnv(description); }

std::string describe_plan(const PlanSpec& o, const models::Model& model) {
  return model.name + " [" + input_id(o.model) + "] on " + input_id(o.hardware) + ", " + std::to_string(o.gpus) +
         " GPUs, global batch " + std::to_string(o.global_batch) + "; micro-batch sizes " + joined(o.microbatch_sizes) +
         "; schedules " + joined(o.schedules) + "; V " + joined(o.virtual_stages) + "; recompute " + joined(o.recompute) +
         "; max-pp " + (o.max_pp > 0 ? std::to_string(o.max_pp) : "any") + "; sequence parallel " +
         (o.also_without_sequence_parallel ? "on and off" : "on") + "; optimizer " + o.optimizer +
         (o.grad_bucket_mb > 0 ? "; gradient buckets " + models::yaml_number(o.grad_bucket_mb) + " MB" : "") +
         (o.grad_bucket_first_mb > 0 ? ", the first " + models::yaml_number(o.grad_bucket_first_mb) + " MB" : "") +
         // Written only where not the default {0, 1}, so that earlier plans' fingerprints stay theirs.
         (o.zero != std::vector<int>{0, 1} ? "; ZeRO " + joined(o.zero) : "") +
         (!o.reshard_after_forward ? (o.max_active_stages > 0 ? "; ZeRO-3 keeps the weights, at most " +
                                                                       std::to_string(o.max_active_stages) +
                                                                       " stages of a rank gathered (UNSHARD/RESHARD)"
                                                                 : std::string("; ZeRO-3 keeps the weights through the step"))
                                     : "") +
         (o.shard_group != std::vector<int>{0} ? "; shard groups " + joined(o.shard_group) : "") +
         (o.precision.empty() ? "" : "; precision " + joined(o.precision)) +
         (o.context != std::vector<int>{1} ? "; context " + joined(o.context) +
                                                 (o.context_attention == "all-gather" ? " (all-gather)" : "")
                                           : "") +
         (o.expert != std::vector<int>{1} ? "; expert " + joined(o.expert) + (o.expert_tensor == 1 ? " (ETP 1)" : "") : "") +
         "; top-sim " +
         std::to_string(o.top_sim);
}

ScenarioSpec candidate_scenario(const PlanSpec& o, const Candidate& c) {
  ScenarioSpec s;
  s.schedule = c.schedule;
  s.ranks = c.pipeline;
  s.microbatches = c.microbatches;
  s.virtual_stages = c.virtual_stages;
  s.batch = o.global_batch;
  s.recompute = c.recompute;
  s.partition = "auto";
  s.optimizer = o.optimizer;
  s.tensor_parallel = c.tensor;
  s.data_parallel = c.data;
  s.sequence_parallel = c.sequence_parallel;
  s.zero = c.zero;
  s.shard_group = c.shard_group;
  s.precision = c.precision;
  s.context_parallel = c.context;
  s.context_attention = c.context > 1 ? o.context_attention : "";
  s.expert_parallel = c.expert;
  s.expert_tensor_parallel = o.expert_tensor;
  s.reshard_after_forward = o.reshard_after_forward || c.zero != 3;
  s.max_active_stages = s.reshard_after_forward ? 0 : o.max_active_stages;
  s.grad_bucket_mb = o.grad_bucket_mb;
  s.grad_bucket_first_mb = o.grad_bucket_first_mb;
  return s;
}

namespace {

// The data-parallel reduction's exposed time: on the rank whose step ends
// last, from the end of its last backward to that end, less its optimizer steps.
double exposed_reduction_s(const schedule::Timeline& timeline) {
  double end = -1, exposed = 0;
  for (const auto& rank : timeline.ranks) {
    if (rank.empty() || rank.back().end <= end) continue;
    end = rank.back().end;
    double last_backward = 0, steps = 0;
    for (const auto& a : rank) {
      const auto op = a.action.op;
      if (op == schedule::Op::B || op == schedule::Op::W || op == schedule::Op::I) last_backward = std::max(last_backward, a.end);
    }
    for (const auto& a : rank) {
      if (a.action.op == schedule::Op::STEP && a.start >= last_backward) steps += a.end - a.start;
    }
    exposed = std::max(0.0, end - last_backward - steps);
  }
  return exposed;
}

// The slowest rank's tensor-parallel collectives per step.
double tp_collectives_s(const Scenario& sc) {
  const auto& p = sc.program;
  std::vector<double> per_rank(p.num_ranks, 0);
  for (int s = 0; s < p.num_stages(); ++s) {
    const auto [i, j] = p.partition.at(s);
    per_rank[p.rank_of(schedule::StageId{s}).value] += sc.costs->tp_collective_s(i, j, s) * p.num_microbatches;
  }
  return *std::max_element(per_rank.begin(), per_rank.end());
}

// The devices' peak dense FLOP/s for the model's precision (the half-precision
// rate for bf16 and fp16), the mean over the pipeline's ranks: MFU's
// denominator (one rate per device where the hardware lists several).
double mean_peak_flops(const Scenario& sc) {
  const auto& p = sc.program;
  std::vector<double> per_rank(p.num_ranks, 0);
  for (int s = 0; s < p.num_stages(); ++s) {
    per_rank[p.rank_of(schedule::StageId{s}).value] = sc.costs->device_of(s).peak_flops(sc.model.precision);
  }
  double sum = 0;
  for (const double x : per_rank) sum += x;
  return per_rank.empty() ? 0 : sum / static_cast<double>(per_rank.size());
}

double headroom_gb(const models::RunSummary& s) {
  double least = 1e300;
  if (!s.rank_memory.empty()) {
    for (const auto& r : s.rank_memory) least = std::min(least, r.capacity_bytes - r.peak_bytes);
  } else {
    for (const auto& m : s.memory) least = std::min(least, m.capacity_bytes - m.peak_bytes);
  }
  return least / 1e9;
}

}  // namespace

void set_figures(Candidate& c, const Scenario& sc, const schedule::Timeline& timeline, const std::string& engine,
                 const ModelRates& rates) {
  const auto s = models::summarize(timeline, sc.samples, *sc.costs, sc.program.partition, engine, &sc.program);
  c.engine = engine;
  c.step_s = s.step_time_s;
  c.samples_per_s = s.throughput;
  c.tokens_per_s = s.throughput * rates.tokens_per_sample;
  c.tflops_per_gpu = rates.flops_per_sample * s.throughput / sc.program.num_devices() / 1e12;
  const double peak = mean_peak_flops(sc);
  c.mfu = peak > 0 ? c.tflops_per_gpu * 1e12 / peak : 0;
  c.virtual_stages = sc.program.stages_per_rank;  // the V the program has (zb-v's 2, not the 1 it was given)
  c.bubble = s.bubble;
  c.tp_comm_s = tp_collectives_s(sc);
  c.dp_exposed_s = sc.program.data_parallel > 1 ? exposed_reduction_s(timeline) : 0;
  c.headroom_gb = headroom_gb(s);
  c.status = s.fits() ? "ok" : "oom";
  c.reason = s.fits() ? "" : "does not fit: " + std::to_string(-c.headroom_gb) + " GB over on its fullest rank";
}

ModelRates model_rates(const models::Model& model) {
  ModelRates r;
  for (const auto& layer : model.layers) {
    r.flops_per_sample += layer.cost.forward_flops + layer.cost.backward_flops();
    if (r.tokens_per_sample == 0 && layer.shape.seq_len > 0) r.tokens_per_sample = static_cast<double>(layer.shape.seq_len);
  }
  return r;
}

std::pair<int, int> parse_shard(const std::string& text) {
  const auto slash = text.find('/');
  int i = -1, n = 0;
  try {
    if (slash == std::string::npos) throw std::invalid_argument("no slash");
    std::size_t used = 0;
    i = std::stoi(text.substr(0, slash), &used);
    if (used != slash) throw std::invalid_argument("trailing");
    n = std::stoi(text.substr(slash + 1), &used);
    if (used != text.size() - slash - 1) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw Error("--shard '" + text + "' is not I/N (shard I of N, 0 <= I < N)");
  }
  if (n < 1 || i < 0 || i >= n) throw Error("--shard " + text + ": I must be at least 0 and below N (shard I of N)");
  return {i, n};
}

std::size_t PlanResult::count(std::string_view status) const {
  return static_cast<std::size_t>(
      std::count_if(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.status == status; }));
}

std::size_t PlanResult::count_engine(std::string_view engine) const {
  return static_cast<std::size_t>(std::count_if(candidates.begin(), candidates.end(), [&](const Candidate& c) {
    return c.status == "ok" && c.engine == engine;
  }));
}

std::vector<const Candidate*> ranking(const PlanResult& result) {
  std::vector<const Candidate*> out;
  for (const auto& c : result.candidates) {
    if (c.status == "ok") out.push_back(&c);
  }
  std::stable_sort(out.begin(), out.end(), [](const Candidate* a, const Candidate* b) {
    if (a->samples_per_s != b->samples_per_s) return a->samples_per_s > b->samples_per_s;
    return a->index < b->index;
  });
  return out;
}

}  // namespace pipetwin::twin
