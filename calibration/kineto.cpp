// torch.profiler traces read into a KinetoRun: every rank's labelled actions
// split into steps, the Program the ranks ran, each action's attributed cost
// and each transfer's arrival.
#include "calibration/kineto.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include "schedule/error.hpp"
#include "schedule/io.hpp"
#include "schedule/validate.hpp"

namespace pipetwin::calibration {
namespace ps = pipetwin::schedule;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Range {
  std::string label;
  double start = 0, end = 0;  // µs on the file's clock
};

struct RankFile {
  std::string path;
  int rank = -1, world = 0;
  std::string backend, host;
  std::vector<Range> labelled;  // in start order
  std::vector<Range> recvs;     // the backend's receives, post to completion
  bool pp_labels = false;       // "PP:" ranges (else ScheduleGPipe's Forward i / Backward i)
};

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }
bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "Forward 3" / "Backward 3": ScheduleGPipe's label, its micro-batch.
int gpipe_microbatch(const std::string& name, std::string_view word) {
  if (!starts_with(name, word) || name.size() <= word.size() + 1 || name[word.size()] != ' ') return -1;
  int mb = 0;
  for (std::size_t i = word.size() + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || mb > 100'000'000) return -1;
    mb = mb * 10 + (name[i] - '0');
  }
  return mb;
}

// The file's bytes, inflated where it is gzipped (torch.profiler's
// tensorboard_trace_handler(use_gzip=True) writes *.pt.trace.json.gz):
// at most `limit` of them.
std::string file_text(const std::string& path, std::size_t limit = std::string::npos) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files as they are
  if (f == nullptr) throw Error(path + ": cannot read the trace");
  std::string text;
  char buffer[1 << 16];
  int n = 0;
  while (text.size() < limit && (n = gzread(f, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<std::size_t>(n));
  int code = Z_OK;
  const char* message = n < 0 ? gzerror(f, &code) : nullptr;
  const std::string why = message != nullptr ? message : "";
  gzclose(f);
  if (n < 0) throw Error(path + ": a damaged gzip file: " + why);
  if (text.size() > limit) text.resize(limit);
  return text;
}

RankFile read_rank_file(const std::string& path) {
  json doc;
  try {
    doc = json::parse(file_text(path));
  } catch (const json::exception& e) {
    throw Error(path + ": not a JSON trace: " + e.what());
  }
  RankFile f;
  f.path = path;
  if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array()) {
    throw Error(path + ": no traceEvents list: not a torch.profiler trace (export_chrome_trace writes one)");
  }
  const json& info = doc.value("distributedInfo", json());
  if (!info.is_object() || !info.contains("rank") || !info["rank"].is_number_integer() || !info.contains("world_size") ||
      !info["world_size"].is_number_integer()) {
    throw Error(path + ": no distributedInfo.rank and world_size: profile after torch.distributed.init_process_group, "
                       "so that the trace names its rank");
  }
  f.rank = info["rank"].get<int>();
  f.world = info["world_size"].get<int>();
  if (f.world < 1 || f.rank < 0 || f.rank >= f.world) {
    throw Error(path + ": distributedInfo.rank " + std::to_string(f.rank) + " is not a rank of world_size " +
                std::to_string(f.world));
  }
  f.backend = info.value("backend", std::string());
  f.host = doc.value("host_name", std::string());
  bool gpipe = false;
  for (const json& e : doc["traceEvents"]) {
    if (!e.is_object() || e.value("ph", std::string()) != "X") continue;
    const std::string cat = e.value("cat", std::string());
    if (cat == "kernel" || cat == "gpu_memcpy") {
      throw Error(path + ": holds GPU kernels (cat \"" + cat + "\"): the actions' CPU ranges are not their GPU " +
                  "time, and timing them by their kernels is not supported yet; profile the run on CPU (Gloo), " +
                  "or with activities=[ProfilerActivity.CPU] only to time the ranks' CPU side");
    }
    if (cat != "user_annotation") continue;
    const std::string name = e.value("name", std::string());
    if (!e.contains("ts") || !e["ts"].is_number() || !e.contains("dur") || !e["dur"].is_number()) {
      throw Error(path + ": range '" + name + "' has no numeric ts and dur");
    }
    Range r{name, e["ts"].get<double>(), e["ts"].get<double>() + std::max(0.0, e["dur"].get<double>())};
    if (starts_with(name, "PP:")) {
      f.pp_labels = true;
      f.labelled.push_back(std::move(r));
    } else if (gpipe_microbatch(name, "Forward") >= 0 || gpipe_microbatch(name, "Backward") >= 0) {
      gpipe = true;
      f.labelled.push_back(std::move(r));
    } else if (ends_with(name, ":recv")) {
      f.recvs.push_back(std::move(r));
    }
  }
  if (f.pp_labels && gpipe) {
    throw Error(path + ": holds both PP: ranges and ScheduleGPipe's Forward/Backward ranges: profile one schedule per trace");
  }
  if (f.labelled.empty()) {
    throw Error(path + ": no labelled pipeline actions: PyTorch's action-list schedules (ScheduleInterleaved1F1B, "
                       "ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble, a CSV or pipetwin Program run on "
                       "_PipelineScheduleRuntime) label theirs \"PP:<action>\" and ScheduleGPipe \"Forward i\"; "
                       "Schedule1F1B labels none");
  }
  const auto by_start = [](const Range& a, const Range& b) { return a.start < b.start; };
  std::stable_sort(f.labelled.begin(), f.labelled.end(), by_start);
  std::stable_sort(f.recvs.begin(), f.recvs.end(), by_start);
  return f;
}

