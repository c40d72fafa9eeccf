// `pipetwin plot KIND ARGS... --out PREFIX`: runs plots/KIND.py with the
// project's Python (the virtualenv that holds matplotlib), which writes
// PREFIX.png and PREFIX.svg. The Python is the one found at configure time
// (PIPETWIN_PYTHON, cmake/Dependencies.cmake) unless the PIPETWIN_VENV
// environment variable names another virtualenv; PIPETWIN_PLOTS_DIR moves
// the scripts. The script's exit code is the command's (1 bad input, 2 bad
// command line).
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "cli/commands.hpp"
#include "twin/executables.hpp"
#include "schedule/error.hpp"

namespace pipetwin::cli {
namespace {

struct Kind {
  const char* name;
  const char* what;
};

constexpr Kind kKinds[] = {
    {"gantt", "PREDICTED.json [MEASURED.json]: timelines, ranks x time, predicted above measured"},
    {"bubble", "SWEEP.csv [--measured RUN.json...] [--schedule S]: bubble fraction against M for each K, with (K-1)/(M+K-1)"},
    {"speedup", "SWEEP.csv [--schedule S]: GPipe Table 2 style throughput speed-up (K=2,4,8 x M=1,4,32), also PREFIX.md"},
    {"memory", "TRACE.json|SUMMARY.json: peak memory per stage (and per rank where a rank holds several) against capacity"},
    {"heatmap", "SWEEP.csv [--metric throughput|step_time|bubble|memory] [--schedule S]: a metric over K x M"},
    {"report", "--compare C.json... [--image CAPTION=PNG...] [--calibrated-on TEXT] [--probe P.json...]: Markdown "
               "report PREFIX.md of predicted against measured (compare --json outputs)"},
};

struct Options {
  std::string kind, out;
  bool kind_help = false;
};

int run(const Options& o, std::vector<std::string> args) {
  const std::string py = twin::plots_python();
  if (::access(py.c_str(), X_OK) != 0) {
    throw Error("no Python at " + py + ": run scripts/setup.sh, or set PIPETWIN_VENV to the virtualenv holding matplotlib");
  }
  const std::string script = twin::plots_dir() + "/" + o.kind + ".py";
  if (!std::filesystem::exists(script)) {
    throw Error("no plot script " + script + " (set PIPETWIN_PLOTS_DIR to the plots/ folder of the source tree)");
  }
  std::vector<std::string> argv{py, "-B", script};
  argv.insert(argv.end(), args.begin(), args.end());
  if (o.kind_help) {
    argv.emplace_back("--help");
  } else {
    argv.insert(argv.end(), {"--out", o.out});
  }
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const std::string prog = "pipetwin plot " + o.kind;
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("plot: cannot start Python: ") + std::strerror(errno));
  if (pid == 0) {
    ::setenv("PIPETWIN_PLOT_PROG", prog.c_str(), 1);
    ::setenv("MPLBACKEND", "Agg", 1);
    ::execv(cargv[0], cargv.data());
    std::fprintf(stderr, "pipetwin: error: cannot run %s: %s\n", cargv[0], std::strerror(errno));
    std::_Exit(3);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error(std::string("plot: waiting for Python: ") + std::strerror(errno));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  throw Error(script + " was killed by signal " + std::to_string(WTERMSIG(status)));
}

}  // namespace

Run add_plot_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  std::string kinds = "Kinds and their inputs:";
  std::vector<std::string> names;
  for (const auto& k : kKinds) {
    kinds += std::string("\n  ") + k.name + " " + k.what;
    names.emplace_back(k.name);
  }
  auto* cmd = app.add_subcommand("plot", "Plot the CLI's output files (PNG and SVG): gantt, bubble, speedup, memory, heatmap");
  cmd->footer(kinds + "\nEvery option of a kind: pipetwin plot KIND --kind-help");
  cmd->add_option("kind", o->kind, "What to plot")->required()->check(CLI::IsMember(names));
  cmd->add_option("--out,-o", o->out, "Output prefix: writes PREFIX.png and PREFIX.svg (required)");
  cmd->add_flag("--kind-help", o->kind_help, "Print the options of KIND (its plots/ script) and exit");
  cmd->allow_extras();
  // During parsing, so that a missing --out is a command-line error (exit 2).
  cmd->callback([o] {
    if (o->out.empty() && !o->kind_help) throw CLI::RequiredError("--out");
  });
  return [o, cmd] { return run(*o, cmd->remaining()); };
}

}  // namespace pipetwin::cli
