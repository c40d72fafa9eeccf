// summarize(): timeline statistics plus the memory of every stage.
#include "models/summary.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "schedule/dry_run.hpp"
#include "schedule/interpreter.hpp"
#include "schedule/memory.hpp"

namespace pipetwin::models {

bool RunSummary::fits() const {
  for (const auto& m : memory) {
    if (!m.fits()) return false;
  }
  for (const auto& m : rank_memory) {
    if (!m.fits()) return false;
  }
  return true;
}

StageMemorySource::Parts StageMemorySource::peak_parts(int s) const {
  Parts m = fixed_parts(s);
  m.activations = stash(s).peak_bytes(whole_stash_bytes(s), checkpoint_stash_bytes(s), weight_grad_bytes(s));
  m.workspace = workspace_bytes(s);
  m.reserve = reserve_bytes(s, m.total());
  return m;
}

PartitionMemory::Parts PartitionMemory::fixed_parts(int s) const {
  auto m = costs_.memory_parts(ranges_.at(s).begin, ranges_.at(s).end, s);
  m.activations = m.workspace = m.reserve = 0;
  return m;
}

namespace {

// What a stage stashes now.
double stashed_bytes(const schedule::StashTracker& tracker, const StageMemorySource& memory, int s) {
  return schedule::stash_bytes(tracker.stage(schedule::StageId{s}).state(), memory.whole_stash_bytes(s),
                               memory.checkpoint_stash_bytes(s), memory.weight_grad_bytes(s));
}

// A stage's bytes now: its static memory and what it stashes.
double stage_bytes(const schedule::StashTracker& tracker, const StageMemorySource& memory, int s) {
  return memory.static_bytes(s) + stashed_bytes(tracker, memory, s);
}

bool is_backward(schedule::Op op) { return op == schedule::Op::B || op == schedule::Op::I; }

}  // namespace

std::vector<StageCostModel::MemoryParts> rank_peak_parts(const schedule::Timeline& t, const schedule::Program& p,
                                                         const StageCostModel& costs) {
  return rank_peak_parts(t, p, PartitionMemory(costs, p.partition));
}

std::vector<StageCostModel::MemoryParts> rank_peak_parts(const schedule::Timeline& t, const schedule::Program& p,
                                                         const StageMemorySource& memory) {
  schedule::StashTracker tracker(p);
  std::vector<StageCostModel::MemoryParts> peak(t.ranks.size());
  for (std::size_t r = 0; r < t.ranks.size(); ++r) {
    const auto stages = p.stages_of(schedule::RankId{static_cast<int>(r)});
    if (stages.empty()) continue;
    StageCostModel::MemoryParts fixed;  // weights, gradients, optimizer state: all the step
    // Stages gathered by UNSHARD hold their weights whole only until their RESHARD.
    std::map<int, double> unshards;  // stage -> its gathered weights' extra bytes
    for (const auto& a : t.ranks[r]) {
      if (a.action.op == schedule::Op::UNSHARD) unshards[a.action.stage.value] = memory.gathered_weight_bytes(a.action.stage.value);
    }
    for (const auto s : stages) {
      const auto parts = memory.fixed_parts(s.value);
      fixed.weights += parts.weights, fixed.gradients += parts.gradients, fixed.optimizer += parts.optimizer;
      if (const auto it = unshards.find(s.value); it != unshards.end()) fixed.weights -= it->second;
    }
    double gathered = 0;  // of the stages gathered by UNSHARD, now
    const auto stashed = [&] {
      double bytes = 0;
      for (const auto s : stages) bytes += stashed_bytes(tracker, memory, s.value);
      return bytes;
    };
    double most = -1;
    const auto consider = [&](double activations, double work) {
      if (activations + work + gathered <= most) return;
      most = activations + work + gathered;
      peak[r] = fixed;
      peak[r].weights += gathered;
      peak[r].activations = activations, peak[r].workspace = work;
    };
    consider(stashed(), 0);
    // A rank's stages live on it alone: its own order is a time order for all of them.
    for (const auto& a : t.ranks[r]) {
      if (schedule::is_fsdp(a.action.op)) {
        const double bytes = unshards.count(a.action.stage.value) ? unshards.at(a.action.stage.value) : 0;
        gathered += a.action.op == schedule::Op::UNSHARD ? bytes : -bytes;
        consider(stashed(), 0);
        continue;
      }
      if (!schedule::is_compute(a.action.op)) continue;
      // A backward's working memory, on top of the stash it starts from.
      if (is_backward(a.action.op)) consider(stashed(), memory.workspace_bytes(a.action.stage.value));
      tracker.apply(a.action);
      consider(stashed(), 0);
    }
    // The device's reserve once, on all of it (a rank's stages share its device).
    peak[r].reserve = memory.reserve_bytes(stages.front().value, peak[r].total());
  }
  return peak;
}

std::vector<double> rank_peak_bytes(const schedule::Timeline& t, const schedule::Program& p, const StageCostModel& costs) {
  std::vector<double> out;
  for (const auto& parts : rank_peak_parts(t, p, costs)) out.push_back(parts.total());
  return out;
}

RunSummary summarize(const schedule::Timeline& t, double samples, const StageCostModel& costs,
                     const std::vector<schedule::LayerRange>& ranges, std::string engine,
                     const schedule::Program* program) {
  auto s = summarize(t, samples, PartitionMemory(costs, ranges), std::move(engine), program);
  if (program != nullptr && program->tensor_parallel > 1) s.tp_collective_s = tp_collective_per_rank(*program, costs);
  return s;
}

RunSummary summarize(const schedule::Timeline& t, double samples, const StageMemorySource& memory, std::string engine,
                     const schedule::Program* program) {
  RunSummary s;
  s.engine = std::move(engine);
  s.step_time_s = t.makespan();
  s.samples = samples;
  s.throughput = s.step_time_s > 0 ? samples / s.step_time_s : 0;
  s.idle = t.idle_fractions();
  double idle_sum = 0;
  for (const double idle : s.idle) idle_sum += idle;
  s.bubble = s.idle.empty() ? 0 : idle_sum / static_cast<double>(s.idle.size());  // bubble_fraction(), from the same pass
  for (int r = 0; r < static_cast<int>(t.ranks.size()); ++r) s.busy_s.push_back(t.busy(schedule::RankId{r}));
  for (int st = 0; st < memory.stages(); ++st) {
    const auto& stash = memory.stash(st);
    const auto parts = memory.peak_parts(st);
    s.memory.push_back({parts.total(), memory.capacity_bytes(st), stash.peak_activations, stash.peak_inputs,
                        stash.weight_versions, parts});
  }
  if (program != nullptr && program->num_stages() > static_cast<int>(t.ranks.size())) {
    const auto peaks = rank_peak_parts(t, *program, memory);
    for (std::size_t r = 0; r < peaks.size(); ++r) {
      const auto stages = program->stages_of(schedule::RankId{static_cast<int>(r)});
      // A rank's stages share its device: the first one's capacity is the rank's.
      const double capacity = stages.empty() ? 0 : memory.capacity_bytes(stages.front().value);
      s.rank_memory.push_back({peaks[r].total(), capacity, static_cast<int>(stages.size()), peaks[r]});
    }
  }
  return s;
}

std::vector<double> tp_collective_per_rank(const schedule::Program& p, const StageCostModel& costs) {
  std::vector<double> out(p.ranks.size(), 0.0);
  if (p.tensor_parallel <= 1) return out;
  std::vector<schedule::StageCosts> stages(p.partition.size());  // each stage's two shares, as the stage table's
  for (std::size_t s = 0; s < stages.size(); ++s) {
    stages[s].tp_forward_s = costs.tp_forward_s(p.partition[s].begin, p.partition[s].end);
    stages[s].tp_backward_s = costs.tp_backward_s(p.partition[s].begin, p.partition[s].end);
  }
  for (std::size_t r = 0; r < p.ranks.size(); ++r) {
    for (const auto& a : p.ranks[r]) out[r] += stages.at(a.stage.value).tp_share(a.op);
  }
  return out;
}

std::vector<std::vector<MemorySample>> memory_over_time(const schedule::Timeline& t, const schedule::Program& p,
                                                        const StageCostModel& costs) {
  return memory_over_time(t, p, PartitionMemory(costs, p.partition));
}

std::vector<std::vector<MemorySample>> memory_over_time(const schedule::Timeline& t, const schedule::Program& p,
                                                        const StageMemorySource& memory) {
  schedule::StashTracker tracker(p);
  std::vector<std::vector<MemorySample>> out(p.num_stages());
  // The device's reserve on top of what the stage holds (as peak_parts counts it).
  const auto bytes_of = [&](int s, double work = 0) {
    const double held = stage_bytes(tracker, memory, s) + work;
    return held + memory.reserve_bytes(s, held);
  };
  for (int s = 0; s < p.num_stages(); ++s) out[s].push_back({0, bytes_of(s)});
  // Every stage lives on one rank, so replaying each rank in its own order is a time order per stage.
  for (const auto& rank : t.ranks) {
    for (const auto& a : rank) {
      if (!schedule::is_compute(a.action.op)) continue;
      const int s = a.action.stage.value;
      if (is_backward(a.action.op)) out[s].push_back({a.start, bytes_of(s, memory.workspace_bytes(s))});  // while it runs
      tracker.apply(a.action);
      out[s].push_back({a.end, bytes_of(s)});
    }
  }
  return out;
}

nlohmann::json RunSummary::to_json() const {
  nlohmann::json j{{"engine", engine}, {"step_time_s", step_time_s}, {"samples", samples},
                   {"throughput_samples_per_s", throughput}, {"bubble_fraction", bubble},
                   {"busy_s_per_rank", busy_s}, {"idle_fraction_per_rank", idle}, {"fits", fits()}};
  const auto parts_json = [](const StageCostModel::MemoryParts& p) {
    return nlohmann::json{{"weights", p.weights},         {"gradients", p.gradients}, {"optimizer_state", p.optimizer},
                          {"activations", p.activations}, {"workspace", p.workspace}, {"reserve", p.reserve}};
  };
  for (const auto& m : memory) {
    j["memory_per_stage"].push_back({{"peak_bytes", m.peak_bytes}, {"capacity_bytes", m.capacity_bytes}, {"fits", m.fits()},
                                     {"peak_stashed_microbatches", m.peak_activations},
                                     {"peak_stashed_inputs", m.peak_inputs}, {"weight_versions", m.weight_versions},
                                     {"bytes", parts_json(m.parts)}});
  }
  if (!tp_collective_s.empty()) j["tp_collective_s_per_rank"] = tp_collective_s;
  for (const auto& m : rank_memory) {
    j["memory_per_rank"].push_back({{"peak_bytes", m.peak_bytes}, {"capacity_bytes", m.capacity_bytes}, {"fits", m.fits()},
                                    {"stages", m.stages}, {"bytes", parts_json(m.parts)}});
  }
  return j;
}

namespace {
// "of 80.000 GB", or nothing where no capacity is known (a cost table without one).
std::string capacity_text(double bytes) {
  if (std::isinf(bytes)) return " (no capacity given)";
  char text[64];
  std::snprintf(text, sizeof text, " of %.3f GB", bytes / 1e9);
  return text;
}

std::string parts_text(const StageCostModel::MemoryParts& p) {
  char line[256];
  std::snprintf(line, sizeof line,
                "    weights %.3f, gradients %.3f, optimizer %.3f, activations %.3f, workspace %.3f, reserve %.3f GB\n",
                p.weights / 1e9, p.gradients / 1e9, p.optimizer / 1e9, p.activations / 1e9, p.workspace / 1e9,
                p.reserve / 1e9);
  return line;
}
}  // namespace

std::string RunSummary::to_text() const {
  std::ostringstream out;
  char line[256];
  std::snprintf(line, sizeof line, "step time    %.6g s   throughput %.6g samples/s   (%s)\n", step_time_s, throughput,
                engine.c_str());
  out << line;
  std::snprintf(line, sizeof line, "bubble       %.2f%% overall; idle per rank:", 100 * bubble);
  out << line;
  for (const double i : idle) {
    std::snprintf(line, sizeof line, " %.1f%%", 100 * i);
    out << line;
  }
  out << "\nmemory       peak per stage against capacity:\n";
  for (std::size_t s = 0; s < memory.size(); ++s) {
    const auto& m = memory[s];
    std::snprintf(line, sizeof line, "  stage %zu: %.3f GB%s (%d micro-batches stashed%s)%s\n", s,
                  m.peak_bytes / 1e9, capacity_text(m.capacity_bytes).c_str(), m.peak_activations,
                  m.peak_inputs ? (", " + std::to_string(m.peak_inputs) + " inputs").c_str() : "",
                  m.fits() ? "" : "  OUT OF MEMORY");
    out << line << parts_text(m.parts);
  }
  if (!rank_memory.empty()) {
    out << "             peak per rank, its stages together, against capacity:\n";
    for (std::size_t r = 0; r < rank_memory.size(); ++r) {
      const auto& m = rank_memory[r];
      std::snprintf(line, sizeof line, "  rank %zu: %.3f GB%s (%d stages)%s\n", r, m.peak_bytes / 1e9,
                    capacity_text(m.capacity_bytes).c_str(), m.stages, m.fits() ? "" : "  OUT OF MEMORY");
      out << line << parts_text(m.parts);
    }
  }
  bool stages_fit = true;
  for (const auto& m : memory) stages_fit = stages_fit && m.fits();
  out << "verdict      "
      << (fits() ? "fits in memory" : stages_fit ? "OUT OF MEMORY on at least one rank (its stages together)"
                                                 : "OUT OF MEMORY on at least one stage")
      << "\n";
  return out.str();
}

}  // namespace pipetwin::models