// A label as an action of rank `rank`: "PP:2SEND_F0", "Forward 3" (stage = the rank).
KinetoAction parse_label(const RankFile& f, const Range& r) {
  KinetoAction a;
  a.label = r.label;
  if (!starts_with(r.label, "PP:")) {
    const int fwd = gpipe_microbatch(r.label, "Forward");
    a.action = fwd >= 0 ? ps::make_action(ps::Op::F, f.rank, fwd)
                        : ps::make_action(ps::Op::B, f.rank, gpipe_microbatch(r.label, "Backward"));
    return a;
  }
  const std::string text = r.label.substr(3);
  if (text.find(ps::kOverlapName) != std::string::npos) {
    throw Error(f.path + ": rank " + std::to_string(f.rank) + ": '" + r.label + "' overlaps a forward and a backward " +
                "in one range (ScheduleDualPipeV): their costs cannot be told apart");
  }
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string op = text.substr(digits);
  if (digits > 0 && digits < 8 && (op == "UNSHARD" || op == "RESHARD" || op == "REDUCE_GRAD")) {
    a.other = true;
    a.action = ps::make_stage_action(ps::Op::REDUCE_GRAD, std::stoi(text.substr(0, digits)));
    return a;
  }
  try {
    a.action = ps::parse_action(text);
  } catch (const Error& e) {
    throw Error(f.path + ": rank " + std::to_string(f.rank) + ": range '" + r.label + "': " + e.what());
  }
  if (a.action.op == ps::Op::R || a.action.op == ps::Op::STEP) {
    throw Error(f.path + ": rank " + std::to_string(f.rank) + ": range '" + r.label + "' is not an action of PyTorch's runtime");
  }
  return a;
}

std::vector<std::string> run_files(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const auto name = entry.path().filename().string();
    if (entry.is_regular_file() && (ends_with(name, ".json") || ends_with(name, ".json.gz"))) {
      files.push_back(entry.path().string());
    }
  }
  if (ec) throw Error(path + ": cannot list the folder: " + ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    throw Error(path + ": no *.json or *.json.gz traces in the folder (one torch.profiler trace per rank)");
  }
  return files;
}

std::string key(const ps::Action& a, bool other, const std::string& label) {
  return other ? label : ps::to_string(a);
}

}  // namespace

bool is_kineto_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return true;
  std::string head;
  try {
    head = file_text(path, 65536);
  } catch (const Error&) {
    return false;  // the reader that follows names what is wrong with it
  }
  if (head.find("\"producer\": \"pipetwin") != std::string::npos || head.find("\"producer\":\"pipetwin") != std::string::npos) {
    return false;
  }
  return head.find("\"schemaVersion\"") != std::string::npos || head.find("\"distributedInfo\"") != std::string::npos ||
         head.find("\"deviceProperties\"") != std::string::npos;
}

namespace {

using Steps = std::vector<std::vector<std::vector<KinetoAction>>>;  // [step][rank]

// The run's files, one per rank, in rank order; refused where they are not one run's.
std::vector<RankFile> rank_files(const std::string& path) {
  std::vector<RankFile> files;
  for (const auto& file : run_files(path)) files.push_back(read_rank_file(file));
  const RankFile& front = files.front();
  const int world = front.world;
  std::vector<int> of_rank(world, -1);
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto& f = files[i];
    if (f.world != world) {
      throw Error(f.path + ": world_size " + std::to_string(f.world) + ", but " + front.path + " has " +
                  std::to_string(world) + ": are they from the same run?");
    }
    if (of_rank[f.rank] >= 0) {
      throw Error(path + ": two traces of rank " + std::to_string(f.rank) + ": " + files[of_rank[f.rank]].path + " and " +
                  f.path + " (one run per folder)");
    }
    if (f.host != front.host) {
      throw Error(f.path + ": rank " + std::to_string(f.rank) + " ran on host '" + f.host + "' and " + front.path +
                  " on '" + front.host + "': the hosts' clocks are not comparable; calibrate from one host's run");
    }
    if (f.pp_labels != front.pp_labels) {
      throw Error(f.path + ": its labels and " + front.path + "'s are of two different schedules");
    }
    of_rank[f.rank] = static_cast<int>(i);
  }
  std::vector<RankFile> ordered;
  for (int r = 0; r < world; ++r) {
    if (of_rank[r] < 0) {
      throw Error(path + ": no trace of rank " + std::to_string(r) + " of the " + std::to_string(world) +
                  " (distributedInfo.world_size): give every rank's file");
    }
    ordered.push_back(std::move(files[of_rank[r]]));
  }
  return ordered;
}

