// The plan's results CSV, and merge: the parts of a sharded plan joined.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "twin/plan_parts.hpp"

namespace pipetwin::twin {
namespace {

const char* kInputsLine = "# pipetwin plan inputs ";
const char* kHeader =
    "index,schedule,tensor,pipeline,data,virtual,microbatches,microbatch_size,recompute,sequence_parallel,zero,precision,"
    "context,expert,shard_group,status,engine,step_time_s,throughput_samples_per_s,tokens_per_s,tflops_per_gpu,mfu,"
    "bubble_fraction,tp_collectives_s,dp_exposed_s,memory_headroom_gb,reason";
// Earlier plans' headers: without the shard_group column; without it and
// the expert column; without those and the precision and context columns;
// before that with zero1 for zero.
const char* kHeaderExpert =
    "index,schedule,tensor,pipeline,data,virtual,microbatches,microbatch_size,recompute,sequence_parallel,zero,precision,"
    "context,expert,status,engine,step_time_s,throughput_samples_per_s,tokens_per_s,tflops_per_gpu,mfu,bubble_fraction,"
    "tp_collectives_s,dp_exposed_s,memory_headroom_gb,reason";
const char* kHeaderContext =
    "index,schedule,tensor,pipeline,data,virtual,microbatches,microbatch_size,recompute,sequence_parallel,zero,precision,"
    "context,status,engine,step_time_s,throughput_samples_per_s,tokens_per_s,tflops_per_gpu,mfu,bubble_fraction,tp_collectives_s,"
    "dp_exposed_s,memory_headroom_gb,reason";
const char* kHeaderZero =
    "index,schedule,tensor,pipeline,data,virtual,microbatches,microbatch_size,recompute,sequence_parallel,zero,status,"
    "engine,step_time_s,throughput_samples_per_s,tokens_per_s,tflops_per_gpu,mfu,bubble_fraction,tp_collectives_s,"
    "dp_exposed_s,memory_headroom_gb,reason";
const char* kHeaderZero1 =
    "index,schedule,tensor,pipeline,data,virtual,microbatches,microbatch_size,recompute,sequence_parallel,zero1,status,"
    "engine,step_time_s,throughput_samples_per_s,tokens_per_s,tflops_per_gpu,mfu,bubble_fraction,tp_collectives_s,"
    "dp_exposed_s,memory_headroom_gb,reason";
constexpr int kColumns = 27;  // kHeader's; the earlier headers' 26, 25 and 23

std::string number(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c == '\n' ? ' ' : c);
  return q + "\"";
}

std::string unquote(const std::string& s) {
  if (s.size() < 2 || s.front() != '"' || s.back() != '"') return s;
  std::string out;
  for (std::size_t i = 1; i + 1 < s.size(); ++i) {
    out += s[i];
    if (s[i] == '"' && s[i + 1] == '"') ++i;
  }
  return out;
}

std::string row(const Candidate& c) {
  const bool ran = c.status == "ok" || (c.status == "oom" && !c.engine.empty());
  const auto figure = [&](double x) { return ran ? number(x) : std::string(); };
  return std::to_string(c.index) + "," + c.schedule + "," + std::to_string(c.tensor) + "," + std::to_string(c.pipeline) +
         "," + std::to_string(c.data) + "," + std::to_string(c.virtual_stages) + "," + std::to_string(c.microbatches) +
         "," + std::to_string(c.microbatch_size) + "," + c.recompute + "," + (c.sequence_parallel ? "1" : "0") + "," +
         std::to_string(c.zero) + "," + c.precision + "," + std::to_string(c.context) + "," + std::to_string(c.expert) + "," + std::to_string(c.shard_group) + "," + c.status + "," + c.engine + "," + figure(c.step_s) + "," +
         figure(c.samples_per_s) + "," + figure(c.tokens_per_s) + "," + figure(c.tflops_per_gpu) + "," + figure(c.mfu) + "," +
         figure(c.bubble) + "," + figure(c.tp_comm_s) + "," + figure(c.dp_exposed_s) + "," + figure(c.headroom_gb) +
         "," + csv_field(c.reason);
}

struct RowReader {
  const std::string& path;
  int line;
  std::vector<std::string> cells;
  std::size_t at = 0;

