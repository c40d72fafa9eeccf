// Program helpers and the recompute policy's names.
#include "schedule/program.hpp"

#include "schedule/error.hpp"

namespace pipetwin::schedule {

std::string_view recompute_name(RecomputePolicy policy) {
  switch (policy) {
    case RecomputePolicy::None: return "none";
    case RecomputePolicy::Full: return "full";
    case RecomputePolicy::ExceptLast: return "except-last";
  }
  return "?";
}

RecomputePolicy parse_recompute(std::string_view name) {
  if (name == "none") return RecomputePolicy::None;
  if (name == "full") return RecomputePolicy::Full;
  if (name == "except-last") return RecomputePolicy::ExceptLast;
  throw Error("unknown recompute policy '" + std::string(name) + "' (valid: none, full, except-last)");
}

std::vector<StageId> Program::stages_of(RankId rank) const {
  std::vector<StageId> stages;
  for (int s = 0; s < num_stages(); ++s) {
    if (stage_to_rank[s] == rank) stages.push_back(StageId{s});
  }
  return stages;
}

bool Program::recomputes(StageId, MicrobatchId mb) const {
  switch (recompute) {
    case RecomputePolicy::None: return false;
    case RecomputePolicy::Full: return true;
    case RecomputePolicy::ExceptLast: return mb.value != num_microbatches - 1;
  }
  return false;
}

bool Program::leaves_recompute_open() const {
  if (recompute != RecomputePolicy::None) return false;
  for (const auto& actions : ranks) {
    for (const auto& a : actions) {
      if (a.op == Op::R) return false;
    }
  }
  return true;
}

bool Program::has_transfers() const {
  for (const auto& actions : ranks) {
    for (const auto& action : actions) {
      if (is_transfer(action.op)) return true;
    }
  }
  return false;
}

std::size_t Program::num_actions() const {
  std::size_t n = 0;
  for (const auto& actions : ranks) n += actions.size();
  return n;
}

Program make_program(std::string schedule, int ranks, int stages_per_rank, int microbatches,
                     RecomputePolicy recompute) {
  Program p;
  p.schedule = std::move(schedule);
  p.num_ranks = ranks;
  p.stages_per_rank = stages_per_rank;
  p.num_microbatches = microbatches;
  p.recompute = recompute;
  const int stages = ranks * stages_per_rank;
  for (int s = 0; s < stages; ++s) p.stage_to_rank.push_back(RankId{s % ranks});
  p.weight_versions.assign(stages, 1);
  p.ranks.assign(ranks, {});
  return p;
}

}  // namespace pipetwin::schedule
