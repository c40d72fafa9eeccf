// `pipetwin probe`: whether this host gives its processes the cores it shows
// (twin/probe.hpp). A run's noise columns say what /proc/stat saw; this
// says what it cannot: a hypervisor that runs the guest's CPUs on fewer cores.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.hpp"
#include "schedule/io.hpp"
#include "twin/probe.hpp"

namespace pipetwin::cli {

namespace {

struct ProbeOptions {
  int threads = 0;  // 0: the host's CPUs
  int rounds = 20;
  double seconds = 0.2;
  std::string json;
  bool quiet = false;
};

}  // namespace

Run add_probe_command(CLI::App& app) {
  auto o = std::make_shared<ProbeOptions>();
  auto* cmd = app.add_subcommand(
      "probe", "Probe whether this host gives its processes the cores it shows: each CPU alone, then all at once");
  cmd->add_option("--threads", o->threads, "Threads at once (default: the host's CPUs, as /proc/stat counts them)");
  cmd->add_option("--rounds", o->rounds, "Rounds of alone-then-together (default 20)");
  cmd->add_option("--seconds", o->seconds, "Seconds of each phase of a round, in (0, 10] (default 0.2)");
  cmd->add_option("--json", o->json, "Write every round and the summary to this JSON file");
  cmd->add_flag("--quiet", o->quiet, "Print the summary line alone, not a line per round");
  return [o] {
    const twin::HostProbe p = twin::probe_host(o->threads, o->rounds, o->seconds);
    // The file first: where it cannot be written, the error alone.
    if (!o->json.empty()) schedule::write_file_atomic(o->json, p.to_json().dump(1) + "\n");
    if (!o->quiet) {
      std::printf("round  alone/s per thread     together/s per thread  cores delivered  steal  others\n");
      for (std::size_t r = 0; r < p.rounds.size(); ++r) {
        const auto& x = p.rounds[r];
        const auto list = [](const std::vector<double>& v) {
          std::string each;
          for (const double t : v) {
            char buf[32];
            std::snprintf(buf, sizeof buf, "%s%.0f", each.empty() ? "" : " ", t);
            each += buf;
          }
          return each;
        };
        std::printf("%5zu  %-22s  %-22s  %15.2f  %4.1f%%  %5.1f%%\n", r + 1, list(x.alone_per_s).c_str(),
                    list(x.together_per_s).c_str(), x.cores_delivered(), 100 * x.steal_share, 100 * x.other_share);
      }
    }
    std::printf("%s\n", p.summary().c_str());
    if ((p.short_rounds() > 0 || p.slow_alone() > 0) && p.steal_share() < 0.01) {
      std::printf("note: the CPUs' pace changed from round to round (alone %.2fx, %d round(s) together short of the "
                  "cores) while /proc/stat showed no steal: the host runs other work beside them that this guest cannot "
                  "see; timings here vary with it (runs of several ranks the most)\n",
                  p.alone_spread(), p.short_rounds());
    }
    return 0;
  };
}

}  // namespace pipetwin::cli
