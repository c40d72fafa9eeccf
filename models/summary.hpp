// The summary of one step, predicted or measured: the same fields for sim/
// and exec/ (step time, throughput, bubble, busy time per rank, memory per
// stage against capacity).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/stage_costs.hpp"
#include "schedule/timeline.hpp"

namespace pipetwin::models {

struct StageMemoryReport {
  double peak_bytes = 0, capacity_bytes = 0;
  int peak_activations = 0, peak_inputs = 0, weight_versions = 1;
  StageCostModel::MemoryParts parts;  // peak_bytes, part by part
  bool fits() const { return peak_bytes <= capacity_bytes; }
};

// A rank's memory where it holds several stages (V-shaped and interleaved
// schedules): its stages' weights, gradients and optimizer state, and their
// stashes at the same time, at the busiest moment of its timeline.
struct RankMemoryReport {
  double peak_bytes = 0, capacity_bytes = 0;
  int stages = 1;
  // Its stages' weights, gradients and optimizer state, and at the peak
  // their activations and a backward's workspace; the device's reserve once.
  StageCostModel::MemoryParts parts;
  bool fits() const { return peak_bytes <= capacity_bytes; }
};

// What summarize() needs of each stage's memory: the model's (a
// StageCostModel on the Program's partition) or a table of the user's own
// costs (models/cost_table.hpp). Stage s's bytes are its fixed part
// (weights, gradients, optimizer state), a stash of micro-batches in the
// IR's three states, a backward's workspace and the device's reserve.
class StageMemorySource {
 public:
  using Parts = StageCostModel::MemoryParts;
  virtual ~StageMemorySource() = default;
  virtual int stages() const = 0;
  virtual Parts fixed_parts(int s) const = 0;  // weights (every version kept), gradients, optimizer state
  virtual double whole_stash_bytes(int s) const = 0;
  virtual double checkpoint_stash_bytes(int s) const = 0;
  virtual double weight_grad_bytes(int s) const = 0;
  virtual double workspace_bytes(int s) const = 0;
  virtual double reserve_bytes(int s, double held) const = 0;
  virtual double capacity_bytes(int s) const = 0;
  virtual const schedule::StageMemory& stash(int s) const = 0;  // its peak counts
  // Its parts at its peak: the fixed ones, the stash's peak, the workspace, the reserve.
  Parts peak_parts(int s) const;
  virtual double static_bytes(int s) const { return fixed_parts(s).total(); }
  // Of its fixed weights, what they hold beyond their shard while gathered
  // (ZeRO-3 keeping them between uses; 0 otherwise, or not known): a rank
  // whose list gathers the stage by UNSHARD holds this only from there to
  // its RESHARD.
  virtual double gathered_weight_bytes(int) const { return 0; }
};

// A StageCostModel's memory on a partition (the ranges of its stages).
class PartitionMemory final : public StageMemorySource {
 public:
  PartitionMemory(const StageCostModel& costs, const std::vector<schedule::LayerRange>& ranges)
      : costs_(costs), ranges_(ranges) {}
  int stages() const override { return static_cast<int>(ranges_.size()); }
  Parts fixed_parts(int s) const override;
  double whole_stash_bytes(int s) const override { return costs_.whole_stash_bytes(ranges_.at(s).begin, ranges_.at(s).end); }
  double checkpoint_stash_bytes(int s) const override {
    return costs_.checkpoint_stash_bytes(ranges_.at(s).begin, ranges_.at(s).end);
  }
  double weight_grad_bytes(int s) const override { return costs_.weight_grad_bytes(ranges_.at(s).begin, ranges_.at(s).end); }
  double workspace_bytes(int s) const override { return costs_.workspace_bytes(ranges_.at(s).begin, ranges_.at(s).end); }
  double reserve_bytes(int s, double held) const override { return costs_.device_of(s).reserve_bytes(held); }
  double capacity_bytes(int s) const override { return costs_.capacity_bytes(s); }
  const schedule::StageMemory& stash(int s) const override { return costs_.stash(s); }
  double static_bytes(int s) const override { return costs_.static_bytes(ranges_.at(s).begin, ranges_.at(s).end, s); }
  double gathered_weight_bytes(int s) const override {
    return costs_.gathered_weight_bytes(ranges_.at(s).begin, ranges_.at(s).end, s);
  }

 private:
  const StageCostModel& costs_;
  const std::vector<schedule::LayerRange>& ranges_;
};

struct RunSummary {
  std::string engine;  // "simgrid", "measured", ...
  double step_time_s = 0;
  double samples = 0;
  double throughput = 0;  // samples per second
  double bubble = 0;      // mean idle share of the ranks
  std::vector<double> busy_s, idle;  // per rank
  std::vector<StageMemoryReport> memory;  // per stage
  std::vector<RankMemoryReport> rank_memory;  // per rank, where a rank holds several stages (else empty)
  // With T > 1 (a program given): per rank, the seconds of its step that its
  // compute actions spend in the tensor group's collectives (the stage
  // costs' share of F, R, B and I); else empty.
  std::vector<double> tp_collective_s;
  bool fits() const;  // every stage, and every rank's stages together
  nlohmann::json to_json() const;
  std::string to_text() const;
};

// Each stage's memory along a timeline (bytes after every action of the
// stage), from the IR's stash bookkeeping replayed in time order.
struct MemorySample {
  double time = 0;
  double bytes = 0;
};
std::vector<std::vector<MemorySample>> memory_over_time(const schedule::Timeline& timeline,
                                                        const schedule::Program& program, const StageCostModel& costs);
std::vector<std::vector<MemorySample>> memory_over_time(const schedule::Timeline& timeline,
                                                        const schedule::Program& program, const StageMemorySource& memory);

// `program` (the one the timeline ran, its partition `ranges`), when given,
// also gives each rank's peak where it holds several stages: their memory
// summed at every action of its timeline.
RunSummary summarize(const schedule::Timeline& timeline, double samples, const StageCostModel& costs,
                     const std::vector<schedule::LayerRange>& ranges, std::string engine,
                     const schedule::Program* program = nullptr);
// The same from any memory source (a cost table's): tp_collective_s stays empty.
RunSummary summarize(const schedule::Timeline& timeline, double samples, const StageMemorySource& memory,
                     std::string engine, const schedule::Program* program = nullptr);

// With T > 1, per rank: the seconds of one step that its compute actions
// spend in the tensor group's collectives (the stage costs' collective
// share of each F and R, B and I, on the program's partition); else zeros.
std::vector<double> tp_collective_per_rank(const schedule::Program& program, const StageCostModel& costs);

// Each rank's largest total over its stages along the timeline (the IR's
// stash bookkeeping replayed in each rank's order).
std::vector<double> rank_peak_bytes(const schedule::Timeline& timeline, const schedule::Program& program,
                                    const StageCostModel& costs);
// The same peaks part by part (the reserve once per rank, on the rest).
std::vector<StageCostModel::MemoryParts> rank_peak_parts(const schedule::Timeline& timeline,
                                                         const schedule::Program& program, const StageCostModel& costs);
std::vector<StageCostModel::MemoryParts> rank_peak_parts(const schedule::Timeline& timeline,
                                                         const schedule::Program& program, const StageMemorySource& memory);

}  // namespace pipetwin::models
