// read_runs_csv: whole runs and their speed, one CSV row each.
#include "calibration/runs.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "schedule/error.hpp"

namespace pipetwin::calibration {

namespace {

std::vector<std::string> split_row(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"', ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(field), field.clear();
    } else if (c != '\r') {
      field += c;
    }
  }
  out.push_back(field);
  for (auto& f : out) {
    const auto b = f.find_first_not_of(" \t"), e = f.find_last_not_of(" \t");
    f = b == std::string::npos ? "" : f.substr(b, e - b + 1);
  }
  return out;
}

const std::vector<std::string> kColumns{"name",          "model",        "hardware",    "tensor",
                                        "pipeline",      "data",         "gpus",        "virtual",
                                        "microbatches",  "microbatch_size", "global_batch", "schedule",
                                        "recompute",     "sequence_parallel", "zero1",  "zero", "precision", "context", "expert", "expert_tensor", "partition", "step_s",
                                        "tflops_per_gpu", "formula",     "role"};

FlopsFormula parse_formula(const std::string& text, const std::string& where) {
  if (text == "megatron") return FlopsFormula::Megatron;
  if (text == "megatron-no-recompute") return FlopsFormula::MegatronNoRecompute;
  if (text == "model") return FlopsFormula::Model;
  throw Error(where + ": column 'formula': unknown '" + text + "' (valid: megatron, megatron-no-recompute, model)");
}

}  // namespace

std::string_view formula_name(FlopsFormula f) {
  switch (f) {
    case FlopsFormula::Megatron: return "megatron";
    case FlopsFormula::MegatronNoRecompute: return "megatron-no-recompute";
    case FlopsFormula::Model: return "model";
  }
  return "?";
}

namespace {

void check_header(const std::vector<std::string>& header, const std::string& where) {
  for (const auto& h : header) {
    if (std::find(kColumns.begin(), kColumns.end(), h) == kColumns.end()) {
      std::string valid;
      for (const auto& c : kColumns) valid += (valid.empty() ? "" : ", ") + c;
      throw Error(where + ": unknown column '" + h + "' (valid: " + valid + ")");
    }
  }
  for (const char* needed : {"model", "hardware"}) {
    if (std::find(header.begin(), header.end(), needed) == header.end()) {
      throw Error(where + ": the header has no column '" + std::string(needed) + "'");
    }
  }
}

// One row's cells by column, each read with the row's place in its errors.
class Row {
 public:
  Row(std::map<std::string, std::string> cells, std::string where) : cells_(std::move(cells)), where_(std::move(where)) {}
  const std::string& where() const { return where_; }
  bool has(const char* c) const { return cells_.count(c) && !cells_.at(c).empty(); }
  const std::string& text(const char* c) const { return cells_.at(c); }
  int integer(const char* c, int fallback, int least) const {
    if (!has(c)) return fallback;
    const std::string& t = cells_.at(c);
    int v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc{} || end != t.data() + t.size() || v < least) {
      throw Error(where_ + ": column '" + c + "': '" + t + "' is not an integer of at least " + std::to_string(least));
    }
    return v;
  }
  double positive(const char* c) const {
    if (!has(c)) return 0.0;
    const std::string& t = cells_.at(c);
    std::istringstream s(t);
    double v = 0;
    if (!(s >> v) || !s.eof() || !(v > 0)) throw Error(where_ + ": column '" + c + "': '" + t + "' is not a positive number");
    return v;
  }
  bool flag(const char* c) const {
    if (!has(c)) return false;
    const std::string& t = cells_.at(c);
    if (t == "1" || t == "true" || t == "on" || t == "yes") return true;
    if (t == "0" || t == "false" || t == "off" || t == "no") return false;
    throw Error(where_ + ": column '" + c + "': '" + t + "' is not a flag (1/0, true/false, on/off)");
  }

 private:
  std::map<std::string, std::string> cells_;
  std::string where_;
};

// T, K, D (or the GPUs), V, b, the batch and M, which must agree.
void read_shape(const Row& row, MeasuredRun& r) {
  r.tensor = row.integer("tensor", 1, 1);
  r.pipeline = row.integer("pipeline", 1, 1);
  r.virtual_stages = row.integer("virtual", 1, 1);
  r.context = row.integer("context", 1, 1);
  r.expert = row.integer("expert", 1, 1);
  r.expert_tensor = row.integer("expert_tensor", 0, 0);
  if (row.has("data") && row.has("gpus")) throw Error(row.where() + ": give one of the columns 'data' and 'gpus', not both");
  if (row.has("gpus")) {
    const int gpus = row.integer("gpus", 1, 1), group = r.tensor * r.pipeline * r.context;
    if (gpus % group != 0) {
      throw Error(row.where() + ": gpus " + std::to_string(gpus) + " is not a multiple of tensor x pipeline x context = " +
                  std::to_string(group));
    }
    r.data = gpus / group;
  } else {
    r.data = row.integer("data", 1, 1);
  }
  r.microbatch_size = row.integer("microbatch_size", 1, 1);
  r.global_batch = row.integer("global_batch", 0, 1);
  r.microbatches = row.integer("microbatches", 0, 1);
  const int per_step = r.data * r.microbatch_size;
  if (r.microbatches == 0) {
    if (r.global_batch == 0) throw Error(row.where() + ": give 'microbatches' or 'global_batch'");
    if (r.global_batch % per_step != 0) {
      throw Error(row.where() + ": global_batch " + std::to_string(r.global_batch) + " does not split into micro-batches of " +
                  std::to_string(r.microbatch_size) + " on " + std::to_string(r.data) + " replicas");
    }
    r.microbatches = r.global_batch / per_step;
  } else if (r.global_batch == 0) {
    r.global_batch = r.microbatches * per_step;
  } else if (r.global_batch != r.microbatches * per_step) {
    throw Error(row.where() + ": global_batch " + std::to_string(r.global_batch) + " is not microbatches x data x microbatch_size");
  }
}

