// run_app: registration, parse, dispatch and the error policy of main().
#include "cli/app.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <map>

#include "models/presets.hpp"
#include "models/recompute.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pipetwin::cli {

const CLI::Validator kRecomputeChoice(
    [](std::string& value) -> std::string {
      try {
        models::parse_recompute_choice(value);
      } catch (const Error& e) {
        return e.what();
      }
      return {};
    },
    "RECOMPUTE", "RECOMPUTE");

namespace {

std::vector<std::string> g_command_line;

// A first word that is neither an option nor a command: CLI11 would only say
// that a command is required. Returns false (after saying so) when unknown.
bool known_command(const CLI::App& app, const char* word) {
  if (word[0] == '-') return true;
  std::string valid;
  bool known = false;
  for (const auto* sub : app.get_subcommands({})) {
    known = known || sub->get_name() == word;
    valid += (valid.empty() ? "" : ", ") + sub->get_name();
  }
  if (!known) std::fprintf(stderr, "pipetwin: error: unknown command '%s' (valid: %s)\n", printable(word).c_str(), valid.c_str());
  return known;
}

// Runs the chosen command; what it printed must have reached standard output
// (a full disk, a closed file): otherwise the command did not do its job.
int dispatch(const CLI::App& app, const std::map<const CLI::App*, Run>& runs) {
  int code = 2;
  for (const auto* sub : app.get_subcommands()) {
    code = runs.at(sub)();
    break;
  }
  std::cout.flush();
  if (std::fflush(stdout) != 0 || std::ferror(stdout) || !std::cout) {
    std::fprintf(stderr, "pipetwin: error: cannot write to standard output\n");
    return code == 0 ? 1 : code;
  }
  return code;
}

// --presets-dir's folders go first in PIPETWIN_PRESETS, where the presets are
// looked up (models/presets.hpp) and which the processes this one starts (the
// executor, the ranks, calibrate's runs) inherit.
void put_presets_dirs_first(const std::vector<std::string>& dirs) {
  if (dirs.empty()) return;
  std::string list;
  for (const auto& d : dirs) {
    const std::string path = std::filesystem::absolute(d).lexically_normal().string();
    if (path.find(':') != std::string::npos) {
      throw Error("--presets-dir: the folder '" + d + "' holds a ':', which separates the folders of " +
                  models::kPresetsEnv);
    }
    list += (list.empty() ? "" : ":") + path;
  }
  const char* old = std::getenv(models::kPresetsEnv);
  if (old != nullptr && *old != '\0') list += ":" + std::string(old);
  ::setenv(models::kPresetsEnv, list.c_str(), 1);
}

}  // namespace

void set_command_line(int argc, char** argv) { g_command_line.assign(argv, argv + argc); }
const std::vector<std::string>& command_line() { return g_command_line; }

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

void print_notes(const std::string& source, const std::vector<std::string>& notes) {
  for (const auto& n : notes) std::fprintf(stderr, "note: %s\n", printable(source + ": " + n).c_str());
}

int run_app(int argc, char** argv, const std::string& description, const std::vector<AddCommand>& commands,
            const std::vector<std::pair<std::string, std::string>>& elsewhere) {
  set_command_line(argc, argv);
  CLI::App app{description};
  app.set_version_flag("--version", "pipetwin 0.1.0");
  app.require_subcommand(1);
  // Options of the app, given before the command or after it (fallthrough, below).
  std::vector<std::string> presets_dirs;
  app.add_option("--presets-dir", presets_dirs,
                 "Folder of hardware presets (NAME.yaml), searched before the built-in ones (repeatable; also "
                 "PIPETWIN_PRESETS, colon-separated)")
      ->check(CLI::ExistingDirectory);
  std::map<const CLI::App*, Run> runs;
  for (const AddCommand add : commands) {
    auto run = add(app);
    runs[app.get_subcommands({}).back()] = std::move(run);
    // The app's options after the command too, except where the command
    // hands what it does not know to another program (plot's extras).
    CLI::App* sub = app.get_subcommands({}).back();
    if (!sub->get_allow_extras()) sub->fallthrough();
  }
  // Commands another executable answers: listed in the help, never parsed here.
  for (const auto& [name, text] : elsewhere) app.add_subcommand(name, text);
  if (argc >= 2 && !known_command(app, argv[1])) return 2;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the help, the version or the error
    return code == 0 ? 0 : 2;
  }
  try {
    put_presets_dirs_first(presets_dirs);
    return dispatch(app, runs);
  } catch (const pipetwin::Error& e) {
    std::fprintf(stderr, "pipetwin: error: %s\n", printable(e.what()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipetwin: internal error: %s\n", printable(e.what()).c_str());
    return 3;
  }
}

}  // namespace pipetwin::cli
