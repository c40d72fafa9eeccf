// Writes the seed corpora of the schedule and trace harnesses into the given
// directory: every generator's program in the three formats (compute-only and
// lowered), and the dry-run timelines of some of them as Chrome traces. The
// YAML harnesses are seeded straight from examples/. Used by scripts/sanitize.sh.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "schedule/dry_run.hpp"
#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/trace.hpp"

namespace ps = pipetwin::schedule;
namespace fs = std::filesystem;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR (writes OUT_DIR/{schedule_text,schedule_csv,schedule_json,trace}/)\n", argv[0]);
    return 2;
  }
  const fs::path out = argv[1];
  try {
    for (const char* d : {"schedule_text", "schedule_csv", "schedule_json", "trace"}) fs::create_directories(out / d);
    struct Shape {
      int k, m, v;
      ps::RecomputePolicy recompute;
    };
    const Shape shapes[] = {{2, 2, 2, ps::RecomputePolicy::None}, {2, 4, 2, ps::RecomputePolicy::Full},
                            {4, 8, 2, ps::RecomputePolicy::ExceptLast}};
    int written = 0;
    for (const auto& g : ps::generators()) {
      for (const auto& s : shapes) {
        const int v = g.virtual_stages ? s.v : std::max(1, g.fixed_stages_per_rank);  // zb-v: its own 2
        const ps::GeneratorOptions options{s.k, s.m, v, s.recompute};
        const std::string base = std::string(g.name) + "_k" + std::to_string(s.k) + "_m" + std::to_string(s.m) + "_v" +
                                 std::to_string(v) + "_" + std::string(ps::recompute_name(s.recompute));
        ps::Program compute;
        try {
          compute = ps::generate(g.name, options);
        } catch (const pipetwin::Error&) {
          continue;  // a shape this generator does not take
        }
        const auto lowered = ps::lower(compute);
        for (const auto& [program, suffix] : {std::pair<const ps::Program*, const char*>{&compute, "_compute"}, {&lowered, ""}}) {
          ps::write_file_atomic((out / "schedule_text" / (base + suffix + ".txt")).string(), ps::to_text(*program));
          ps::write_file_atomic((out / "schedule_csv" / (base + suffix + ".csv")).string(), ps::to_csv(*program));
          ps::write_file_atomic((out / "schedule_json" / (base + suffix + ".json")).string(), ps::to_json(*program));
          written += 3;
        }
        ps::OpDurations durations;
        durations.transfer = 0.25;
        durations.step = 0.5;
        const auto run = ps::dry_run(lowered, durations);
        ps::Trace trace{run.timeline, {{"producer", "make_seeds"}, {"schedule", std::string(g.name)}}, {}};
        trace.counters.push_back({"stage 0 memory (GB)", 0, 0.0, 1.5});
        trace.counters.push_back({"stage 0 memory (GB)", 0, 1.0, 2.5});
        ps::write_chrome_trace((out / "trace" / (base + ".json")).string(), trace);
        ++written;
      }
    }
    if (written < 20) {
      std::fprintf(stderr, "make_seeds: only %d seed files written\n", written);
      return 1;
    }
    std::printf("%d seed files under %s\n", written, out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
}
