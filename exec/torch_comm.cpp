// Comm: TCPStore rendezvous, clock alignment and the c10d process groups.
#include "exec/torch_comm.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <limits>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "schedule/error.hpp"

namespace pipetwin::exec {
namespace {

constexpr int kClockRounds = 16;

std::string where(const RankEnv& e) { return e.master_addr + ":" + std::to_string(e.master_port); }

// The local address this host uses to reach `peer` (no packet is sent).
std::string local_address_towards(const std::string& peer, int port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (fd < 0) return "127.0.0.1";
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  std::string out = "127.0.0.1";
  if (::inet_pton(AF_INET, peer.c_str(), &to.sin_addr) == 1 &&
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) {
    sockaddr_in me{};
    socklen_t len = sizeof me;
    char buf[INET_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &len) == 0 &&
        ::inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf) != nullptr) {
      out = buf;
    }
  }
  ::close(fd);
  return out;
}

std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }
std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

double monotonic_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Comm::Comm(const RankEnv& env, bool cuda, std::chrono::milliseconds timeout) : env_(env), cuda_(cuda), timeout_(timeout) {
  const std::string me = "rank " + std::to_string(env.rank);
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(env.master_port);
  o.isServer = env.rank == 0 && !env.store_hosted;
  o.waitWorkers = false;
  o.timeout = timeout;
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (o.isServer) {
      throw Error(me + ": cannot host the rendezvous store on port " + std::to_string(env.master_port) +
                  (what.find("in use") != std::string::npos || what.find("EADDRINUSE") != std::string::npos
                       ? ": the port is in use (choose another MASTER_PORT / --master-port)"
                       : ": " + what.substr(0, what.find('\n'))));
    }
    throw Error(me + ": no rendezvous store answered at " + where(env) + " within " +
                std::to_string(timeout.count() / 1000) + " s (is rank 0 running, and MASTER_ADDR/MASTER_PORT right?)");
  }
  join(timeout);
  host_ = local_address_towards(env.master_addr, env.master_port);
  align_clocks();
  if (cuda) {
    // A failed NCCL operation (a peer gone) aborts the communicators and
    // surfaces as an error of the action that waits for it, which names the
    // rank, step, action and peer; the default (3) ends the process from
    // ProcessGroupNCCL's watchdog thread: SIGABRT and a stack trace, a
    // minute later. A value in the environment wins.
    ::setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", /*overwrite=*/0);
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    // Longer than the rank's own watch (run_rank), which names what hangs.
    opts->timeout = 2 * timeout + std::chrono::seconds(30);
    // One group per channel kind: activations and gradients, each way
    // (lower -> higher rank, higher -> lower). Each group makes a
    // communicator only for the pairs that use it.
    const char* names[] = {"nccl/act/up", "nccl/act/down", "nccl/grad/up", "nccl/grad/down"};
    for (int i = 0; i < 4; ++i) {
      nccl_[i] = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>(names[i], store_),
                                                             env.rank, env.world_size, opts);
    }
    return;
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  try {
    opts->devices.push_back(ifname != nullptr && *ifname != '\0'
                                ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                : c10d::ProcessGroupGloo::createDeviceForHostname(host_));
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>("gloo", store_),
                                                         env.rank, env.world_size, opts);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw Error(me + ": Gloo could not connect the ranks (" + what.substr(0, what.find('\n')) + ")");
  }
}

c10::intrusive_ptr<c10d::Backend> Comm::subgroup(const std::string& name, const std::vector<int>& members) const {
  const auto me = std::find(members.begin(), members.end(), env_.rank);
  if (me == members.end()) throw Error("rank " + std::to_string(env_.rank) + " is not in its own " + name + " group");
  const int index = static_cast<int>(me - members.begin()), size = static_cast<int>(members.size());
  auto store = c10::make_intrusive<c10d::PrefixStore>(name, store_);
  if (cuda_) {
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = 2 * timeout_ + std::chrono::seconds(30);  // as the pipeline's groups
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, index, size, opts);
  }
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout_);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  try {
    opts->devices.push_back(ifname != nullptr && *ifname != '\0' ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                                                                 : c10d::ProcessGroupGloo::createDeviceForHostname(host_));
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, index, size, opts);
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw Error("rank " + std::to_string(env_.rank) + ": Gloo could not connect its " + name + " group (" +
                what.substr(0, what.find('\n')) + ")");
  }
}

