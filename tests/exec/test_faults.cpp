// `pipetwin run` when things go wrong, and across hosts: a rank killed
// mid-step (with and without the launcher), Ctrl-C, a port in use, a peer
// that never joins, impossible configurations; ranks started by hand with the
// torchrun environment, on one host and in two network namespaces.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "tests/support/shell.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

using pipetwin::test::free_port;

const std::string kModel = std::string(PIPETWIN_TEST_MODELS) + "/tiny-transformer.yaml";

fs::path scratch(const std::string& name) { return pipetwin::test::scratch_dir("faults", name); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Starts `argv` (argv[0] resolved on PATH) with extra environment entries;
// stdout and stderr go to `log`.
pid_t spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, const fs::path& log) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 1);
  ::dup2(fd, 2);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  ::_exit(127);
}

// Waits up to `seconds`; returns the wait status, or nullopt on timeout.
std::optional<int> wait_for(pid_t pid, double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

// Processes whose parent is `parent`, with the RANK of their environment.
std::map<int, pid_t> ranks_under(pid_t parent) {
  std::map<int, pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    int ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream environ(e.path() / "environ");
    std::string entry;
    while (std::getline(environ, entry, '\0')) {
      if (entry.rfind("RANK=", 0) == 0) out[std::stoi(entry.substr(5))] = std::stoi(name);
    }
  }
  return out;
}

bool alive(pid_t pid) { return ::kill(pid, 0) == 0; }

std::vector<std::string> run_args(int k, int steps, const std::vector<std::string>& more = {}) {
  std::vector<std::string> a{PIPETWIN_BINARY, "run", "--model", kModel, "-s", "1f1b", "-k", std::to_string(k), "-m", "4",
                             "--batch", "8", "--steps", std::to_string(steps), "--threads", "1"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

// Waits until the launcher `pid` has started `k` ranks that have run for a while.
std::map<int, pid_t> wait_for_ranks(pid_t pid, int k) {
  std::map<int, pid_t> ranks;
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < until && static_cast<int>(ranks.size()) < k) {
    ranks = ranks_under(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past start-up, into the steps
  return ranks;
}

}  // namespace

TEST(Faults, ARankKilledMidStepStopsEveryRankWithinThirtySeconds) {
  const auto dir = scratch("kill");
  const auto trace = dir / "trace.json";
  const pid_t launcher = spawn(run_args(3, 100000, {"--trace", trace.string()}), {}, dir / "log");
  const auto ranks = wait_for_ranks(launcher, 3);
  ASSERT_EQ(ranks.size(), 3u) << slurp(dir / "log");
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(ranks.at(1), SIGKILL), 0);
  const auto status = wait_for(launcher, 30);
  ASSERT_TRUE(status.has_value()) << "the launcher did not exit within 30 s";
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  for (const auto& [r, pid] : ranks) EXPECT_FALSE(alive(pid)) << "rank " << r << " survived";
  const auto log = slurp(dir / "log");
  EXPECT_TRUE(has(log, "pipetwin: error: rank 1 was killed by signal 9")) << log;
  EXPECT_FALSE(has(log, "terminate called")) << log;
  EXPECT_FALSE(fs::exists(trace));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_NE(e.path().filename(), "trace.json");
}

TEST(Faults, WithoutLauncherThePeersOfAKilledRankExitNamingIt) {
  const auto dir = scratch("torchrun_kill");
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(spawn(run_args(2, 100000, {"--timeout", "60"}),
                         {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}},
                         dir / ("log" + std::to_string(r))));
  }
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  wait_for(pids[1], 5);
  const auto status = wait_for(pids[0], 30);
  ASSERT_TRUE(status.has_value()) << "rank 0 did not exit within 30 s";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  const auto log = slurp(dir / "log0");
  EXPECT_TRUE(has(log, "pipetwin: error: rank 0, step ")) << log;
  EXPECT_TRUE(has(log, "lost rank 1")) << log;
}

// A rank of a data group (replica 1 of pipeline rank 0, with -d 2) or of a
// tensor-parallel group (member 1, with -t 2): its pipeline peer and its
// group's peers all lose it.
class GroupFault : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(GroupFault, ARankOfAGroupKilledMidStepStopsEveryRank) {
  const auto dir = scratch("kill_group");
  const pid_t launcher = spawn(run_args(2, 100000, GetParam()), {}, dir / "log");
  const auto ranks = wait_for_ranks(launcher, 4);
  ASSERT_EQ(ranks.size(), 4u) << slurp(dir / "log");
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(ranks.at(1), SIGKILL), 0);
  const auto status = wait_for(launcher, 30);
  ASSERT_TRUE(status.has_value()) << "the launcher did not exit within 30 s";
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30);
  for (const auto& [r, pid] : ranks) EXPECT_FALSE(alive(pid)) << "rank " << r << " survived";
  const auto log = slurp(dir / "log");
  EXPECT_TRUE(has(log, "pipetwin: error: rank 1 was killed by signal 9")) << log;
  EXPECT_FALSE(has(log, "terminate called")) << log;
}

