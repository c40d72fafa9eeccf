// The replay engine's settings and its profile line (sim/engine.hpp).
#include "sim/engine.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

namespace sg4 = simgrid::s4u;
namespace ps = pipetwin::schedule;

namespace pipetwin::sim {

void write_profile(const char* file, const ps::Program& p, const std::array<std::chrono::steady_clock::time_point, 4>& t,
                   std::size_t hosts, std::size_t links) {
  const auto secs = [&](int a, int b) { return std::chrono::duration<double>(t[b] - t[a]).count(); };
  const int K = p.num_ranks, D = p.data_parallel;
  std::size_t actions = 0;
  for (const auto& rank : p.ranks) actions += rank.size();
  if (FILE* f = std::fopen(file, "a")) {
    std::fprintf(f,
                 "actors %d (K %d x D %d), actions %zu per replica, %zu in all; platform %.3f s (%zu hosts, "
                 "%zu links), actors %.3f s, replay %.3f s (%.2f us per action)\n",
                 K * D, K, D, actions, actions * D, secs(0, 1), hosts, links, secs(1, 2), secs(2, 3),
                 1e6 * secs(2, 3) / std::max<double>(1, static_cast<double>(actions) * D));
    std::fclose(f);
  }
}

void configure(sg4::Engine& engine, const SimInput& in) {
  const auto& p = in.program;
  engine.set_config("network/model:CM02");
  engine.set_config("network/TCP-gamma:0");
  engine.set_config("network/crosstraffic:0");
  // SimGrid rounds event times to 1e-9 s and work to 1e-5 units by default;
  // tighter, so that the replay agrees with the closed forms to 1e-9 relative.
  // The solver's residues grow with the flows sharing a link: at 1e-9 it
  // aborted ("Cannot saturate more a constraint that has no active
  // element") or crashed from 280 hosts on, at 1e-8 from 2,048; so 1e-9 up
  // to 16 hosts, then in proportion to them.
  engine.set_config("surf/precision:1e-14");
  const double actors = static_cast<double>(p.num_ranks) * p.data_parallel;
  const double precision = in.maxmin_precision > 0 ? in.maxmin_precision : 1e-9 * std::max(1.0, actors / 16);
  char setting[64];
  std::snprintf(setting, sizeof setting, "maxmin/precision:%.3g", precision);
  engine.set_config(setting);
}

}  // namespace pipetwin::sim
