// probe_host: the thread count settled, then the probe.
#include "twin/probe.hpp"

#include "schedule/error.hpp"

namespace pipetwin::twin {

HostProbe probe_host(int threads, int rounds, double seconds) {
  if (threads == 0) {
    threads = exec::host_cpus();
    if (threads < 1) throw Error("probe: this host has no /proc/stat to count its CPUs: give --threads N");
  }
  return exec::probe_cores(threads, rounds, seconds);
}

}  // namespace pipetwin::twin
