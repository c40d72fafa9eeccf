// pipetwin._core: the twin library for Python. A small surface: Programs
// (generated, read, parsed, written, drawn) and simulations (own costs, or a
// model on a hardware), whose results cross as JSON text that the package's
// Python modules (python/pipetwin/) turn into typed objects. Every
// pipetwin::Error becomes a ValueError with the same message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <map>
#include <filesystem>
#include <unistd.h>

#include "models/cost_table.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/grid.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/validate.hpp"
#include "twin/calibrate_kineto.hpp"
#include "twin/calibrate_runs.hpp"
#include "twin/compare.hpp"
#include "twin/own_costs.hpp"
#include "twin/plan.hpp"
#include "twin/sweep.hpp"
#include "twin/predict.hpp"
#include "twin/scenario.hpp"

namespace py = pybind11;
namespace ps = pipetwin::schedule;
namespace pt = pipetwin::twin;
using nlohmann::json;

namespace {

ps::Program generate(const std::string& name, int ranks, int microbatches, int virtual_stages, const std::string& recompute) {
  return ps::generate(name, {ranks, microbatches, virtual_stages, ps::parse_recompute(recompute)});  // F, B, I, W only
}

// Text in any of the three forms (schedule::parse_program).
ps::Program parse(const std::string& text, const std::string& source) { return ps::parse_program(text, source); }

// The Program's F, B, I and W alone (what PyTorch's compute-only CSV holds):
// its transfers, recomputes, reductions and optimizer steps left out.
ps::Program compute_only(ps::Program p) {
  for (auto& rank : p.ranks) {
    std::erase_if(rank, [](const ps::Action& a) {
      return a.op != ps::Op::F && a.op != ps::Op::B && a.op != ps::Op::I && a.op != ps::Op::W;
    });
  }
  return p;
}

json timeline_json(const ps::Timeline& t) {
  json ranks = json::array();
  for (const auto& rank : t.ranks) {
    json actions = json::array();
    for (const auto& a : rank) actions.push_back({ps::to_string(a.action), a.start, a.end});
    ranks.push_back(std::move(actions));
  }
  return ranks;
}

std::string result_json(const pipetwin::models::RunSummary& summary, const pt::Prediction& p, const ps::Program& program,
                        json extra) {
  extra["summary"] = summary.to_json();
  extra["engine_reason"] = p.why;
  extra["timeline"] = timeline_json(p.timeline);
  extra["schedule"] = program.schedule;
  extra["ranks"] = program.num_ranks;
  extra["virtual"] = program.stages_per_rank;
  extra["microbatches"] = program.num_microbatches;
  return extra.dump(-1, ' ', false, json::error_handler_t::replace);
}

// `costs`: a table's YAML or JSON text named `source`, or with `is_file` the
// path of a YAML, JSON or CSV table.
pipetwin::models::CostTable cost_table(const std::string& costs, const std::string& source, bool is_file) {
  return is_file ? pipetwin::models::read_cost_table(costs) : pipetwin::models::parse_cost_table(costs, source);
}

// `batch` > 0: micro-batches of batch / M samples (the table's per-sample times moved there).
std::string simulate_costs(const ps::Program& program, const std::string& costs, const std::string& source, bool is_file,
                           const std::string& engine, const std::string& hardware, int batch) {
  auto table = cost_table(costs, source, is_file);
  if (batch > 0) table = table.for_batch(batch, program.num_microbatches);
  auto sc = pt::costs_scenario(program, std::move(table), hardware);
  const auto p = pt::predict(*sc, pt::parse_engine(engine));
  return result_json(pt::summarize(*sc, p), p, sc->program, {{"headline", sc->headline()}});
}

// A model on a hardware: the command line's scenario, the Program given as a
// file (its text form, in a temporary removed after).
std::string simulate_model(const ps::Program& program, const std::string& model, const std::string& hardware,
                           const std::string& engine, int batch, const std::string& recompute, const std::string& partition,
                           int tensor, int data, int zero, const std::string& precision, int context, int expert, int expert_tensor) {
  const auto path = std::filesystem::temp_directory_path() / ("pipetwin-py-" + std::to_string(::getpid()) + ".txt");
  struct Remove {
    std::filesystem::path p;
    ~Remove() { std::filesystem::remove(p); }
  } remove{path};
  ps::write_file_atomic(path.string(), ps::to_text(program));
  pt::ScenarioSpec spec;
  spec.model = model, spec.hardware = hardware, spec.schedule = path.string();
  spec.batch = batch, spec.recompute = recompute, spec.partition = partition;
  spec.tensor_parallel = tensor, spec.data_parallel = data, spec.zero = zero, spec.precision = precision;
  spec.context_parallel = context, spec.expert_parallel = expert, spec.expert_tensor_parallel = expert_tensor;
  const auto sc = pt::build_scenario(spec);
  const auto p = pt::predict(*sc, pt::parse_engine(engine));
  return result_json(pt::summarize(*sc, p), p, sc->program, {{"headline", sc->headline()}});
}

// torch.profiler runs fitted into a cost table; the report as JSON, its text beside.
std::string calibrate_torch(const std::vector<std::string>& fit, const std::vector<std::string>& held_out, int batch) {
  const auto c = pt::calibrate_kineto(fit, held_out, batch);
  auto j = pt::kineto_calibration_json(c);
  j["text"] = pt::kineto_calibration_text(c);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// calibrate --runs: the device fitted to whole runs (runs CSVs or
// Megatron-LM logs, and torchtitan's TOML and log pairs flattened); the
// report as JSON, the fitted hardware file's text and the report's text beside.
std::string calibrate_runs(const std::vector<std::string>& files, const std::vector<std::string>& torchtitan,
                           const std::string& model, const std::string& hardware, const std::vector<std::string>& fit,
                           bool fit_attention, int jobs) {
  pt::RunsFitRequest q;
  q.runs = pt::read_all_runs(files, torchtitan, model, hardware);
  q.fit = fit, q.fit_attention = fit_attention, q.jobs = jobs;
  const auto f = pt::calibrate_runs(q);
  auto j = pt::runs_fit_json(f);
  j["hardware_yaml"] = pipetwin::models::hardware_to_yaml(f.hardware, "Fitted by pipetwin.calibrate_runs to whole runs' speed");
  j["text"] = pt::runs_fit_text(f);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One torch.profiler run against its prediction on a cost table (a file, or
// text named `source`).
std::string compare_costs(const std::string& run, const std::string& costs, const std::string& source, bool is_file,
                          int batch, const std::vector<std::string>& repeats, const std::string& traces) {
  pt::CostsCompareRequest q;
  q.costs = is_file ? costs : source;
  if (!is_file) q.costs_text = costs;
  q.measured = run, q.batch = batch, q.repeats = repeats, q.traces = traces;
  const auto c = pt::compare_costs(q);
  auto j = c.to_json();
  j["text"] = c.to_text();
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A sweep into `out` (its CSV, whole and in a fixed order, which the
// package reads back); the report's counts as JSON.
std::string sweep(const std::string& model, const std::string& hardware, const std::string& out,
                  const std::vector<std::string>& schedules, const std::vector<int>& ranks,
                  const std::vector<int>& microbatches, const std::vector<int>& microbatch_sizes,
                  const std::vector<std::string>& recompute, int virtual_stages, int batch, const std::vector<int>& tensor,
                  const std::vector<int>& data, const std::string& engine, int jobs, int zero, int shard_group,
                  const std::string& precision, int context, int expert, int expert_tensor) {
  pt::SweepSpec spec;
  spec.zero = zero, spec.shard_group = shard_group, spec.precision = precision, spec.context_parallel = context;
  spec.expert_parallel = expert, spec.expert_tensor_parallel = expert_tensor;
  spec.model = model, spec.hardware = hardware, spec.out = out;
  spec.schedules = schedules, spec.ranks = ranks, spec.microbatches = microbatches;
  spec.microbatch_sizes = microbatch_sizes, spec.recompute = recompute, spec.virtual_stages = virtual_stages;
  spec.batch = batch, spec.tensor = tensor, spec.data = data, spec.engine = pt::parse_engine(engine), spec.jobs = jobs;
  const auto r = pt::run_sweep(spec);
  return json{{"configurations", r.configurations}, {"evaluated", r.evaluated}, {"fast", r.fast},
              {"simgrid", r.simgrid},             {"ok", r.ok},               {"oom", r.out_of_memory},
              {"errors", r.errors}}
      .dump();
}

// Every candidate of a plan (its place in the ranking where it is ok), as JSON.
std::string plan(const std::string& model, const std::string& hardware, int gpus, int global_batch, int max_pp,
                 const std::vector<int>& microbatch_sizes, const std::vector<std::string>& schedules,
                 const std::vector<int>& virtual_stages, const std::vector<std::string>& recompute, int top_sim, int jobs,
                 const std::vector<int>& zero, const std::vector<std::string>& precision,
                 const std::vector<int>& context, const std::vector<int>& expert, int expert_tensor,
                 const std::vector<int>& shard_group) {
  pt::PlanSpec spec;
  spec.zero = zero, spec.precision = precision, spec.context = context, spec.expert = expert;
  spec.shard_group = shard_group;
  spec.expert_tensor = expert_tensor;
  spec.model = model, spec.hardware = hardware, spec.gpus = gpus, spec.global_batch = global_batch, spec.max_pp = max_pp;
  spec.microbatch_sizes = microbatch_sizes, spec.schedules = schedules, spec.virtual_stages = virtual_stages;
  spec.recompute = recompute, spec.top_sim = top_sim, spec.jobs = jobs;
  const auto r = pt::run_plan(spec);
  std::map<std::size_t, int> place;
  const auto best = pt::ranking(r);
  for (std::size_t i = 0; i < best.size(); ++i) place[best[i]->index] = static_cast<int>(i) + 1;
  json candidates = json::array();
  for (const auto& c : r.candidates) {
    auto j = pt::candidate_json(c, place.count(c.index) ? place[c.index] : 0);
    j["status"] = c.status;
    j["reason"] = c.reason;
    candidates.push_back(std::move(j));
  }
  return json{{"description", r.description},
              {"enumerated", r.enumerated},
              {"prediction_error", r.prediction_error},
              {"wall_s", r.wall_s},
              {"candidates", candidates}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

// Two of pipetwin's traces (a prediction and a run), as `pipetwin compare` does.
std::string compare_traces(const std::string& predicted, const std::string& measured, const std::string& schedule,
                           const std::vector<std::string>& repeats) {
  pt::CompareRequest q;
  q.predicted = predicted, q.measured = measured, q.schedule = schedule, q.repeats = repeats;
  const auto c = pt::compare_files(q);
  auto j = c.to_json();
  j["text"] = c.to_text();
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "pipetwin's twin library: schedules, and simulations of them";
  py::register_exception<pipetwin::Error>(m, "Error", PyExc_ValueError);
  m.attr("__version__") = PIPETWIN_VERSION;

  py::class_<ps::Program>(m, "Program")
      .def_readonly("schedule", &ps::Program::schedule)
      .def_readonly("ranks", &ps::Program::num_ranks)
      .def_readonly("virtual", &ps::Program::stages_per_rank)
      .def_readonly("microbatches", &ps::Program::num_microbatches)
      .def_property_readonly("stages", &ps::Program::num_stages)
      .def_property_readonly("recompute", [](const ps::Program& p) { return std::string(ps::recompute_name(p.recompute)); })
      .def("actions", [](const ps::Program& p) {
        std::vector<std::vector<std::string>> out;
        for (const auto& rank : p.ranks) {
          auto& row = out.emplace_back();
          for (const auto& a : rank) row.push_back(ps::to_string(a));
        }
        return out;
      })
      .def("to_text", [](const ps::Program& p) { return ps::to_text(p); })
      .def("to_json", [](const ps::Program& p) { return ps::to_json(p); })
      .def("to_pytorch_csv", [](const ps::Program& p) { return ps::to_pytorch_csv(p); })
      .def("lowered", [](const ps::Program& p) { return ps::lower(p); })
      .def("compute_only", &compute_only)
      .def("validate", [](const ps::Program& p) { ps::validate(ps::lower(p)); })
      .def("grid", [](const ps::Program& p) {
        const auto run = ps::dry_run(p);
        if (run.deadlocked()) throw pipetwin::Error("the schedule deadlocks at rank " + std::to_string(run.blocked.front().rank.value));
        return ps::format_time_grid(ps::lower(p), run.timeline);
      });

  m.def("generate", &generate, py::arg("name"), py::arg("ranks"), py::arg("microbatches"), py::arg("virtual") = 1,
        py::arg("recompute") = "none");
  m.def("generators", [] {
    std::vector<std::string> names;
    for (const auto& g : ps::generators()) names.emplace_back(g.name);
    return names;
  });
  m.def("read", [](const std::string& path) { return ps::read_program(path); }, py::arg("path"));
  m.def("parse", &parse, py::arg("text"), py::arg("source") = "<text>");
  m.def("simulate_costs", &simulate_costs, py::arg("program"), py::arg("costs"), py::arg("source"), py::arg("is_file"),
        py::arg("engine"), py::arg("hardware"), py::arg("batch") = 0);
  m.def("sweep", &sweep, py::arg("model"), py::arg("hardware"), py::arg("out"), py::arg("schedules"), py::arg("ranks"),
        py::arg("microbatches"), py::arg("microbatch_sizes"), py::arg("recompute"), py::arg("virtual"), py::arg("batch"),
        py::arg("tensor"), py::arg("data"), py::arg("engine"), py::arg("jobs"), py::arg("zero"), py::arg("shard_group"),
        py::arg("precision"), py::arg("context"), py::arg("expert"), py::arg("expert_tensor"),
        py::call_guard<py::gil_scoped_release>());
  m.def("plan", &plan, py::arg("model"), py::arg("hardware"), py::arg("gpus"), py::arg("global_batch"), py::arg("max_pp"),
        py::arg("microbatch_sizes"), py::arg("schedules"), py::arg("virtual"), py::arg("recompute"), py::arg("top_sim"),
        py::arg("jobs"), py::arg("zero"), py::arg("precision"), py::arg("context"), py::arg("expert"),
        py::arg("expert_tensor"), py::arg("shard_group"), py::call_guard<py::gil_scoped_release>());
  m.def("compare_traces", &compare_traces, py::arg("predicted"), py::arg("measured"), py::arg("schedule"),
        py::arg("repeats"));
  m.def("calibrate_torch", &calibrate_torch, py::arg("fit"), py::arg("held_out"), py::arg("batch"));
  m.def("calibrate_runs", &calibrate_runs, py::arg("files"), py::arg("torchtitan"), py::arg("model"), py::arg("hardware"),
        py::arg("fit"), py::arg("fit_attention"), py::arg("jobs"), py::call_guard<py::gil_scoped_release>());
  m.def("compare_costs", &compare_costs, py::arg("run"), py::arg("costs"), py::arg("source"), py::arg("is_file"),
        py::arg("batch"), py::arg("repeats"), py::arg("traces"));
  m.def("simulate_model", &simulate_model, py::arg("program"), py::arg("model"), py::arg("hardware"), py::arg("engine"),
        py::arg("batch"), py::arg("recompute"), py::arg("partition"), py::arg("tensor"), py::arg("data"),
        py::arg("zero"), py::arg("precision"), py::arg("context"), py::arg("expert"), py::arg("expert_tensor"));
}
