// Golden files for a few schedules, in the text form. Regenerate them only on
// purpose: PIPETWIN_UPDATE_GOLDEN=1 ctest -R golden
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "schedule/generators.hpp"
#include "schedule/io.hpp"

namespace ps = pipetwin::schedule;

namespace {

struct Golden {
  std::string file, name;
  ps::GeneratorOptions options;
};

void PrintTo(const Golden& g, std::ostream* os) { *os << g.file; }

class GoldenSchedule : public ::testing::TestWithParam<Golden> {};

}  // namespace

TEST_P(GoldenSchedule, MatchesTheCheckedInFile) {
  const auto& g = GetParam();
  const std::string path = std::string(PIPETWIN_GOLDEN_DIR) + "/" + g.file;
  const std::string actual = ps::to_text(ps::build_schedule(g.name, g.options));
  if (const char* update = std::getenv("PIPETWIN_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    ps::write_file_atomic(path, actual);
    GTEST_SKIP() << "rewrote " << path;
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing; run with PIPETWIN_UPDATE_GOLDEN=1";
  EXPECT_EQ(ps::read_file(path), actual) << "schedule " << g.name << " changed; if on purpose, regenerate with "
                                         << "PIPETWIN_UPDATE_GOLDEN=1";
}

INSTANTIATE_TEST_SUITE_P(
    Schedules, GoldenSchedule,
    ::testing::Values(Golden{"gpipe_k4_m4.txt", "gpipe", {4, 4}},
                      Golden{"1f1b_k4_m8.txt", "1f1b", {4, 8}},
                      Golden{"1f1b_k2_m4_recompute_full.txt", "1f1b", {2, 4, 1, ps::RecomputePolicy::Full}},
                      Golden{"interleaved_1f1b_k2_m4_v2.txt", "interleaved-1f1b", {2, 4, 2}},
                      Golden{"zb_h1_k4_m8.txt", "zb-h1", {4, 8}},
                      Golden{"zb_h2_k4_m8.txt", "zb-h2", {4, 8}},
                      Golden{"zb_v_k4_m8.txt", "zb-v", {4, 8}},
                      Golden{"pipedream_k3_m6.txt", "pipedream", {3, 6}},
                      Golden{"v_half_k4_m8.txt", "v-half", {4, 8}},
                      Golden{"v_min_k4_m8.txt", "v-min", {4, 8}}),
    [](const auto& info) {
      std::string n = info.param.file.substr(0, info.param.file.size() - 4);
      return n;
    });