// Every label occurs once per step: the n-th occurrence is step n. Each
// range's `ready` is here the last end of the receives posted in it.
Steps split_steps(const std::vector<RankFile>& ranks) {
  const int world = static_cast<int>(ranks.size());
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& f : ranks) origin = std::min(origin, f.labelled.front().start);
  Steps by_step;
  for (int r = 0; r < world; ++r) {
    const RankFile& f = ranks[r];
    std::map<std::string, int> seen;
    std::map<std::string, bool> others;
    std::vector<std::pair<int, KinetoAction>> actions;
    for (const auto& range : f.labelled) {
      KinetoAction a = parse_label(f, range);
      a.start = (range.start - origin) * 1e-6;
      a.end = (range.end - origin) * 1e-6;
      const std::string k = key(a.action, a.other, a.label);
      const int occurrence = seen[k]++;
      others[k] = a.other;
      actions.emplace_back(occurrence, std::move(a));
    }
    // The pipeline's actions occur once a step; the runtime's own may occur
    // more often but as often every step (an UNSHARD where more stages take
    // turns than stay gathered: PyTorch's max_active_stages).
    std::string first;
    int n = 0;
    for (const auto& [label, count] : seen) {
      if (!others[label] && first.empty()) first = label, n = count;
    }
    if (first.empty()) first = seen.begin()->first, n = seen.begin()->second;
    for (const auto& [label, count] : seen) {
      if (others[label] ? count % n != 0 : count != n) {
        throw Error(f.path + ": rank " + std::to_string(r) + ": " + label + " occurs " + std::to_string(count) +
                    " times but " + first + " " + std::to_string(n) + ": the profile holds part of a step (profile " +
                    "whole steps: call prof.step() after each schedule step)");
      }
    }
    // A repeated one's occurrence, as a step.
    for (auto& [step, a] : actions) step /= seen[key(a.action, a.other, a.label)] / n;
    if (!by_step.empty() && n != static_cast<int>(by_step.size())) {
      throw Error(f.path + ": rank " + std::to_string(r) + " holds " + std::to_string(n) + " steps but rank 0 " +
                  std::to_string(by_step.size()) + ": were the ranks profiled over the same steps?");
    }
    if (by_step.empty()) by_step.assign(n, std::vector<std::vector<KinetoAction>>(world));
    for (auto& [step, a] : actions) by_step[step][r].push_back(std::move(a));
    for (const auto& recv : f.recvs) {
      const double s = (recv.start - origin) * 1e-6, e = (recv.end - origin) * 1e-6;
      for (auto& step : by_step) {
        for (auto& a : step[r]) {
          if (a.start <= s && s <= a.end) a.ready = std::max(a.ready, e);
        }
      }
    }
  }
  return by_step;
}

// The Program: step 0's compute actions, rank by rank, as PyTorch's CSV.
ps::Program program_of(const Steps& by_step, const std::string& path) {
  std::string csv;
  for (const auto& rank : by_step.front()) {
    std::string row;
    for (const auto& a : rank) {
      if (!a.other && ps::is_compute(a.action.op)) row += (row.empty() ? "" : ",") + ps::to_string(a.action);
    }
    csv += row + "\n";
  }
  auto program = ps::parse_csv(csv, path + " (the order its ranks ran)");
  ps::validate(program);
  return program;
}

