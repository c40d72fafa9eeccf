// What a measured run recorded beside its timeline (otherData.measured), read
// into its TraceRun: the parts of trace_run_from() that only measured traces
// have. Internal to calibration/; recorded_bubble() is in traces.hpp.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "calibration/traces.hpp"

namespace pipetwin::calibration {

// What a measured run recorded of each rank (otherData.measured.ranks):
// threads, the host's usable cores, the host, the clock's uncertainty.
// The K pipeline ranks' entries: measured.ranks lists K of them, or every one
// of the T x K x D processes, by process (pipeline rank k's first is T·D·k:
// the replica 0, tensor member 0 of that rank).
void read_measured_ranks(const nlohmann::json& meta, const std::string& path, int K, TraceRun& run);

// measured.ranks[].tp_collective_s (T > 1): per pipeline rank, its members'
// mean at the trace's step; left empty unless every rank has one.
void read_tensor_collectives(const nlohmann::json& meta, const std::string& path, int K, TraceRun& run);

// measured.ranks[].all_to_all (E > 1) and .all_gather (ZeRO-1): each
// process's records at the trace's step.
void read_exchanges(const nlohmann::json& meta, const std::string& path, TraceRun& run);

}  // namespace pipetwin::calibration
