// SimGridPool: child processes started, polled and reaped.
#include "twin/simgrid_pool.hpp"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "schedule/error.hpp"

namespace pipetwin::twin {

SimGridPool::SimGridPool(int jobs) : jobs_(std::max(1, jobs)) {}

void SimGridPool::add(std::size_t id, Make make) { todo_.push_back({id, std::move(make)}); }

void SimGridPool::run(const Done& done) {
  struct Running {
    std::size_t id;
    sim::SimProcess process;
    std::string data;
  };
  std::vector<Running> running;
  while (!todo_.empty() || !running.empty()) {
    while (!todo_.empty() && static_cast<int>(running.size()) < jobs_) {
      Queued q = std::move(todo_.front());
      todo_.pop_front();
      try {
        const auto input = q.make();
        if (input) running.push_back({q.id, sim::start_simulation(*input), {}});
      } catch (const Error& e) {
        done(q.id, nullptr, e.what());
      }
    }
    if (running.empty()) continue;
    std::vector<pollfd> fds;
    for (const auto& r : running) fds.push_back({r.process.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw Error("SimGrid replays: poll failed");
    }
    for (std::size_t j = running.size(); j-- > 0;) {
      if (!(fds[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[1 << 16];
      const ssize_t n = ::read(running[j].process.fd, buf, sizeof buf);
      if (n > 0) {
        running[j].data.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      Running finished = std::move(running[j]);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(j));
      try {
        const auto result = sim::finish_simulation(finished.process, finished.data);
        done(finished.id, &result, {});
      } catch (const Error& e) {
        done(finished.id, nullptr, e.what());
      }
    }
  }
}

}  // namespace pipetwin::twin
