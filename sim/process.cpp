// simulate(): the replay (simulate_here, sim/simulator.cpp) in a child
// process, its timeline read back through a pipe; once more at SimGrid's
// default precision if its solver fails on its own rounding.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "schedule/error.hpp"
#include "sim/simulator.hpp"
#include "sim/wire.hpp"

namespace pipetwin::sim {

SimProcess start_simulation(const SimInput& in) {
  int fds[2];
  if (::pipe(fds) != 0) throw Error("simulation: cannot create a pipe");
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) throw Error("simulation: cannot fork the simulation process");
  if (child == 0) {
    ::close(fds[0]);
    // SimGrid reports a deadlock at critical level on stderr; ours travels through the pipe.
    if (!std::getenv("PIPETWIN_SIM_LOG")) std::freopen("/dev/null", "w", stderr);
    std::string out;
    int status = 0;
    try {
      out = encode(simulate_here(in));
    } catch (const std::exception& e) {
      out = e.what();
      status = 1;
    }
    std::string framed;
    put<int32_t>(framed, status);
    framed += out;
    for (std::size_t off = 0; off < framed.size();) {
      const ssize_t n = ::write(fds[1], framed.data() + off, framed.size() - off);
      if (n <= 0) ::_exit(3);
      off += static_cast<std::size_t>(n);
    }
    ::close(fds[1]);
    ::_exit(0);
  }
  ::close(fds[1]);
  return {child, fds[0]};
}

SimResult finish_simulation(const SimProcess& process, const std::string& data) {
  ::close(process.fd);
  int wstatus = 0;
  ::waitpid(process.pid, &wstatus, 0);
  if (WIFSIGNALED(wstatus)) {
    throw Error("simulation: the simulation process died of signal " + std::to_string(WTERMSIG(wstatus)));
  }
  std::size_t pos = 0;
  const int status = take<int32_t>(data, pos);
  if (status != 0) throw Error(data.substr(pos));
  SimResult result;
  result.timeline = decode(data.substr(pos));
  return result;
}

namespace {

SimResult simulate_once(const SimInput& in) {
  const SimProcess process = start_simulation(in);
  std::string data;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(process.fd, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    data.append(buf, static_cast<std::size_t>(n));
  }
  return finish_simulation(process, data);
}

}  // namespace

SimResult simulate(const SimInput& in) {
  const auto t0 = std::chrono::steady_clock::now();
  SimResult result;
  try {
    result = simulate_once(in);
  } catch (const Error& e) {
    if (std::string(e.what()).find("died of signal") == std::string::npos || in.maxmin_precision >= 1e-5) throw;
    std::fprintf(stderr, "pipetwin: note: SimGrid's solver failed on its own rounding (%s); replayed at its default "
                         "precision, 1e-5\n", e.what());
    SimInput looser = in;
    looser.maxmin_precision = 1e-5;
    result = simulate_once(looser);
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return result;
}

}  // namespace pipetwin::sim