INSTANTIATE_TEST_SUITE_P(Faults, GroupFault,
                         ::testing::Values(std::vector<std::string>{"-d", "2"},
                                           std::vector<std::string>{"-t", "2", "--hardware", "a100"}),
                         [](const auto& info) { return info.param.front() == "-d" ? "data" : "tensor"; });

// Without a launcher, the other replica finds its reduction's peer gone and names its data group.
TEST(Faults, WithoutLauncherAReplicaNamesItsDataGroupWhenAPeerDies) {
  const auto dir = scratch("torchrun_kill_dp");
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(spawn(run_args(1, 100000, {"-d", "2", "--timeout", "60"}),
                         {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}},
                         dir / ("log" + std::to_string(r))));
  }
  std::this_thread::sleep_for(std::chrono::seconds(4));
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);
  wait_for(pids[1], 5);
  const auto status = wait_for(pids[0], 30);
  ASSERT_TRUE(status.has_value()) << "rank 0 did not exit within 30 s";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  const auto log = slurp(dir / "log0");
  EXPECT_TRUE(has(log, "pipetwin: error: rank 0, step ")) << log;
  EXPECT_TRUE(has(log, "lost a rank of its data group (ranks 0, 1)")) << log;
}

TEST(Faults, CtrlCOnTheLauncherStopsEveryRank) {
  const auto dir = scratch("sigint");
  const pid_t launcher = spawn(run_args(2, 100000), {}, dir / "log");
  const auto ranks = wait_for_ranks(launcher, 2);
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(::kill(launcher, SIGINT), 0);
  const auto status = wait_for(launcher, 30);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 130);
  for (const auto& [r, pid] : ranks) EXPECT_FALSE(alive(pid)) << "rank " << r << " survived";
  EXPECT_TRUE(has(slurp(dir / "log"), "interrupted")) << slurp(dir / "log");
}

TEST(Faults, APortInUseIsNamed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  const std::string port = std::to_string(ntohs(a.sin_port));
  const auto dir = scratch("port");
  const pid_t p = spawn(run_args(2, 1, {"--master-port", port}), {}, dir / "log");
  const auto status = wait_for(p, 60);
  ::close(fd);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  EXPECT_TRUE(has(slurp(dir / "log"), "port " + port + ": the port is in use")) << slurp(dir / "log");
}

TEST(Faults, APeerThatNeverJoinsIsNamed) {
  const auto dir = scratch("missing");
  const pid_t p = spawn(run_args(2, 1, {"--timeout", "3"}),
                        {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(free_port())}},
                        dir / "log");
  const auto status = wait_for(p, 60);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1);
  EXPECT_TRUE(has(slurp(dir / "log"), "rank(s) 1 of 2 did not join within 3 s")) << slurp(dir / "log");
}

TEST(Faults, ImpossibleConfigurationsFailBeforeAnyRankStarts) {
  const auto dir = scratch("bad");
  struct Bad {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string message;
  };
  const std::vector<Bad> cases{
      {run_args(9, 1), {}, "into 9 stages: a stage needs at least one layer"},
      {run_args(2, 1, {"--device", "cuda"}), {}, "no CUDA device is usable"},
      {run_args(2, 1), {{"RANK", "0"}, {"WORLD_SIZE", "3"}}, "WORLD_SIZE is 3 but the schedule has 2 ranks"},
      {run_args(2, 1), {{"RANK", "5"}, {"WORLD_SIZE", "2"}}, "RANK='5'"},
      // Outputs that cannot be written, or would be written over each other
      // or over an input: refused before a rank starts, nothing written.
      {run_args(2, 1, {"--trace", (dir / "same.json").string(), "--summary", (dir / "same.json").string()}), {},
       (dir / "same.json").string() + ": given to both --trace and --summary"},
      {run_args(2, 1, {"--trace", kModel}), {}, ": --trace would write over the --model file"},
      {run_args(2, 1, {"--trace", (dir / "no" / "t.json").string()}), {}, "--trace: the folder " + (dir / "no").string() + " does not exist"},
      {run_args(2, 1, {"--save-weights", (dir / "log").string()}), {}, "--save-weights needs a folder, and this is a file"},
  };
  for (const auto& c : cases) {
    const pid_t p = spawn(c.args, c.env, dir / "log");
    const auto status = wait_for(p, 60);
    ASSERT_TRUE(status.has_value());
    const auto log = slurp(dir / "log");
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << log;
    EXPECT_TRUE(has(log, c.message)) << log;
    EXPECT_FALSE(has(log, "terminate called")) << log;
    EXPECT_FALSE(std::filesystem::exists(dir / "same.json"));
    EXPECT_FALSE(std::filesystem::exists(dir / "no"));
  }
}

