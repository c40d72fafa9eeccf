// Cost tables: the user's own per-stage costs, read and turned into the
// engines' stage table and summarize()'s memory.
#include "models/cost_table.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include "models/yaml_file.hpp"
#include "schedule/error.hpp"

namespace pipetwin::models {

namespace {

const std::vector<std::string> kStageFields = {
    "forward_s",        "backward_s",   "input_grad_s",      "weight_grad_s",   "recompute_s",
    "step_s",           "output_bytes", "activation_bytes",  "input_bytes",     "weight_grad_bytes",
    "workspace_bytes",  "weights_bytes", "gradients_bytes", "optimizer_bytes", "send_s",
    "recv_s",           "output_transfer_s", "first_forward_extra_s"};

// A seconds field: a number, or {fixed_s, per_sample_s} (its slope kept in
// r.per_sample_s and its fixed part returned, to be moved to the table's
// samples_per_microbatch once that is read).
double seconds(const YamlFields& f, const std::string& name, double fallback, StageCostRow& r) {
  if (!f.has(name)) return fallback;
  if (!f.node()[name].IsMap()) return f.non_negative_number(name);
  const auto c = f.child(name);
  c.reject_unknown({"fixed_s", "per_sample_s"});
  if (!c.has("per_sample_s")) c.fail("per_sample_s", "missing: a per-sample time is {fixed_s, per_sample_s}");
  r.per_sample_s[name] = c.non_negative_number("per_sample_s");
  return c.number_or("fixed_s", 0);
}

StageCostRow read_row(const YamlFields& f) {
  f.reject_unknown(kStageFields);
  StageCostRow r;
  const auto sec = [&](const std::string& name, double fallback) { return seconds(f, name, fallback, r); };
  if (!f.has("forward_s")) f.fail("forward_s", "missing: every stage needs its forward's seconds");
  r.forward_s = sec("forward_s", 0);
  r.split = f.has("input_grad_s") || f.has("weight_grad_s");
  auto& slope = r.per_sample_s;
  if (r.split) {
    if (!f.has("input_grad_s") || !f.has("weight_grad_s")) {
      f.fail(f.has("input_grad_s") ? "weight_grad_s" : "input_grad_s", "missing: give both input_grad_s and weight_grad_s");
    }
    r.input_grad_s = sec("input_grad_s", 0);
    r.weight_grad_s = sec("weight_grad_s", 0);
    if (!f.has("backward_s")) {
      r.backward_s = r.input_grad_s + r.weight_grad_s;
      if (slope.count("input_grad_s") || slope.count("weight_grad_s")) {
        slope["backward_s"] = slope["input_grad_s"] + slope["weight_grad_s"];
      }
    } else {
      r.backward_s = sec("backward_s", 0);
    }
  } else {
    if (!f.has("backward_s")) f.fail("backward_s", "missing: give backward_s, or input_grad_s and weight_grad_s");
    r.backward_s = sec("backward_s", 0);
  }
  r.recompute_s = f.has("recompute_s") ? sec("recompute_s", 0) : r.forward_s;
  if (!f.has("recompute_s") && slope.count("forward_s")) slope["recompute_s"] = slope["forward_s"];
  r.step_s = f.number_or("step_s", 0);
  r.output_bytes = f.number_or("output_bytes", 0);
  r.activation_bytes = f.number_or("activation_bytes", 0);
  if (f.has("input_bytes")) r.input_bytes = f.non_negative_number("input_bytes");
  if (f.has("weight_grad_bytes")) r.weight_grad_bytes = f.non_negative_number("weight_grad_bytes");
  r.workspace_bytes = f.number_or("workspace_bytes", 0);
  r.weights_bytes = f.number_or("weights_bytes", 0);
  r.gradients_bytes = f.number_or("gradients_bytes", 0);
  r.optimizer_bytes = f.number_or("optimizer_bytes", 0);
  r.send_s = sec("send_s", 0);
  r.recv_s = sec("recv_s", 0);
  if (f.has("output_transfer_s")) r.output_transfer_s = sec("output_transfer_s", 0);
  r.first_forward_extra_s = f.number_or("first_forward_extra_s", 0);
  return r;
}

CostTable table_from_yaml(const YAML::Node& root, const std::string& source) {
  if (!root.IsMap()) throw Error(source + ": a cost table is a mapping with a 'stages' list (docs/formats.md)");
  const YamlFields f(root, source);
  f.reject_unknown({"stages", "link", "device", "samples_per_microbatch"});
  CostTable t;
  t.source = source;
  const YAML::Node stages = root["stages"];
  if (!stages || !stages.IsSequence() || stages.size() == 0) f.fail("stages", "expected a list of stages (at least one)");
  for (std::size_t s = 0; s < stages.size(); ++s) {
    if (!stages[s].IsMap()) f.fail("stages", "entry " + std::to_string(s) + " is not a mapping of fields");
    t.stages.push_back(read_row(YamlFields(stages[s], source, "stages[" + std::to_string(s) + "].")));
  }
  if (f.has("link")) {
    const auto link = f.child("link");
    link.reject_unknown({"bandwidth", "latency_s"});
    t.link_bandwidth = link.positive_number("bandwidth");
    t.link_latency_s = link.number_or("latency_s", 0);
  }
  if (f.has("device")) {
    const auto device = f.child("device");
    device.reject_unknown({"memory_bytes", "reserve_bytes"});
    if (device.has("memory_bytes")) t.memory_bytes = device.positive_number("memory_bytes");
    if (device.has("reserve_bytes")) t.reserve_bytes = device.non_negative_number("reserve_bytes");
  }
  t.samples_per_microbatch = f.has("samples_per_microbatch") ? f.positive_number("samples_per_microbatch") : 1;
  // The per-sample fields read their fixed part: now at the table's size.
  for (auto& r : t.stages) {
    for (const auto& [name, per_sample] : r.per_sample_s) *row_seconds(r, name) += per_sample * t.samples_per_microbatch;
  }
  return t;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream in(line);
  std::string cell;
  while (std::getline(in, cell, ',')) {
    const auto b = cell.find_first_not_of(" \t\r");
    const auto e = cell.find_last_not_of(" \t\r");
    out.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
  }
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

// A CSV as YAML text with the same line numbers (the header becomes
// "stages:", each row a flow mapping of quoted scalars), so that errors
// name the CSV's line and column.
std::string csv_as_yaml(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  std::string line, yaml;
  std::vector<std::string> header;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const auto cells = split_csv_line(line);
    const bool blank = line.find_first_not_of(" \t\r") == std::string::npos || line.front() == '#';
    if (blank) {
      yaml += "\n";
    } else if (header.empty()) {
      header = cells;
      yaml += "stages:\n";
    } else {
      if (cells.size() != header.size()) {
        throw Error(source + ":" + std::to_string(number) + ": " + std::to_string(cells.size()) + " columns, but the header has " +
                    std::to_string(header.size()));
      }
      yaml += "  - {";
      for (std::size_t c = 0; c < cells.size(); ++c) {
        if (header[c] == "stage" || cells[c].empty()) continue;  // the stage column only orders the rows
        yaml += yaml_quoted(header[c]) + ": " + yaml_quoted(cells[c]) + ", ";
      }
      yaml += "}\n";
    }
  }
  if (header.empty()) throw Error(source + ": an empty CSV: expected a header of stage fields and one row per stage");
  return yaml;
}

}  // namespace

const std::vector<std::string>& per_sample_fields() {
  static const std::vector<std::string> names = {"forward_s",     "backward_s", "input_grad_s", "weight_grad_s",
                                                 "recompute_s",   "send_s",     "recv_s",       "output_transfer_s"};
  return names;
}

double* row_seconds(StageCostRow& r, const std::string& name) {
  if (name == "forward_s") return &r.forward_s;
  if (name == "backward_s") return &r.backward_s;
  if (name == "input_grad_s") return &r.input_grad_s;
  if (name == "weight_grad_s") return &r.weight_grad_s;
  if (name == "recompute_s") return &r.recompute_s;
  if (name == "send_s") return &r.send_s;
  if (name == "recv_s") return &r.recv_s;
  if (name == "output_transfer_s") return r.output_transfer_s ? &*r.output_transfer_s : nullptr;
  throw Error("internal: '" + name + "' is not a time field of a cost table");
}

bool CostTable::scales() const {
  for (const auto& r : stages) {
    if (!r.per_sample_s.empty()) return true;
  }
  return false;
}

CostTable CostTable::at_samples(double samples) const {
  if (samples == samples_per_microbatch) return *this;
  if (!scales()) {
    throw Error(source + ": its times are for micro-batches of " + yaml_number(samples_per_microbatch) + " samples (" +
                "samples_per_microbatch), not " + yaml_number(samples) +
                ": give them per sample ({fixed_s, per_sample_s}) to time other sizes");
  }
  CostTable t = *this;
  for (auto& r : t.stages) {
    for (const auto& [name, per_sample] : r.per_sample_s) {
      if (double* v = row_seconds(r, name)) *v = std::max(0.0, *v + per_sample * (samples - samples_per_microbatch));
    }
  }
  t.samples_per_microbatch = samples;
  return t;
}

CostTable CostTable::for_batch(int batch, int microbatches) const {
  if (batch < 1 || microbatches < 1 || batch % microbatches != 0) {
    throw Error("--batch " + std::to_string(batch) + " does not split into " + std::to_string(microbatches) +
                " micro-batches of whole samples");
  }
  return at_samples(static_cast<double>(batch / microbatches));
}

const StageCostRow& CostTable::row(int s, int count) const {
  check_stages(count);
  return stages.size() == 1 ? stages.front() : stages.at(static_cast<std::size_t>(s));
}

void CostTable::check_stages(int count) const {
  if (stages.size() == 1 || static_cast<int>(stages.size()) == count) return;
  throw Error(source + ": " + std::to_string(stages.size()) + " stages, but the schedule has " + std::to_string(count) +
              ": give one entry per stage, or one for every stage");
}

CostTable parse_cost_table(const std::string& text, const std::string& source) {
  return table_from_yaml(parse_yaml(text, source), source);
}

CostTable read_cost_table(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read the cost table");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const bool csv = path.size() >= 4 && path.compare(path.size() - 4, 4, ".csv") == 0;
  return parse_cost_table(csv ? csv_as_yaml(buffer.str(), path) : buffer.str(), path);
}

std::string cost_table_to_yaml(const CostTable& t, const std::string& header) {
  std::string y = header;
  if (!y.empty() && y.back() != '\n') y += "\n";
  y += "stages:\n";
  for (const auto& r : t.stages) {
    const auto field = [&](bool first, const char* name, double v) {
      y += std::string(first ? "  - " : "    ") + name + ": ";
      const auto slope = r.per_sample_s.find(name);
      if (slope == r.per_sample_s.end()) {
        y += yaml_number(v) + "\n";
      } else {
        y += "{fixed_s: " + yaml_number(std::max(0.0, v - slope->second * t.samples_per_microbatch)) +
             ", per_sample_s: " + yaml_number(slope->second) + "}\n";
      }
    };
    field(true, "forward_s", r.forward_s);
    if (r.split) {
      field(false, "input_grad_s", r.input_grad_s);
      field(false, "weight_grad_s", r.weight_grad_s);
    }
    field(false, "backward_s", r.backward_s);
    const auto fs = r.per_sample_s.find("forward_s"), rs = r.per_sample_s.find("recompute_s");
    const bool same_slope = (fs == r.per_sample_s.end()) == (rs == r.per_sample_s.end()) &&
                            (fs == r.per_sample_s.end() || fs->second == rs->second);
    if (r.recompute_s != r.forward_s || !same_slope) field(false, "recompute_s", r.recompute_s);
    const std::pair<const char*, double> optional[] = {
        {"step_s", r.step_s}, {"send_s", r.send_s}, {"recv_s", r.recv_s},
        {"first_forward_extra_s", r.first_forward_extra_s}, {"output_bytes", r.output_bytes},
        {"activation_bytes", r.activation_bytes}, {"workspace_bytes", r.workspace_bytes},
        {"weights_bytes", r.weights_bytes}, {"gradients_bytes", r.gradients_bytes},
        {"optimizer_bytes", r.optimizer_bytes}};
    for (const auto& [name, v] : optional) {
      if (v != 0) field(false, name, v);
    }
    if (r.output_transfer_s) field(false, "output_transfer_s", *r.output_transfer_s);
    if (r.input_bytes) field(false, "input_bytes", *r.input_bytes);
    if (r.weight_grad_bytes) field(false, "weight_grad_bytes", *r.weight_grad_bytes);
  }
  if (t.link_bandwidth) {
    y += "link: {bandwidth: " + yaml_number(*t.link_bandwidth) + ", latency_s: " + yaml_number(t.link_latency_s.value_or(0)) + "}\n";
  }
  if (t.memory_bytes || t.reserve_bytes) {
    y += "device: {";
    if (t.memory_bytes) y += "memory_bytes: " + yaml_number(*t.memory_bytes) + (t.reserve_bytes ? ", " : "");
    if (t.reserve_bytes) y += "reserve_bytes: " + yaml_number(*t.reserve_bytes);
    y += "}\n";
  }
  if (t.samples_per_microbatch != 1) y += "samples_per_microbatch: " + yaml_number(t.samples_per_microbatch) + "\n";
  return y;
}

std::vector<schedule::StageCosts> cost_table_stages(const CostTable& table, const schedule::Program& p,
                                                    const Hardware* hardware) {
  const int S = p.num_stages();
  table.check_stages(S);
  if (p.tensor_parallel > 1 || p.data_parallel > 1) {
    throw Error(table.source + ": a cost table describes one pipeline: use --tensor 1 and --data 1 with it");
  }
  if (hardware != nullptr && table.link_bandwidth) {
    throw Error(table.source + ": field 'link': the network is the hardware's (" + hardware->name +
                ") where one is given: drop the table's link, or the hardware");
  }
  for (int s = 0; hardware != nullptr && s < S; ++s) {
    if (table.row(s, S).output_transfer_s) {
      throw Error(table.source + ": stage " + std::to_string(s) + ": field 'output_transfer_s': the network is the " +
                  "hardware's (" + hardware->name + ") where one is given: drop the field, or the hardware");
    }
  }
  bool splits = false;
  for (const auto& rank : p.ranks) {
    for (const auto& a : rank) splits = splits || a.op == schedule::Op::I || a.op == schedule::Op::W;
  }
  const auto flight = [&](int from, int to, double bytes) {
    const int cut = std::min(from, to);  // the stage whose output crosses it
    if (const auto& given = table.row(cut, S).output_transfer_s) return *given;
    if (bytes <= 0) return 0.0;
    if (table.link_bandwidth) return table.link_latency_s.value_or(0) + bytes / *table.link_bandwidth;
    if (hardware == nullptr) return 0.0;
    const auto dev = [&](int s) { return p.first_device(0, p.rank_of(schedule::StageId{s})); };
    return hardware->topology.path_group(dev(from), dev(to), 1).seconds(bytes);
  };
  std::vector<schedule::StageCosts> out;
  for (int s = 0; s < S; ++s) {
    const auto& r = table.row(s, S);
    if (splits && !r.split) {
      throw Error(table.source + ": stage " + std::to_string(s) + ": schedule " + p.schedule +
                  " splits the backward into I and W: give input_grad_s and weight_grad_s");
    }
    schedule::StageCosts c;
    c.forward_s = r.forward_s, c.backward_s = r.backward_s, c.input_grad_s = r.input_grad_s;
    c.weight_grad_s = r.weight_grad_s, c.recompute_s = r.recompute_s, c.step_s = r.step_s;
    c.send_overhead_s = r.send_s;
    c.activation_recv_s = c.gradient_recv_s = r.recv_s;
    c.first_forward_extra_s = r.first_forward_extra_s;
    if (s + 1 < S) {
      c.activation_bytes = r.output_bytes;
      c.activation_transfer_s = flight(s, s + 1, c.activation_bytes);
    }
    if (s > 0) {
      c.gradient_bytes = table.row(s - 1, S).output_bytes;
      c.gradient_transfer_s = flight(s, s - 1, c.gradient_bytes);
    }
    out.push_back(c);
  }
  return out;
}

CostTableMemory::CostTableMemory(const CostTable& table, const schedule::Program& p, const Hardware* hardware)
    : stash_(schedule::account_memory(p)), memory_bytes_(table.memory_bytes), reserve_bytes_(table.reserve_bytes) {
  const int S = p.num_stages();
  table.check_stages(S);
  for (int s = 0; s < S; ++s) {
    auto r = table.row(s, S);
    if (!r.input_bytes) r.input_bytes = s > 0 ? table.row(s - 1, S).output_bytes : 0;
    if (!r.weight_grad_bytes) r.weight_grad_bytes = r.activation_bytes;
    rows_.push_back(r);
  }
  if (hardware != nullptr) {
    const auto devices = hardware->rank_devices(p.num_ranks);
    for (int s = 0; s < S; ++s) devices_.push_back(devices.at(p.rank_of(schedule::StageId{s}).value));
  }
}

CostTableMemory::Parts CostTableMemory::fixed_parts(int s) const {
  const auto& r = rows_.at(s);
  Parts m;
  m.weights = r.weights_bytes * stash_.at(s).weight_versions;  // every version a schedule keeps
  m.gradients = r.gradients_bytes;
  m.optimizer = r.optimizer_bytes;
  return m;
}

double CostTableMemory::checkpoint_stash_bytes(int s) const { return *rows_.at(s).input_bytes; }
double CostTableMemory::weight_grad_bytes(int s) const { return *rows_.at(s).weight_grad_bytes; }

double CostTableMemory::reserve_bytes(int s, double held) const {
  if (reserve_bytes_) return *reserve_bytes_;
  return devices_.empty() ? 0 : devices_.at(s).reserve_bytes(held);
}

double CostTableMemory::capacity_bytes(int s) const {
  if (memory_bytes_) return *memory_bytes_;
  return devices_.empty() ? std::numeric_limits<double>::infinity() : devices_.at(s).memory_bytes;
}

}  // namespace pipetwin::models
