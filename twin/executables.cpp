// Finding the executor and the plot scripts; starting the executor.
#include "twin/executables.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "schedule/error.hpp"

#ifndef PIPETWIN_PYTHON
#define PIPETWIN_PYTHON "python3"
#endif
#ifndef PIPETWIN_PLOTS_DIR
#define PIPETWIN_PLOTS_DIR "plots"
#endif

namespace pipetwin::twin {
namespace fs = std::filesystem;

namespace {
fs::path self_folder() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find this executable (/proc/self/exe): " + ec.message());
  return self.parent_path();
}
}  // namespace

std::string plots_dir() {
  if (const char* dir = std::getenv("PIPETWIN_PLOTS_DIR"); dir && *dir) return dir;
  const auto installed = self_folder().parent_path() / "share" / "pipetwin" / "plots";
  std::error_code ec;
  if (fs::exists(installed / "common.py", ec)) return installed.string();
  return PIPETWIN_PLOTS_DIR;
}

std::string plots_python() {
  if (const char* venv = std::getenv("PIPETWIN_VENV"); venv && *venv) return std::string(venv) + "/bin/python";
  return PIPETWIN_PYTHON;
}

std::string executor_path() {
  if (const char* given = std::getenv("PIPETWIN_EXEC"); given != nullptr && *given != '\0') return given;
  return (self_folder() / "pipetwin-exec").string();
}

void hand_over_to_executor(int argc, char** argv) {
  const std::string path = executor_path();
  if (::access(path.c_str(), X_OK) != 0) {
    throw Error("pipetwin " + std::string(argc > 1 ? argv[1] : "run") + " needs the executor " + path + " (" +
                std::strerror(errno) + "): build it with the project (cmake --build build) or set PIPETWIN_EXEC");
  }
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  std::fflush(nullptr);
  ::execv(path.c_str(), args.data());
  throw Error("cannot start the executor " + path + ": " + std::strerror(errno));
}

nlohmann::json executor_info() {
  std::string path;
  try {
    path = executor_path();
  } catch (const Error& e) {
    return {{"executor", std::string("unavailable: ") + e.what()}};
  }
  if (::access(path.c_str(), X_OK) != 0) return {{"executor", "unavailable: no " + path}};
  const std::string command = "'" + path + "' info --json 2>/dev/null";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {{"executor", "unavailable: cannot start " + path}};
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return {{"executor", "unavailable: " + path + " info failed"}};
  auto j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_object()) return {{"executor", "unavailable: " + path + " info printed no JSON"}};
  j["executor"] = path;
  return j;
}

}  // namespace pipetwin::twin