// One step's costs and arrivals (kineto.hpp), from the receives' ends.
std::vector<std::vector<KinetoAction>> attribute(const std::vector<std::vector<KinetoAction>>& step, const KinetoRun& run) {
  std::map<std::string, const KinetoAction*> by_key;
  for (const auto& rank : step) {
    for (const auto& a : rank) by_key[key(a.action, a.other, a.label)] = &a;
  }
  const auto find = [&](ps::Op op, int stage, int mb) -> const KinetoAction* {
    const auto it = by_key.find(ps::to_string(ps::make_action(op, stage, mb)));
    return it == by_key.end() ? nullptr : it->second;
  };
  // When the input of a compute action was there: the last end of its own
  // receives (ScheduleGPipe's) and of its RECV's; -1 without any.
  const auto ready = [&](const KinetoAction& c) {
    double done = c.ready;
    const ps::Op recv = c.action.op == ps::Op::F ? ps::Op::RECV_F : ps::Op::RECV_B;
    if (c.action.op != ps::Op::W) {
      const auto* r = find(recv, c.action.stage.value, c.action.microbatch ? c.action.microbatch->value : 0);
      if (r != nullptr) done = std::max(done, r->ready);
    }
    return done;
  };
  auto out = step;
  for (std::size_t r = 0; r < out.size(); ++r) {
    double free = out[r].empty() ? 0 : out[r].front().start;
    for (std::size_t i = 0; i < out[r].size(); ++i) {
      KinetoAction& a = out[r][i];
      a.ready = !a.other && ps::is_compute(a.action.op) ? ready(step[r][i]) : -1;
      a.cost = a.end - std::min(a.end, std::max(free, a.ready));
      free = std::max(free, a.end);
      // The sender of a transfer: the SEND action, or (ScheduleGPipe) the compute action holding it.
      const ps::Op op = a.action.op;
      const bool sender = run.labelled_transfers ? ps::is_send(op) : (op == ps::Op::F || op == ps::Op::B);
      if (a.other || !sender) continue;
      const bool fwd = op == ps::Op::F || op == ps::Op::SEND_F;
      const int to = a.action.stage.value + (fwd ? 1 : -1), mb = a.action.microbatch ? a.action.microbatch->value : 0;
      if (to < 0 || to >= run.program.num_stages()) continue;
      const KinetoAction* consumer = find(fwd ? ps::Op::F : ps::Op::B, to, mb);
      if (consumer == nullptr) consumer = find(ps::Op::I, to, mb);
      if (consumer == nullptr || ready(*consumer) < 0) continue;
      // A receive's range ends when its wait returns: at the arrival only
      // where the consumer was already waiting when the message left.
      a.arrival = ready(*consumer);
      a.valid_flight = consumer->start <= a.end;
    }
  }
  return out;
}

}  // namespace

KinetoRun read_kineto_run(const std::string& path, int batch) {
  KinetoRun run;
  run.path = path;
  const auto ranks = rank_files(path);
  run.backend = ranks.front().backend;
  run.host = ranks.front().host;
  run.labelled_transfers = ranks.front().pp_labels;
  for (const auto& f : ranks) run.files.push_back(f.path);
  const Steps raw = split_steps(ranks);
  run.program = program_of(raw, path);
  for (const auto& step : raw) run.steps.push_back(attribute(step, run));
  for (int k = 0; k < run.num_steps(); ++k) {
    double end = -std::numeric_limits<double>::infinity();
    for (const auto& rank : run.steps[k]) {
      for (const auto& a : rank) end = std::max(end, a.end);
    }
    run.step_times_s.push_back(end - run.step_start_s(k));
  }
  if (batch > 0) run.set_batch(batch);
  return run;
}

double KinetoRun::step_start_s(int step) const {
  double begin = std::numeric_limits<double>::infinity();
  for (const auto& a : steps.at(static_cast<std::size_t>(step)).at(program.rank_of(ps::StageId{0}).value)) {
    begin = std::min(begin, a.start);
  }
  return begin;
}

schedule::Timeline KinetoRun::timeline(int step) const {
  const auto& s = steps.at(static_cast<std::size_t>(step));
  const double begin = step_start_s(step);
  ps::Timeline t;
  t.ranks.resize(s.size());
  for (std::size_t r = 0; r < s.size(); ++r) {
    for (const auto& a : s[r]) {
      // A compute action from when its input was there: the wait before is not compute.
      const double start = std::min(a.end, std::max(a.start, a.ready));
      if (!a.other) t.ranks[r].push_back({a.action, std::max(0.0, start - begin), std::max(0.0, a.end - begin)});
    }
  }
  return t;
}

void KinetoRun::set_batch(int batch) {
  const int M = program.num_microbatches;
  if (batch < 1 || batch % M != 0) {
    throw Error(path + ": --batch " + std::to_string(batch) + " does not split into its " + std::to_string(M) +
                " micro-batches of whole samples");
  }
  samples_per_microbatch = static_cast<double>(batch / M);
}

std::string KinetoRun::describe() const {
  return "K=" + std::to_string(program.num_ranks) + " V=" + std::to_string(program.stages_per_rank) +
         " M=" + std::to_string(program.num_microbatches) + ", " + std::to_string(num_steps()) + " step" +
         (num_steps() == 1 ? "" : "s") + " (" + (labelled_transfers ? "PP: ranges" : "ScheduleGPipe's ranges") +
         (backend.empty() ? "" : ", " + backend) + ")";
}

}  // namespace pipetwin::calibration