MeasuredRun read_row(const Row& row, const std::filesystem::path& folder, int number) {
  MeasuredRun r;
  r.source = row.where();
  r.name = row.has("name") ? row.text("name") : "line " + std::to_string(number);
  if (!row.has("model")) throw Error(row.where() + ": column 'model' is empty");
  if (!row.has("hardware")) throw Error(row.where() + ": column 'hardware' is empty");
  const auto relative = [&](const std::string& p) {
    const auto full = folder / p;
    return std::filesystem::path(p).is_relative() && std::filesystem::exists(full) ? full.string() : p;
  };
  r.model = relative(row.text("model"));
  r.hardware = relative(row.text("hardware"));
  read_shape(row, r);
  r.schedule = row.has("schedule") ? row.text("schedule") : r.virtual_stages > 1 ? "interleaved-1f1b" : "1f1b";
  if (row.has("recompute")) r.recompute = row.text("recompute");
  r.sequence_parallel = row.flag("sequence_parallel");
  if (row.has("zero1") && row.has("zero")) throw Error(row.where() + ": give one of the columns 'zero1' and 'zero', not both");
  r.zero = row.integer("zero", row.flag("zero1") ? 1 : 0, 0);
  if (r.zero > 3) throw Error(row.where() + ": column 'zero': '" + row.text("zero") + "' (valid: 0, 1, 2, 3)");
  if (row.has("precision")) {
    r.precision = row.text("precision");
    if (r.precision != "bf16" && r.precision != "fp16" && r.precision != "fp8") {
      throw Error(row.where() + ": column 'precision': '" + r.precision + "' (valid: bf16, fp16, fp8)");
    }
  }
  if (row.has("partition")) r.partition = relative(row.text("partition"));
  r.step_s = row.positive("step_s");
  r.tflops_per_gpu = row.positive("tflops_per_gpu");
  if ((r.step_s > 0) == (r.tflops_per_gpu > 0)) throw Error(row.where() + ": give one of 'step_s' and 'tflops_per_gpu'");
  if (row.has("formula")) r.formula = parse_formula(row.text("formula"), row.where());
  if (row.has("role")) {
    r.role = row.text("role");
    if (r.role != "fit" && r.role != "predict") throw Error(row.where() + ": column 'role': '" + r.role + "' (valid: fit, predict)");
  }
  return r;
}

}  // namespace

std::vector<MeasuredRun> read_runs_csv(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the runs file");
  const auto folder = std::filesystem::path(path).parent_path();
  std::string line;
  std::vector<std::string> header;
  std::vector<MeasuredRun> runs;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos || line[line.find_first_not_of(" \t")] == '#') continue;
    const std::string where = path + ":" + std::to_string(number);
    auto fields = split_row(line);
    if (header.empty()) {
      check_header(fields, where);
      header = fields;
      continue;
    }
    if (fields.size() != header.size()) {
      throw Error(where + ": " + std::to_string(fields.size()) + " fields, the header has " + std::to_string(header.size()));
    }
    std::map<std::string, std::string> cells;
    for (std::size_t i = 0; i < header.size(); ++i) cells[header[i]] = fields[i];
    runs.push_back(read_row(Row(std::move(cells), where), folder, number));
  }
  if (header.empty()) throw Error(path + ": no header row");
  if (runs.empty()) throw Error(path + ": no runs");
  for (std::size_t i = 0; i < runs.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (runs[i].name == runs[j].name) throw Error(runs[i].source + ": name '" + runs[i].name + "' is also " + runs[j].source + "'s");
    }
  }
  return runs;
}

std::vector<MeasuredRun> read_runs(const std::string& path, const std::string& hardware) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read the runs file");
  std::string head(1 << 20, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(in.gcount()));
  if (head.find("---- arguments ----") != std::string::npos) {
    if (hardware.empty()) throw Error(path + ": a Megatron-LM log names no hardware: give --hardware");
    return {read_megatron_log(path, hardware)};
  }
  return read_runs_csv(path);
}

}  // namespace pipetwin::calibration
