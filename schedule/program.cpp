// Program helpers and the recompute policy's names.
#include "schedule/program.hpp"

#include "schedule/error.hpp"
#include "schedule/names.hpp"

namespace pipetwin::schedule {

namespace {
constexpr NameTable<RecomputePolicy, 4> kRecompute{"recompute policy",
                                                  {{{RecomputePolicy::None, "none"},
                                                    {RecomputePolicy::Full, "full"},
                                                    {RecomputePolicy::ExceptLast, "except-last"},
                                                    {RecomputePolicy::Selective, "selective"}}}};
}  // namespace

std::string_view recompute_name(RecomputePolicy policy) { return kRecompute.name(policy); }
RecomputePolicy parse_recompute(std::string_view name) { return kRecompute.parse(name); }
const std::vector<std::string>& recompute_names() {
  static const auto names = kRecompute.names();
  return names;
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
    case RecomputePolicy::None:
    case RecomputePolicy::Selective: return false;  // inside each layer's backward, not a stage's R
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