TEST(Faults, ATrainingThatDivergesStopsNamingRankAndStep) {
  const auto dir = scratch("diverge");
  // One rank; a learning rate that makes the weights infinite after the first step.
  const pid_t p = spawn(run_args(1, 3, {"--lr", "1e30", "--summary", (dir / "s.json").string()}), {}, dir / "log");
  const auto status = wait_for(p, 120);
  ASSERT_TRUE(status.has_value());
  const auto log = slurp(dir / "log");
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << log;
  EXPECT_TRUE(has(log, "pipetwin: error: rank 0, step 1: the loss is")) << log;
  EXPECT_TRUE(has(log, "the training diverged")) << log;
  EXPECT_FALSE(has(log, "internal error")) << log;
  EXPECT_FALSE(std::filesystem::exists(dir / "s.json"));
}

TEST(Hosts, RanksStartedByHandWithTheTorchrunEnvironment) {
  const auto dir = scratch("torchrun");
  const std::string port = std::to_string(free_port());
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pids.push_back(spawn(run_args(2, 2),
                         {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", std::to_string(r)},
                          {"LOCAL_WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}},
                         dir / ("log" + std::to_string(r))));
  }
  for (int r = 0; r < 2; ++r) {
    const auto status = wait_for(pids[r], 120);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << slurp(dir / ("log" + std::to_string(r)));
  }
  EXPECT_TRUE(has(slurp(dir / "log0"), "throughput")) << slurp(dir / "log0");
  EXPECT_EQ(slurp(dir / "log1"), "");  // only rank 0 reports
}

// Two hosts: network namespaces joined by a veth pair, made here (root and
// iproute2 needed; skipped with the reason where the kernel refuses).
TEST(Hosts, RanksInTwoNetworkNamespacesRendezvousOverTheLink) {
  const std::string tag = std::to_string(::getpid() % 100000);
  const std::string a = "pta" + tag, b = "ptb" + tag, va = "pva" + tag, vb = "pvb" + tag;
  const auto sh = [](const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); };
  if (sh("ip netns add " + a) != 0) GTEST_SKIP() << "cannot create a network namespace here (needs root and iproute2)";
  struct Cleanup {
    std::function<void()> f;
    ~Cleanup() { f(); }
  } cleanup{[&] { sh("ip netns del " + a); sh("ip netns del " + b); }};
  const bool made = sh("ip netns add " + b) == 0 && sh("ip link add " + va + " type veth peer name " + vb) == 0 &&
                    sh("ip link set " + va + " netns " + a) == 0 && sh("ip link set " + vb + " netns " + b) == 0 &&
                    sh("ip -n " + a + " addr add 10.213.0.1/24 dev " + va) == 0 &&
                    sh("ip -n " + b + " addr add 10.213.0.2/24 dev " + vb) == 0 && sh("ip -n " + a + " link set lo up") == 0 &&
                    sh("ip -n " + b + " link set lo up") == 0 && sh("ip -n " + a + " link set " + va + " up") == 0 &&
                    sh("ip -n " + b + " link set " + vb + " up") == 0;
  if (!made) GTEST_SKIP() << "the kernel refused the veth pair between namespaces";
  const auto dir = scratch("netns");
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> argv{"ip", "netns", "exec", r == 0 ? a : b};
    const auto rest = run_args(2, 2, {"--json", "--timeout", "60"});
    argv.insert(argv.end(), rest.begin(), rest.end());
    pids.push_back(spawn(argv, {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.213.0.1"},
                                {"MASTER_PORT", "29517"}},
                         dir / ("log" + std::to_string(r))));
  }
  for (int r = 0; r < 2; ++r) {
    const auto status = wait_for(pids[r], 120);
    ASSERT_TRUE(status.has_value());
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << slurp(dir / ("log" + std::to_string(r)));
  }
  // Each rank reached the other over the veth link, from its own address.
  const auto log = slurp(dir / "log0");
  EXPECT_TRUE(has(log, "\"host\": \"10.213.0.1\"")) << log;
  EXPECT_TRUE(has(log, "\"host\": \"10.213.0.2\"")) << log;
}
