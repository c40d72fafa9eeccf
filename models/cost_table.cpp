// Cost tables: the user's own per-stage costs, read and turned into the
// engines' stage table and summarize()'s memory.
#include "models/cost_table.hpp"

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
    "workspace_bytes",  "weights_bytes", "gradients_bytes", "optimizer_bytes"};

StageCostRow read_row(const YamlFields& f) {
  f.reject_unknown(kStageFields);
  StageCostRow r;
  r.forward_s = f.non_negative_number("forward_s");
  r.split = f.has("input_grad_s") || f.has("weight_grad_s");
  if (r.split) {
    r.input_grad_s = f.non_negative_number("input_grad_s");
    r.weight_grad_s = f.non_negative_number("weight_grad_s");
    r.backward_s = f.number_or("backward_s", r.input_grad_s + r.weight_grad_s);
  } else {
    if (!f.has("backward_s")) f.fail("backward_s", "missing: give backward_s, or input_grad_s and weight_grad_s");
    r.backward_s = f.non_negative_number("backward_s");
  }
  r.recompute_s = f.number_or("recompute_s", r.forward_s);
  r.step_s = f.number_or("step_s", 0);
  r.output_bytes = f.number_or("output_bytes", 0);
  r.activation_bytes = f.number_or("activation_bytes", 0);
  if (f.has("input_bytes")) r.input_bytes = f.non_negative_number("input_bytes");
  if (f.has("weight_grad_bytes")) r.weight_grad_bytes = f.non_negative_number("weight_grad_bytes");
  r.workspace_bytes = f.number_or("workspace_bytes", 0);
  r.weights_bytes = f.number_or("weights_bytes", 0);
  r.gradients_bytes = f.number_or("gradients_bytes", 0);
  r.optimizer_bytes = f.number_or("optimizer_bytes", 0);
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
  bool splits = false;
  for (const auto& rank : p.ranks) {
    for (const auto& a : rank) splits = splits || a.op == schedule::Op::I || a.op == schedule::Op::W;
  }
  const auto flight = [&](int from, int to, double bytes) {
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
