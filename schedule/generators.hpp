// Schedule generators: compute-only Programs (F, B, I, W), looked up by name.
// The passes (passes.hpp) turn them into complete Programs.
#pragma once

#include <string_view>
#include <vector>

#include "schedule/program.hpp"

namespace pipetwin::schedule {

struct GeneratorOptions {
  int ranks = 1;            // K
  int microbatches = 1;     // M
  int stages_per_rank = 1;  // V (the generators with virtual_stages; zb-v takes 1, meaning not given, or its own 2)
  RecomputePolicy recompute = RecomputePolicy::None;
};

using GeneratorFn = Program (*)(const GeneratorOptions&);

struct GeneratorInfo {
  std::string_view name;
  std::string_view summary;
  bool virtual_stages;  // accepts any V >= 2 (--virtual)
  GeneratorFn fn;
  // What `pipetwin schedule --list` says of it: its shape constraints, and its
  // bubble and stash in closed form on uniform stages with free transfers
  // (each checked against the simulator in tests/sim/test_simulator.cpp).
  std::string_view constraints;
  std::string_view bubble;
  std::string_view memory;
  // > 0: the generator always makes this many stages per rank, whatever V it
  // is given; V may be left at 1 (not given) or name this number.
  int fixed_stages_per_rank = 0;
};

const std::vector<GeneratorInfo>& generators();

// The compute-only program of generator `name`; throws pipetwin::Error for an
// unknown name (listing the valid ones) or an impossible shape.
Program generate(std::string_view name, const GeneratorOptions& options);

// generate() followed by lower(): the complete program, ready to validate,
// simulate or run.
Program build_schedule(std::string_view name, const GeneratorOptions& options);

// The generators themselves (one file each under generators/).
Program generate_gpipe(const GeneratorOptions& options);
Program generate_1f1b(const GeneratorOptions& options);
Program generate_interleaved_1f1b(const GeneratorOptions& options);
Program generate_combined_1f1b(const GeneratorOptions& options);
Program generate_zb_h1(const GeneratorOptions& options);
Program generate_zb_h2(const GeneratorOptions& options);
Program generate_zb_v(const GeneratorOptions& options);
Program generate_dualpipe_v(const GeneratorOptions& options);
Program generate_pipedream(const GeneratorOptions& options);
Program generate_interleaved_zb(const GeneratorOptions& options);
Program generate_looped_bfs(const GeneratorOptions& options);
Program generate_v_half(const GeneratorOptions& options);
Program generate_v_min(const GeneratorOptions& options);

// The loop of the zero-bubble H schedules (zb-h1, zb-h2; generators/zb_h1.cpp):
// rank r warms up with min(warmup(K, r), M) forwards, then per micro-batch j
// runs I of j, the W of j - deferral(K, r) once there is one, and the next F
// while any is left; the Ws still deferred close it.
Program zero_bubble_h(std::string name, const GeneratorOptions& options, int (*warmup)(int K, int r),
                      int (*deferral)(int K, int r));

}  // namespace pipetwin::schedule