  Error bad(const std::string& what) const {
    return Error(path + ":" + std::to_string(line) + ": " + what + ": not a row pipetwin plan wrote");
  }
  const std::string& next() { return cells.at(at++); }
  long long whole(const char* name) {
    const std::string& cell = next();
    char* end = nullptr;
    const long long v = std::strtoll(cell.c_str(), &end, 10);
    if (cell.empty() || end != cell.c_str() + cell.size() || v < 0) throw bad(std::string("column '") + name + "' is '" + cell + "'");
    return v;
  }
  double real(const char* name) {
    const std::string& cell = next();
    if (cell.empty()) return 0;
    char* end = nullptr;
    const double v = std::strtod(cell.c_str(), &end);
    if (end != cell.c_str() + cell.size() || !std::isfinite(v)) throw bad(std::string("column '") + name + "' is '" + cell + "'");
    return v;
  }
};

// A row of a file whose header has `columns` columns (precision and context
// from kColumns - 2, expert from kColumns - 1, shard_group at kColumns).
Candidate parse_row(const std::string& path, int number, const std::string& text, int columns) {
  RowReader r{path, number, {}};
  std::size_t from = 0;
  for (int c = 0; c < columns - 1; ++c) {
    const auto comma = text.find(',', from);
    if (comma == std::string::npos) throw r.bad("the row has " + std::to_string(c + 1) + " columns, not " + std::to_string(columns));
    r.cells.push_back(text.substr(from, comma - from));
    from = comma + 1;
  }
  r.cells.push_back(unquote(text.substr(from)));
  Candidate c;
  c.index = static_cast<std::size_t>(r.whole("index"));
  c.schedule = r.next();
  c.tensor = static_cast<int>(r.whole("tensor")), c.pipeline = static_cast<int>(r.whole("pipeline"));
  c.data = static_cast<int>(r.whole("data")), c.virtual_stages = static_cast<int>(r.whole("virtual"));
  c.microbatches = static_cast<int>(r.whole("microbatches")), c.microbatch_size = static_cast<int>(r.whole("microbatch_size"));
  c.recompute = r.next();
  c.sequence_parallel = r.whole("sequence_parallel") != 0, c.zero = static_cast<int>(r.whole("zero"));
  if (c.zero > 3) throw r.bad("column 'zero' is " + std::to_string(c.zero));
  if (columns >= kColumns - 2) {
    c.precision = r.next();
    try {
      if (!c.precision.empty()) models::parse_precision(c.precision);
    } catch (const Error&) {
      throw r.bad("column 'precision' is '" + c.precision + "'");
    }
    c.context = static_cast<int>(r.whole("context"));
    if (c.context < 1) throw r.bad("column 'context' is 0");
  }
  if (columns >= kColumns - 1) {
    c.expert = static_cast<int>(r.whole("expert"));
    if (c.expert < 1) throw r.bad("column 'expert' is 0");
  }
  if (columns == kColumns) {
    c.shard_group = static_cast<int>(r.whole("shard_group"));
    if (c.shard_group == 1 || (c.shard_group > 0 && c.zero == 0)) {
      throw r.bad("column 'shard_group' is " + std::to_string(c.shard_group) + " with zero " + std::to_string(c.zero));
    }
  }
  c.status = r.next();
  if (c.status != "ok" && c.status != "oom" && c.status != "error") throw r.bad("column 'status' is '" + c.status + "'");
  c.engine = r.next();
  c.step_s = r.real("step_time_s"), c.samples_per_s = r.real("throughput_samples_per_s");
  c.tokens_per_s = r.real("tokens_per_s"), c.tflops_per_gpu = r.real("tflops_per_gpu"), c.mfu = r.real("mfu"), c.bubble = r.real("bubble_fraction");
  c.tp_comm_s = r.real("tp_collectives_s"), c.dp_exposed_s = r.real("dp_exposed_s"), c.headroom_gb = r.real("memory_headroom_gb");
  c.reason = r.next();
  return c;
}

// "# shard I/N of E candidates"
bool parse_shard_line(const std::string& line, PlanResult& r) {
  unsigned long long e = 0;
  char tail[16] = {};
  if (std::sscanf(line.c_str(), "# shard %d/%d of %llu candidate%15s", &r.shard, &r.shards, &e, tail) != 4) return false;
  r.enumerated = e;
  return r.shards >= 1 && r.shard >= 0 && r.shard < r.shards && std::string(tail) == "s";
}

std::size_t in_shard(std::size_t enumerated, int shard, int shards) {
  const auto n = static_cast<std::size_t>(shards), i = static_cast<std::size_t>(shard);
  return enumerated / n + (i < enumerated % n ? 1 : 0);
}

}  // namespace

void write_plan_csv(const std::string& path, const PlanResult& r) {
  std::string text = kInputsLine + r.fingerprint + ": " + r.description + "\n# shard " + std::to_string(r.shard) + "/" +
                     std::to_string(r.shards) + " of " + std::to_string(r.enumerated) + " candidates\n" + kHeader + "\n";
  for (const auto& c : r.candidates) text += row(c) + "\n";
  schedule::write_file_atomic(path, text);
}