Comm::~Comm() {
  if (!cuda_) return;
  const bool failing = std::uncaught_exceptions() > 0;
  for (auto& g : nccl_) {
    if (!g) continue;
    try {
      if (failing) {
        g->abort();
      } else {
        g->shutdown();
      }
    } catch (const std::exception&) {
      // Leaving anyway; the process group's destructor aborts what is left.
    }
  }
}

void Comm::join(std::chrono::milliseconds timeout) {
  store_->set("joined/" + std::to_string(env_.rank), bytes("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < env_.world_size; ++r) keys.push_back("joined/" + std::to_string(r));
  try {
    store_->wait(keys, timeout);
  } catch (const std::exception&) {
    std::string missing;
    for (int r = 0; r < env_.world_size; ++r) {
      if (!store_->check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    throw Error("rank " + std::to_string(env_.rank) + ": rendezvous at " + where(env_) + ": rank(s) " + missing +
                " of " + std::to_string(env_.world_size) + " did not join within " +
                std::to_string(timeout.count() / 1000) + " s");
  }
}

// NTP-like through the store: rank r sends a ping, rank 0 answers with its
// clock; the round with the shortest round trip gives the offset, with at
// most half that round trip as error.
void Comm::align_clocks() {
  const auto key = [](int r, int i, const char* what) {
    return "clock/" + std::to_string(r) + "/" + std::to_string(i) + "/" + what;
  };
  if (env_.rank == 0) {
    for (int r = 1; r < env_.world_size; ++r) {
      for (int i = 0; i < kClockRounds; ++i) {
        store_->get(key(r, i, "ping"));
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.9f", monotonic_now());
        store_->set(key(r, i, "pong"), bytes(buf));
      }
    }
    return;
  }
  double best_rtt = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kClockRounds; ++i) {
    const double t0 = monotonic_now();
    store_->set(key(env_.rank, i, "ping"), bytes("1"));
    const double remote = std::stod(text(store_->get(key(env_.rank, i, "pong"))));
    const double t1 = monotonic_now();
    if (t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      offset_s_ = remote - (t0 + t1) / 2;
    }
  }
  uncertainty_s_ = best_rtt / 2;
}

double Comm::now() const { return monotonic_now() + offset_s_; }

c10d::Backend& Comm::channel(int from, int to, bool activations) const {
  if (!cuda_) return *group_;
  return *nccl_[(activations ? 0 : 2) + (from > to ? 1 : 0)];
}

c10::intrusive_ptr<c10d::Work> Comm::send(std::vector<at::Tensor>& tensors, int dst, int tag, bool activations) {
  return channel(env_.rank, dst, activations).send(tensors, dst, tag);
}

void Comm::recv(std::vector<at::Tensor>& tensors, int src, int tag, bool activations) {
  channel(src, env_.rank, activations).recv(tensors, src, tag)->wait();
}

c10::intrusive_ptr<c10d::Work> Comm::post_recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  if (cuda_) throw Error("post_recv is for Gloo (CPU) ranks");
  return group_->recv(tensors, src, tag);
}

void Comm::publish(const std::string& key, const std::string& value) { store_->set(key, bytes(value)); }
std::string Comm::fetch(const std::string& key) { return text(store_->get(key)); }

void Comm::barrier(const std::string& name) {
  store_->set("barrier/" + name + "/" + std::to_string(env_.rank), bytes("1"));
  std::vector<std::string> keys;
  for (int r = 0; r < env_.world_size; ++r) keys.push_back("barrier/" + name + "/" + std::to_string(r));
  store_->wait(keys);
}

}  // namespace pipetwin::exec
