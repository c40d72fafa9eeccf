// pipetwin: one binary, one subcommand per task. Errors in user input end in
// one clear message on stderr and a non-zero exit:
//   1  bad input (pipetwin::Error: a file, field, rank or step is named)
//   2  bad command line (CLI11)
//   3  internal error (a bug: please report it)
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pipetwin::cli {
namespace {
std::vector<std::string> g_command_line;

// A message may quote the input (a JSON parser's "last read: '...'"): bytes
// that are not valid UTF-8, and control characters other than the newlines of
// a deliberate multi-line message (validate's grid), are printed as \xNN.
std::string printable(const std::string& s) {
  std::string out;
  const auto hex = [&](unsigned char c) {
    static const char* digits = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = schedule::utf8_sequence_length(s, i);
    if (n == 0 || (n == 1 && ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f))) {
      hex(c);
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}
}
void set_command_line(int argc, char** argv) { g_command_line.assign(argv, argv + argc); }
const std::vector<std::string>& command_line() { return g_command_line; }
}  // namespace pipetwin::cli

int main(int argc, char** argv) {
  pipetwin::cli::set_command_line(argc, argv);
  CLI::App app{"pipetwin: simulate, run, calibrate and compare pipeline-parallel training schedules"};
  app.set_version_flag("--version", "pipetwin 0.1.0");
  app.require_subcommand(1);
  std::map<const CLI::App*, pipetwin::cli::Run> runs;
  const auto add = [&](pipetwin::cli::Run (*adder)(CLI::App&)) {
    auto run = adder(app);
    runs[app.get_subcommands({}).back()] = std::move(run);
  };
  add(pipetwin::cli::add_schedule_command);
  add(pipetwin::cli::add_validate_command);
  add(pipetwin::cli::add_partition_command);
  add(pipetwin::cli::add_simulate_command);
  add(pipetwin::cli::add_sweep_command);
  add(pipetwin::cli::add_run_command);
  add(pipetwin::cli::add_calibrate_command);
  add(pipetwin::cli::add_info_command);
  add(pipetwin::cli::add_compare_command);
  add(pipetwin::cli::add_plot_command);
  // A first word that is neither an option nor a command: CLI11 would only
  // say that a command is required.
  if (argc >= 2 && argv[1][0] != '-') {
    std::string valid;
    bool known = false;
    for (const auto* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      valid += (valid.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "pipetwin: error: unknown command '%s' (valid: %s)\n",
                   pipetwin::cli::printable(argv[1]).c_str(), valid.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the help, the version or the error
    return code == 0 ? 0 : 2;
  }
  try {
    int code = 2;
    for (const auto* sub : app.get_subcommands()) {
      code = runs.at(sub)();
      break;
    }
    // What was printed must have reached standard output (a full disk, a
    // closed file): otherwise the command did not do its job.
    std::cout.flush();
    if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
      std::fprintf(stderr, "pipetwin: error: cannot write to standard output\n");
      return code == 0 ? 1 : code;
    }
    return code;
  } catch (const pipetwin::Error& e) {
    std::fprintf(stderr, "pipetwin: error: %s\n", pipetwin::cli::printable(e.what()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipetwin: internal error: %s\n", pipetwin::cli::printable(e.what()).c_str());
    return 3;
  }
}
