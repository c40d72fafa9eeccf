// probe_host: whether this host gives its processes the cores it shows, the
// same kernel timed on each CPU alone and on all at once (exec/core_probe.hpp,
// torch-free).
#pragma once

#include "exec/core_probe.hpp"

namespace pipetwin::twin {

using HostProbe = exec::CoreProbe;

// `threads` 0: the host's CPUs, as /proc/stat counts them. Throws
// pipetwin::Error where they cannot be counted.
HostProbe probe_host(int threads, int rounds, double seconds);

}  // namespace pipetwin::twin
