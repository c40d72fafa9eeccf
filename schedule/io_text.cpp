// The text form and the CSV form, which share the inference of a Program's
// shape from bare action lists.
//
//   # pipetwin schedule            <- optional header lines, "key value..."
//   schedule 1f1b
//   ranks 2
//   ...
//   rank 0: 0F0 0SEND_F0 0RECV_B0 0B0 0STEP
//   rank 1: 1RECV_F0 1F0 1B0 1SEND_B0 1STEP
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"

namespace pipetwin::schedule {
namespace {

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (const char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::vector<std::string> words(std::string_view s) {
  std::istringstream in{std::string(s)};
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

int to_int(const std::string& word, const std::string& where) {
  try {
    std::size_t used = 0;
    const int v = std::stoi(word, &used);
    if (used == word.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(where + ": '" + word + "' is not an integer");
}

// One cell or word: an action, or an OVERLAP_F_B's actions.
std::vector<Action> parse_at(const std::string& text, const std::string& where) {
  try {
    return parse_cell(text);
  } catch (const Error& e) {
    throw Error(where + ": " + e.what());
  }
}

void append(std::vector<Action>& to, const std::vector<Action>& actions) { to.insert(to.end(), actions.begin(), actions.end()); }

// Fills the shape of a Program from its action lists where no header gave it.
struct Header {
  std::string schedule = "imported";
  std::optional<int> ranks, stages_per_rank, microbatches;
  std::optional<RecomputePolicy> recompute;
  int tensor_parallel = 1, data_parallel = 1;
  bool sequence_parallel = false, reshard_after_forward = true;
  int zero = 0, shard_group = 0, context_parallel = 1, expert_parallel = 1, expert_tensor_parallel = 0;
  std::vector<int> stage_to_rank, weight_versions;
  std::vector<LayerRange> partition;
  // The degree a header key names (tensor_parallel, ...); nullptr for another key.
  int* degree(const std::string& key) {
    return key == "tensor_parallel"    ? &tensor_parallel
           : key == "data_parallel"    ? &data_parallel
           : key == "shard_group"      ? &shard_group
           : key == "context_parallel" ? &context_parallel
           : key == "expert_parallel"  ? &expert_parallel
           : key == "expert_tensor_parallel" ? &expert_tensor_parallel
                                       : nullptr;
  }
};

RecomputePolicy infer_recompute(const std::vector<std::vector<Action>>& ranks, int stages, int M,
                                const std::string& source) {
  std::set<std::pair<int, int>> recomputed;
  for (const auto& actions : ranks) {
    for (const auto& a : actions) {
      if (a.op == Op::R && a.microbatch) recomputed.insert({a.stage.value, a.microbatch->value});
    }
  }
  if (recomputed.empty()) return RecomputePolicy::None;
  const auto all_but = [&](int last) {
    for (int s = 0; s < stages; ++s) {
      for (int m = 0; m < M; ++m) {
        if (recomputed.count({s, m}) != (m < last ? 1u : 0u)) return false;
      }
    }
    return true;
  };
  if (all_but(M)) return RecomputePolicy::Full;
  if (all_but(M - 1)) return RecomputePolicy::ExceptLast;
  throw Error(source + ": the R actions match no recompute policy (none, full, except-last)");
}

Program assemble(Header h, std::vector<std::vector<Action>> ranks, const std::string& source) {
  const int K = h.ranks.value_or(static_cast<int>(ranks.size()));
  if (K < 1) throw Error(source + ": no ranks (expected lines 'rank N: ...' or CSV rows)");
  if (static_cast<int>(ranks.size()) != K) {
    throw Error(source + ": header says ranks " + std::to_string(K) + " but " + std::to_string(ranks.size()) +
                " rank lines follow");
  }
  int max_stage = -1, max_mb = -1;
  std::map<int, int> first_rank_of_stage;
  for (int r = 0; r < K; ++r) {
    for (const auto& a : ranks[r]) {
      max_stage = std::max(max_stage, a.stage.value);
      if (a.microbatch) max_mb = std::max(max_mb, a.microbatch->value);
      first_rank_of_stage.emplace(a.stage.value, r);
    }
  }
  int V = h.stages_per_rank.value_or(0);
  if (!h.stages_per_rank) {
    const int S = max_stage + 1;
    if (S % K != 0) {
      throw Error(source + ": " + std::to_string(S) + " stages do not divide evenly over " + std::to_string(K) +
                  " ranks");
    }
    V = std::max(1, S / K);
  }
  const int M = h.microbatches.value_or(std::max(1, max_mb + 1));
  if (V < 1) throw Error(source + ": stages per rank must be at least 1, got " + std::to_string(V));
  if (static_cast<std::int64_t>(K) * V > kMaxStages) {
    throw Error(source + ": " + std::to_string(K) + " ranks x " + std::to_string(V) + " stages per rank is more than the " +
                std::to_string(kMaxStages) + " stages pipetwin reads");
  }
  Program p = make_program(h.schedule, K, V, M, RecomputePolicy::None);
  if (!h.stage_to_rank.empty()) {
    p.stage_to_rank.clear();
    for (const int r : h.stage_to_rank) p.stage_to_rank.push_back(RankId{r});
  } else {
    for (int s = 0; s < p.num_stages(); ++s) {
      const auto it = first_rank_of_stage.find(s);
      if (it == first_rank_of_stage.end()) {
        throw Error(source + ": stage " + std::to_string(s) + " appears on no rank, so its rank is unknown");
      }
      p.stage_to_rank[s] = RankId{it->second};
    }
  }
  if (!h.weight_versions.empty()) p.weight_versions = h.weight_versions;
  p.partition = h.partition;
  p.ranks = std::move(ranks);
  p.recompute = h.recompute ? *h.recompute : infer_recompute(p.ranks, p.num_stages(), M, source);
  p.tensor_parallel = h.tensor_parallel;
  p.data_parallel = h.data_parallel;
  p.sequence_parallel = h.sequence_parallel;
  p.zero = h.zero;
  p.reshard_after_forward = h.reshard_after_forward;
  p.shard_group = h.shard_group;
  p.context_parallel = h.context_parallel;
  p.expert_parallel = h.expert_parallel;
  p.expert_tensor_parallel = h.expert_tensor_parallel;
  return p;
}

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (const int x : v) out += " " + std::to_string(x);
  return out;
}

}  // namespace

std::string to_text(const Program& p) {
  std::ostringstream out;
  out << "# pipetwin schedule\n";
  out << "schedule " << p.schedule << "\n";
  out << "ranks " << p.num_ranks << "\n";
  out << "stages_per_rank " << p.stages_per_rank << "\n";
  out << "microbatches " << p.num_microbatches << "\n";
  out << "recompute " << recompute_name(p.recompute) << "\n";
  // Written only where they are not the pipeline alone's, so that older files read the same.
  if (p.tensor_parallel != 1) out << "tensor_parallel " << p.tensor_parallel << "\n";
  if (p.data_parallel != 1) out << "data_parallel " << p.data_parallel << "\n";
  if (p.sequence_parallel) out << "sequence_parallel on\n";
  // ZeRO-1 keeps its older spelling.
  if (p.zero == 1) out << "shard_optimizer on\n";
  if (p.zero > 1) out << "zero " << p.zero << "\n";
  if (p.zero == 3 && !p.reshard_after_forward) out << "reshard_after_forward off\n";
  if (p.shard_group > 0) out << "shard_group " << p.shard_group << "\n";
  if (p.context_parallel > 1) out << "context_parallel " << p.context_parallel << "\n";
  if (p.expert_parallel > 1) out << "expert_parallel " << p.expert_parallel << "\n";
  if (p.expert_tensor_parallel > 0) out << "expert_tensor_parallel " << p.expert_tensor_parallel << "\n";
  std::vector<int> map;
  for (const auto r : p.stage_to_rank) map.push_back(r.value);
  out << "stage_to_rank" << join_ints(map) << "\n";
  out << "weight_versions" << join_ints(p.weight_versions) << "\n";
  if (!p.partition.empty()) {
    out << "partition";
    for (const auto& range : p.partition) out << " " << range.begin << ":" << range.end;
    out << "\n";
  }
  for (int r = 0; r < p.num_ranks; ++r) {
    out << "rank " << r << ":";
    for (const auto& cell : to_cells(p.ranks[r])) out << " " << cell;
    out << "\n";
  }
  return out.str();
}

Program parse_text(std::string_view text, const std::string& source) {
  check_utf8(text, source);  // the header's schedule name is free text
  Header h;
  std::vector<std::vector<Action>> ranks;
  int line_no = 0;
  for (const auto& raw : split(text, '\n')) {
    ++line_no;
    const std::string line = trim(raw);
    const std::string where = source + ":" + std::to_string(line_no);
    if (line.empty() || line[0] == '#') continue;
    const auto w = words(line);
    if (w.empty()) continue;  // only whitespace that trim() does not strip (\v, \f)
    const std::string& k = w[0];
    const auto one = [&]() -> const std::string& {
      if (w.size() != 2) throw Error(where + ": '" + k + "' takes exactly one value");
      return w[1];
    };
    const auto ints = [&] {
      std::vector<int> v;
      for (std::size_t i = 1; i < w.size(); ++i) v.push_back(to_int(w[i], where));
      return v;
    };
    if (k == "rank") {
      const auto colon = line.find(':');
      if (colon == std::string::npos) throw Error(where + ": expected 'rank N: actions...'");
      const int r = to_int(trim(line.substr(4, colon - 4)), where);
      if (r != static_cast<int>(ranks.size())) {
        throw Error(where + ": expected rank " + std::to_string(ranks.size()) + ", found rank " + std::to_string(r));
      }
      ranks.emplace_back();
      for (const auto& word : words(line.substr(colon + 1))) append(ranks.back(), parse_at(word, where));
    } else if (k == "schedule") {
      h.schedule = one();
    } else if (k == "ranks") {
      h.ranks = to_int(one(), where);
    } else if (k == "stages_per_rank") {
      h.stages_per_rank = to_int(one(), where);
    } else if (k == "microbatches") {
      h.microbatches = to_int(one(), where);
    } else if (k == "recompute") {
      try {
        h.recompute = parse_recompute(one());
      } catch (const Error& e) {
        throw Error(where + ": " + e.what());
      }
    } else if (int* degree = h.degree(k)) {
      const int v = to_int(one(), where);
      if (v < 1 || v > kMaxParallel) {
        throw Error(where + ": '" + k + "' must be between 1 and " + std::to_string(kMaxParallel) + ", got " + w[1]);
      }
      *degree = v;
    } else if (k == "sequence_parallel" || k == "shard_optimizer" || k == "reshard_after_forward") {
      const std::string& v = one();
      if (v != "on" && v != "off") throw Error(where + ": '" + k + "' must be on or off, got '" + v + "'");
      if (k == "sequence_parallel") h.sequence_parallel = v == "on";
      if (k == "shard_optimizer") h.zero = v == "on" ? std::max(h.zero, 1) : 0;
      if (k == "reshard_after_forward") h.reshard_after_forward = v == "on";
    } else if (k == "zero") {
      const int v = to_int(one(), where);
      if (v < 0 || v > 3) throw Error(where + ": 'zero' (ZeRO's stage) must be 0, 1, 2 or 3, got " + w[1]);
      h.zero = v;
    } else if (k == "stage_to_rank") {
      h.stage_to_rank = ints();
    } else if (k == "weight_versions") {
      h.weight_versions = ints();
    } else if (k == "partition") {
      for (std::size_t i = 1; i < w.size(); ++i) {
        const auto parts = split(w[i], ':');
        if (parts.size() != 2) throw Error(where + ": partition range '" + w[i] + "' is not begin:end");
        h.partition.push_back({to_int(parts[0], where), to_int(parts[1], where)});
      }
    } else {
      throw Error(where + ": unknown line '" + k + "' (expected a header key or 'rank N: actions...')");
    }
  }
  return assemble(std::move(h), std::move(ranks), source);
}

std::string to_csv(const Program& p) {
  std::string out;
  for (const auto& actions : p.ranks) {
    const auto cells = to_cells(actions);
    for (std::size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
    out += "\n";
  }
  return out;
}

std::string to_pytorch_csv(const Program& p, std::vector<std::string>* left_out) {
  std::size_t steps = 0, recomputes = 0;
  std::string out;
  for (const auto& actions : p.ranks) {
    std::vector<Action> kept;
    kept.reserve(actions.size());
    for (const auto& a : actions) {
      if (a.op == Op::STEP || a.op == Op::R) {
        ++(a.op == Op::STEP ? steps : recomputes);
      } else {
        kept.push_back(a);
      }
    }
    const auto cells = to_cells(kept);
    for (std::size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
    out += "\n";
  }
  if (left_out != nullptr) {
    if (steps > 0) left_out->push_back(std::to_string(steps) + " STEP (the optimizer step, which runs after PyTorch's schedule)");
    if (recomputes > 0) {
      left_out->push_back(std::to_string(recomputes) + " R (recompute: activation checkpointing inside a stage's forward in PyTorch)");
    }
  }
  return out;
}

Program parse_csv(std::string_view text, const std::string& source, std::vector<std::string>* notes) {
  check_utf8(text, source);
  std::vector<std::vector<Action>> ranks;
  int line_no = 0, fsdp = 0, overlaps = 0, reduces = 0;
  auto lines = split(text, '\n');
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  for (const auto& raw : lines) {
    ++line_no;
    ranks.emplace_back();
    int column = 0;
    for (const auto& cell : split(raw, ',')) {
      ++column;
      const std::string c = trim(cell);
      const std::string where = source + ":" + std::to_string(line_no) + ": column " + std::to_string(column);
      // Empty cells are bubbles in torch's compute-only CSVs.
      if (c.empty()) continue;
      const auto actions = parse_at(c, where);
      append(ranks.back(), actions);
      overlaps += actions.size() > 1;
      reduces += actions.back().op == Op::REDUCE_GRAD;
      fsdp += is_fsdp(actions.back().op);
    }
  }
  Program p = assemble(Header{}, std::move(ranks), source);
  int moved = 0;
  if (p.has_transfers()) p = receive_at_use(std::move(p), &moved);
  if (notes != nullptr) {
    if (overlaps > 0) {
      notes->push_back(std::to_string(overlaps) + " OVERLAP_F_B: kept as overlapped actions; the executor runs each one's "
                       "sub-actions one after the other, as PyTorch's runtime does unless a custom overlap is registered; "
                       "the simulators time it as their sum less the hardware's overlap_factor times the shorter");
    }
    if (fsdp > 0) {
      notes->push_back(std::to_string(fsdp) + " UNSHARD/RESHARD (FSDP): kept; with --zero 3 --reshard-after-forward off "
                       "each UNSHARD gathers its stage's weights and RESHARD frees them, no-ops in time otherwise");
    }
    if (reduces > 0) {
      notes->push_back(std::to_string(reduces) + " REDUCE_GRAD: no-ops in time for one replica; rings over the data group with --data D > 1");
    }
    if (moved > 0) {
      notes->push_back(std::to_string(moved) + " receives waited for where their data is used, not where they stand: "
                       "a RECV in PyTorch's CSV posts the receive, its runtime waits just before the compute that needs it");
    }
  }
  return p;
}

}  // namespace pipetwin::schedule
