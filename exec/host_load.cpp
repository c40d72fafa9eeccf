// Readings of a host's CPU counters, and what rank 0 makes of them.
#include "exec/host_load.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>

#include "schedule/error.hpp"
#include "schedule/stats.hpp"

namespace pipetwin::exec {
namespace {

std::string slurp(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

rusage own_usage() {
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return rusage{};
  return u;
}

double cpu_seconds(const rusage& u) {
  const auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

}  // namespace

HostWindow HostWindow::between(const HostSample& from, const HostSample& to) {
  return {to.total_s - from.total_s, to.busy_s - from.busy_s, to.steal_s - from.steal_s, to.own_cpu_s - from.own_cpu_s};
}

double HostWindow::other() const { return capacity_s > 0 ? std::max(0.0, busy_s - own_s) / capacity_s : 0; }

double HostWindow::steal() const { return capacity_s > 0 ? steal_s / capacity_s : 0; }

nlohmann::json HostSample::to_json() const {
  return {{"cpus", cpus}, {"busy_s", busy_s}, {"steal_s", steal_s}, {"total_s", total_s},
          {"own_cpu_s", own_cpu_s}, {"minor_faults", minor_faults}, {"load1", load1}, {"mhz", mhz}, {"tick_s", tick_s}};
}

HostSample HostSample::from_json(const nlohmann::json& j) {
  HostSample s;
  s.cpus = j.at("cpus").get<int>();
  s.busy_s = j.at("busy_s").get<double>();
  s.steal_s = j.at("steal_s").get<double>();
  s.total_s = j.at("total_s").get<double>();
  s.own_cpu_s = j.at("own_cpu_s").get<double>();
  s.minor_faults = j.value("minor_faults", 0.0);
  s.load1 = j.at("load1").get<double>();
  s.mhz = j.at("mhz").get<double>();
  s.tick_s = j.at("tick_s").get<double>();
  return s;
}

HostSample parse_host_sample(std::string_view proc_stat, std::string_view loadavg, std::string_view cpuinfo,
                             double own_cpu_s, double ticks_per_s) {
  HostSample s;
  s.own_cpu_s = own_cpu_s;
  s.tick_s = 1 / ticks_per_s;
  std::istringstream lines{std::string(proc_stat)};
  std::string line;
  bool aggregate = false;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu", 0) != 0) continue;
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    if (name != "cpu") {
      ++s.cpus;
      continue;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    double v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int read = 0;
    while (read < 8 && fields >> v[read]) ++read;
    if (read < 4) throw Error("/proc/stat: its 'cpu' line has " + std::to_string(read) + " counters, expected at least 4");
    s.busy_s = (v[0] + v[1] + v[2] + v[5] + v[6]) / ticks_per_s;
    s.steal_s = v[7] / ticks_per_s;
    s.total_s = (v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]) / ticks_per_s;
    aggregate = true;
  }
  if (!aggregate) throw Error("/proc/stat: no 'cpu' line");
  std::istringstream load{std::string(loadavg)};
  load >> s.load1;
  if (!load) s.load1 = 0;
  std::istringstream info{std::string(cpuinfo)};
  double sum = 0;
  int n = 0;
  while (std::getline(info, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    try {
      sum += std::stod(line.substr(colon + 1));
      ++n;
    } catch (const std::exception&) {
    }
  }
  s.mhz = n > 0 ? sum / n : 0;
  return s;
}

HostSample sample_host(bool with_clock) {
  const std::string stat = slurp("/proc/stat");
  if (stat.empty()) return {};
  try {
    const rusage u = own_usage();
    auto s = parse_host_sample(stat, slurp("/proc/loadavg"), with_clock ? slurp("/proc/cpuinfo") : "", cpu_seconds(u),
                               static_cast<double>(sysconf(_SC_CLK_TCK)));
    s.minor_faults = static_cast<double>(u.ru_minflt);
    return s;
  } catch (const Error&) {
    return {};  // a kernel that writes /proc/stat otherwise: the run goes on unmeasured
  }
}

nlohmann::json RunNoise::to_json() const {
  nlohmann::json hs = nlohmann::json::array();
  for (const auto& h : hosts) {
    hs.push_back({{"host", h.host}, {"ranks", h.ranks}, {"cpus", h.cpus}, {"capacity_s", h.capacity_s},
                  {"ranks_share", h.ranks_share}, {"other_share", h.other_share}, {"steal_share", h.steal_share},
                  {"share_resolution", h.share_resolution},
                  {"load1_start", h.load1_start}, {"load1_end", h.load1_end}, {"mhz_min", h.mhz_min},
                  {"mhz_max", h.mhz_max}, {"faults_per_step", h.faults_per_step}, {"step_other_share", h.step_other_share},
                  {"step_steal_share", h.step_steal_share}});
  }
  return {{"hosts", hs},
          {"first_counted_step", first_counted_step},
          {"counted_steps", counted_steps},
          {"other_share", other_share},
          {"steal_share", steal_share},
          {"share_resolution", share_resolution},
          {"step_median_s", step_median_s},
          {"step_min_s", step_min_s},
          {"step_max_s", step_max_s},
          {"step_mad_s", step_mad_s},
          {"median_uncertainty_rel", median_uncertainty_rel},
          {"step_compute_cpu_s", step_compute_cpu_s},
          {"compute_cpu_median_s", compute_cpu_median_s},
          {"compute_cpu_mad_s", compute_cpu_mad_s}};
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

namespace {

// The ranks' compute CPU time per step, summed, with its median and MAD over
// the counted steps: only where every rank measured every step.
void add_compute_cpu(RunNoise& out, const std::vector<std::vector<double>>& compute_cpu_s, int steps) {
  const auto every_step = [&](const auto& c) { return static_cast<int>(c.size()) == steps; };
  if (steps == 0 || compute_cpu_s.empty() || !std::all_of(compute_cpu_s.begin(), compute_cpu_s.end(), every_step)) return;
  out.step_compute_cpu_s.assign(steps, 0.0);
  for (const auto& c : compute_cpu_s) {
    for (int s = 0; s < steps; ++s) out.step_compute_cpu_s[s] += c[s];
  }
  const std::vector<double> cpu(out.step_compute_cpu_s.begin() + out.first_counted_step, out.step_compute_cpu_s.end());
  if (cpu.empty()) return;
  out.compute_cpu_median_s = schedule::median(cpu);
  out.compute_cpu_mad_s = schedule::mad(cpu, out.compute_cpu_median_s);
}

}  // namespace

int warmup_steps(int steps) { return steps >= 5 ? 2 : steps > 1 ? 1 : 0; }

RunNoise measure_noise(const std::vector<std::vector<HostSample>>& samples, const std::vector<std::string>& hosts,
                       const std::vector<double>& step_times_s,
                       const std::vector<std::vector<double>>& compute_cpu_s) {
  RunNoise out;
  const int steps = static_cast<int>(step_times_s.size());
  out.first_counted_step = warmup_steps(steps);
  out.counted_steps = steps - out.first_counted_step;
  std::vector<double> counted(step_times_s.begin() + out.first_counted_step, step_times_s.end());
  if (!counted.empty()) {
    out.step_median_s = schedule::median(counted);
    out.step_min_s = *std::min_element(counted.begin(), counted.end());
    out.step_max_s = *std::max_element(counted.begin(), counted.end());
    out.step_mad_s = schedule::mad(counted, out.step_median_s);
    out.median_uncertainty_rel = schedule::median_half_width_rel(1.96, out.step_mad_s, out.step_median_s, counted.size());
  }
  std::map<std::string, std::vector<int>> ranks_of;  // host -> ranks with readings, in rank order
  for (std::size_t r = 0; r < samples.size(); ++r) {
    if (samples[r].empty() || samples[r].front().cpus == 0) continue;
    if (static_cast<int>(samples[r].size()) != steps + 1) {
      throw Error("rank " + std::to_string(r) + " reported " + std::to_string(samples[r].size()) +
                  " host readings for " + std::to_string(steps) + " steps (expected " + std::to_string(steps + 1) + ")");
    }
    ranks_of[hosts.at(r)].push_back(static_cast<int>(r));
  }
  const auto window = [&](const std::vector<int>& ranks, int from, int to) {
    const auto& first = samples[ranks.front()];
    // Shares of the host's capacity between two readings of its first rank,
    // the ranks' own CPU time between their own two readings.
    HostWindow w = HostWindow::between(first[from], first[to]);
    w.own_s = 0;
    for (const int r : ranks) w.own_s += samples[r][to].own_cpu_s - samples[r][from].own_cpu_s;
    return w;
  };
  for (const auto& [host, ranks] : ranks_of) {
    HostLoad h;
    h.host = host;
    h.ranks = static_cast<int>(ranks.size());
    const auto& first = samples[ranks.front()];
    h.cpus = first.front().cpus;
    const HostWindow run = window(ranks, out.first_counted_step, steps);
    h.capacity_s = run.capacity_s;
    h.ranks_share = run.capacity_s > 0 ? run.own_s / run.capacity_s : 0;
    h.other_share = run.other();
    h.steal_share = run.steal();
    h.share_resolution = run.capacity_s > 0 ? 2.0 * h.cpus * first.front().tick_s / run.capacity_s : 1.0;
    if (out.counted_steps > 0) {
      for (const int r : ranks) h.faults_per_step += samples[r][steps].minor_faults - samples[r][out.first_counted_step].minor_faults;
      h.faults_per_step /= out.counted_steps;
    }
    h.load1_start = first[out.first_counted_step].load1;
    h.load1_end = first.back().load1;
    for (const auto& s : first) {
      if (s.mhz <= 0) continue;  // not read (between steps) or not shown
      h.mhz_min = h.mhz_min > 0 ? std::min(h.mhz_min, s.mhz) : s.mhz;
      h.mhz_max = std::max(h.mhz_max, s.mhz);
    }
    for (int s = 0; s < steps; ++s) {
      const HostWindow w = window(ranks, s, s + 1);
      h.step_other_share.push_back(w.other());
      h.step_steal_share.push_back(w.steal());
    }
    out.other_share = std::max(out.other_share, h.other_share);
    out.steal_share = std::max(out.steal_share, h.steal_share);
    out.share_resolution = std::max(out.share_resolution, h.share_resolution);
    out.hosts.push_back(std::move(h));
  }
  add_compute_cpu(out, compute_cpu_s, steps);
  return out;
}

}  // namespace pipetwin::exec
