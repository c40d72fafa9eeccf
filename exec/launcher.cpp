// launch_local(): fork/exec the ranks, watch them, stop them all on failure.
#include "exec/launcher.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "schedule/error.hpp"

extern char** environ;

namespace pipetwin::exec {
namespace {

volatile sig_atomic_t g_interrupted = 0;
void on_signal(int sig) { g_interrupted = sig; }

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

bool failed(int status) { return !WIFEXITED(status) || WEXITSTATUS(status) != 0; }

// The environment of rank r: ours, with the torchrun variables replaced.
std::vector<std::string> rank_environment(int r, int k, int port) {
  std::vector<std::string> env;
  const std::map<std::string, std::string> ours{{"RANK", std::to_string(r)},
                                                {"WORLD_SIZE", std::to_string(k)},
                                                {"LOCAL_RANK", std::to_string(r)},
                                                {"LOCAL_WORLD_SIZE", std::to_string(k)},
                                                {"MASTER_ADDR", "127.0.0.1"},
                                                {"MASTER_PORT", std::to_string(port)},
                                                {"PIPETWIN_STORE_HOSTED", "1"}};
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!ours.count(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [k2, v] : ours) env.push_back(k2 + "=" + v);
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

class Ranks {
 public:
  explicit Ranks(double grace_s) : grace_s_(grace_s) {}
  ~Ranks() { stop(); }

  void start(int r, std::vector<std::string> argv, std::vector<std::string> env) {
    auto args = pointers(argv);
    auto envp = pointers(env);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw Error("cannot start rank " + std::to_string(r) + ": fork failed: " + std::strerror(errno));
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
      if (::getppid() != parent) ::_exit(127);
      ::execve("/proc/self/exe", args.data(), envp.data());
      ::_exit(127);
    }
    pid_of_[pid] = r;
  }

  bool running() const { return !pid_of_.empty(); }

  // Reaps the ranks that ended; returns (rank, status) of each.
  std::vector<std::pair<int, int>> reap() {
    std::vector<std::pair<int, int>> out;
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      const auto it = pid_of_.find(pid);
      if (it == pid_of_.end()) continue;
      out.emplace_back(it->second, status);
      pid_of_.erase(it);
    }
    return out;
  }

  // SIGTERM to every rank still running, SIGKILL after the grace period.
  void stop() {
    if (pid_of_.empty()) return;
    for (const auto& [pid, _] : pid_of_) ::kill(pid, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s_);
    while (!pid_of_.empty() && std::chrono::steady_clock::now() < deadline) {
      reap();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (const auto& [pid, _] : pid_of_) ::kill(pid, SIGKILL);
    while (!pid_of_.empty()) {
      reap();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  double grace_s_;
  std::map<pid_t, int> pid_of_;
};

}  // namespace

void launch_local(const std::vector<std::string>& argv, const LaunchOptions& o) {
  StoreServer store(o.master_port, o.timeout_s);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  Ranks ranks(o.grace_s);
  for (int r = 0; r < o.ranks; ++r) ranks.start(r, argv, rank_environment(r, o.ranks, store.port()));

  std::vector<std::pair<int, int>> failures;
  while (ranks.running() && failures.empty() && g_interrupted == 0) {
    for (const auto& [r, status] : ranks.reap()) {
      if (failed(status)) failures.emplace_back(r, status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (g_interrupted != 0) {
    ranks.stop();
    std::fprintf(stderr, "pipetwin: interrupted (%s): stopped all %d ranks\n", strsignal(g_interrupted), o.ranks);
    std::exit(130);
  }
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  if (failures.empty()) return;
  // Others often fail a moment later because of the first (a lost peer):
  // collect them briefly, then blame a rank that died of a signal if any.
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (ranks.running() && std::chrono::steady_clock::now() < until) {
    for (const auto& [r, status] : ranks.reap()) {
      if (failed(status)) failures.emplace_back(r, status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ranks.stop();
  auto culprit = failures.front();
  for (const auto& f : failures) {
    if (WIFSIGNALED(f.second)) {
      culprit = f;
      break;
    }
  }
  throw Error("rank " + std::to_string(culprit.first) + " " + describe(culprit.second) + "; stopped the other " +
              std::to_string(o.ranks - 1) + " rank(s)");
}

}  // namespace pipetwin::exec