PlanResult read_plan_csv(const std::string& path) {
  std::istringstream in(schedule::read_file(path));
  std::string first, second, header;
  std::getline(in, first), std::getline(in, second), std::getline(in, header);
  PlanResult r;
  const std::string prefix = kInputsLine;
  const auto colon = first.find(": ", prefix.size());
  if (first.rfind(prefix, 0) != 0 || colon == std::string::npos) {
    throw Error(path + ":1: not a results file of pipetwin plan (no '" + prefix + "' line)");
  }
  r.fingerprint = first.substr(prefix.size(), colon - prefix.size());
  r.description = first.substr(colon + 2);
  if (!parse_shard_line(second, r)) throw Error(path + ":2: not a '# shard I/N of E candidates' line");
  // Plans before ZeRO's stages named the column zero1 (0 or 1: the same values).
  if (header != kHeader && header != kHeaderExpert && header != kHeaderContext && header != kHeaderZero && header != kHeaderZero1) {
    throw Error(path + ":3: not the header pipetwin plan writes");
  }
  const int columns = header == kHeader         ? kColumns
                      : header == kHeaderExpert  ? kColumns - 1
                      : header == kHeaderContext ? kColumns - 2
                                                 : kColumns - 4;
  int number = 3;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (line.empty()) continue;
    auto c = parse_row(path, number, line, columns);
    if (c.index >= r.enumerated || static_cast<int>(c.index % static_cast<std::size_t>(r.shards)) != r.shard) {
      throw Error(path + ":" + std::to_string(number) + ": candidate " + std::to_string(c.index) + " is not in shard " +
                  std::to_string(r.shard) + "/" + std::to_string(r.shards) + " of " + std::to_string(r.enumerated));
    }
    r.candidates.push_back(std::move(c));
  }
  if (r.candidates.size() != in_shard(r.enumerated, r.shard, r.shards)) {
    throw Error(path + ": " + std::to_string(r.candidates.size()) + " candidates, but shard " + std::to_string(r.shard) +
                "/" + std::to_string(r.shards) + " of " + std::to_string(r.enumerated) + " has " +
                std::to_string(in_shard(r.enumerated, r.shard, r.shards)) + ": an incomplete part");
  }
  return r;
}

PlanResult merge_plans(const std::vector<std::string>& paths) {
  if (paths.empty()) throw Error("merge: no parts given");
  std::vector<PlanResult> parts;
  std::map<int, std::string> seen;  // shard -> file
  for (const auto& path : paths) {
    parts.push_back(read_plan_csv(path));
    const auto& p = parts.back();
    const auto& first = parts.front();
    const std::string shard = std::to_string(p.shard) + "/" + std::to_string(p.shards);
    if (p.fingerprint != first.fingerprint || p.enumerated != first.enumerated) {
      throw Error(path + ": a part of another plan (inputs " + p.fingerprint + ": " + p.description + "), not of " +
                  paths.front() + "'s (inputs " + first.fingerprint + ": " + first.description + ")");
    }
    if (p.shards != first.shards) {
      throw Error(path + ": shard " + shard + ", but " + paths.front() + " is shard " + std::to_string(first.shard) + "/" +
                  std::to_string(first.shards) + ": the parts of one plan split it into the same number of shards");
    }
    if (const auto [it, added] = seen.emplace(p.shard, path); !added) {
      throw Error(path + ": shard " + shard + " again (" + it->second + " is shard " + shard + " too)");
    }
  }
  std::string missing;
  for (int i = 0; i < parts.front().shards; ++i) {
    if (!seen.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i) + "/" + std::to_string(parts.front().shards);
  }
  if (!missing.empty()) throw Error("merge: shard " + missing + " missing (the parts given: " + std::to_string(paths.size()) + ", the last " + paths.back() + ")");
  PlanResult out = parts.front();
  out.shard = 0, out.shards = 1, out.wall_s = 0;
  out.candidates.clear();
  for (auto& p : parts) {
    for (auto& c : p.candidates) out.candidates.push_back(std::move(c));
  }
  std::sort(out.candidates.begin(), out.candidates.end(), [](const Candidate& a, const Candidate& b) { return a.index < b.index; });
  return out;
}

nlohmann::json candidate_json(const Candidate& c, int rank) {
  return {{"rank", rank},
          {"index", c.index},
          {"tensor", c.tensor},
          {"pipeline", c.pipeline},
          {"data", c.data},
          {"virtual", c.virtual_stages},
          {"microbatches", c.microbatches},
          {"microbatch_size", c.microbatch_size},
          {"schedule", c.schedule},
          {"recompute", c.recompute},
          {"sequence_parallel", c.sequence_parallel},
          {"zero", c.zero},
          {"precision", c.precision},
          {"context", c.context},
          {"expert", c.expert},
          {"shard_group", c.shard_group},
          {"engine", c.engine},
          {"step_time_s", c.step_s},
          {"throughput_samples_per_s", c.samples_per_s},
          {"tokens_per_s", c.tokens_per_s},
          {"model_tflops_per_gpu", c.tflops_per_gpu},
          {"mfu", c.mfu},
          {"why",
           {{"bubble_fraction", c.bubble},
            {"tp_collectives_s", c.tp_comm_s},
            {"dp_exposed_s", c.dp_exposed_s},
            {"memory_headroom_gb", c.headroom_gb}}}};
}

}  // namespace pipetwin::twin
