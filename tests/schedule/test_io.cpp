// File formats: PyTorch CSV import (compute-only with bubbles, and with
// communication), errors that name file and line or field, atomic writes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "schedule/error.hpp"
#include "schedule/generators.hpp"
#include "schedule/io.hpp"
#include "schedule/passes.hpp"
#include "schedule/validate.hpp"

namespace ps = pipetwin::schedule;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const pipetwin::Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(Csv, ImportsATorchComputeOnlyScheduleWithBubbles) {
  // As torch.distributed.pipelining's _dump_csv writes a compute-only 1F1B
  // order: empty cells are bubbles.
  const std::string csv =
      "0F0,0F1,,0B0,,0B1\n"
      ",1F0,1B0,1F1,1B1,\n";
  const auto p = ps::parse_csv(csv, "torch.csv");
  EXPECT_EQ(p.num_ranks, 2);
  EXPECT_EQ(p.num_microbatches, 2);
  EXPECT_EQ(p.ranks[0].size(), 4u);
  const auto report = ps::validate(p);
  EXPECT_TRUE(report.lowered);
  EXPECT_DOUBLE_EQ(report.dry_run.timeline.makespan(), 6);
}

// FSDP's UNSHARD and RESHARD are kept where they stand, in every format.
TEST(Csv, ImportsAScheduleWithCommunicationAndKeepsFsdpActions) {
  const auto p = ps::build_schedule("1f1b", {2, 3});
  std::string csv = ps::to_csv(p);
  csv.insert(0, "0UNSHARD,");
  csv.insert(csv.find('\n'), ",0RESHARD");
  const auto q = ps::parse_csv(csv, "comms.csv");
  ASSERT_EQ(q.ranks[0].size(), p.ranks[0].size() + 2);
  EXPECT_EQ(q.ranks[0].front(), ps::make_stage_action(ps::Op::UNSHARD, 0));
  EXPECT_EQ(q.ranks[0].back(), ps::make_stage_action(ps::Op::RESHARD, 0));
  EXPECT_EQ(std::vector<ps::Action>(q.ranks[0].begin() + 1, q.ranks[0].end() - 1), p.ranks[0]);
  EXPECT_EQ(q.ranks[1], p.ranks[1]);
  EXPECT_FALSE(ps::validate(q).lowered);
  EXPECT_EQ(ps::parse_text(ps::to_text(q), "q.txt").ranks, q.ranks);
  EXPECT_EQ(ps::parse_json(ps::to_json(q), "q.json").ranks, q.ranks);
  const std::string torch = ps::to_pytorch_csv(q);  // without the STEPs, which PyTorch's CSV has not
  EXPECT_EQ(torch.rfind("0UNSHARD,0F0,", 0), 0u) << torch;
  EXPECT_NE(torch.find(",0B2,0RESHARD\n"), std::string::npos) << torch;
}

// PyTorch's compound action stays one in the IR: its second half marked
// overlapped, written back as it came in every format; UNSHARD/RESHARD and
// REDUCE_GRAD are kept and said, and a malformed compound names the cell.
TEST(Csv, OverlapFBStaysOneActionAndEveryNoOpIsSaid) {
  std::vector<std::string> notes;
  const auto p = ps::parse_csv("0UNSHARD,0F0,0F1,(0F2;1B0)OVERLAP_F_B,0B1,0B2,1F0,1B1,1F1,1F2,1B2,0REDUCE_GRAD,0RESHARD\n", "ov.csv",
                               &notes);
  ASSERT_EQ(p.num_ranks, 1);
  std::string row;
  for (const auto& a : p.ranks[0]) row += ps::to_string(a) + (a.overlapped ? "* " : " ");
  EXPECT_EQ(row, "0UNSHARD 0F0 0F1 0F2 1B0* 0B1 0B2 1F0 1B1 1F1 1F2 1B2 0REDUCE_GRAD 0RESHARD ");
  EXPECT_EQ(ps::to_cells(p.ranks[0])[3], "(0F2;1B0)OVERLAP_F_B");
  EXPECT_EQ(ps::to_csv(p), "0UNSHARD,0F0,0F1,(0F2;1B0)OVERLAP_F_B,0B1,0B2,1F0,1B1,1F1,1F2,1B2,0REDUCE_GRAD,0RESHARD\n");
  EXPECT_EQ(ps::parse_text(ps::to_text(p), "ov.txt").ranks, p.ranks);
  EXPECT_EQ(ps::parse_json(ps::to_json(p), "ov.json").ranks, p.ranks);
  EXPECT_EQ(ps::parse_csv(ps::to_pytorch_csv(p), "ov2.csv").ranks, p.ranks);
  ASSERT_EQ(notes.size(), 3u);
  EXPECT_NE(notes[0].find("1 OVERLAP_F_B: kept as overlapped actions; the executor runs each one's sub-actions one after "
                          "the other"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find("2 UNSHARD/RESHARD (FSDP): kept"), std::string::npos) << notes[1];
  EXPECT_NE(notes[2].find("1 REDUCE_GRAD: no-ops in time for one replica"), std::string::npos) << notes[2];
  EXPECT_EQ(error_of([] { ps::parse_csv("0F0,(0F1;0B0\n", "a.csv"); }),
            "a.csv:1: column 2: invalid action '(0F1;0B0': expected (<action>;<action>)OVERLAP_F_B");
  EXPECT_EQ(error_of([] { ps::parse_csv("0F0,(0F1;0SEND_F1)OVERLAP_F_B\n", "b.csv"); }),
            "b.csv:1: column 2: OVERLAP_F_B holds 0SEND_F1: its sub-actions are forwards and backwards (F, B, I, W)");
  EXPECT_EQ(error_of([] { ps::parse_csv("(0F1)OVERLAP_F_B\n", "c.csv"); }),
            "c.csv:1: column 1: OVERLAP_F_B '(0F1)OVERLAP_F_B' holds 1 action, expected two or more");
  EXPECT_EQ(error_of([] { ps::parse_text("rank 0: 0F0 (0F1;;0B0)OVERLAP_F_B\n", "e.txt"); }),
            "e.txt:1: invalid action '': expected <stage><op>[<micro-batch>], e.g. 2F0 or 3SEND_F1, in "
            "'(0F1;;0B0)OVERLAP_F_B'");
  EXPECT_EQ(error_of([] { ps::parse_text("rank 0: 0F0 (0F1;0X0)OVERLAP_F_B\n", "d.txt"); }).substr(0, 40),
            "d.txt:1: invalid action '0X0': unknown o");
}

// The passes keep an OVERLAP_F_B whole: its receives before it, its sends
// and its recompute around it, never between its halves; a mark that is not
// on a forward or backward beside another is refused, naming the action.
TEST(Passes, KeepAnOverlapWhole) {
  auto p = ps::generate("dualpipe-v", {2, 4});
  p.recompute = ps::RecomputePolicy::Full;
  p.data_parallel = 2;
  const auto lowered = ps::insert_gradient_reductions(ps::lower(p));
  int groups = 0;
  for (const auto& actions : lowered.ranks) {
    for (std::size_t i = 0; i < actions.size(); ++i) {
      if (!actions[i].overlapped) continue;
      ++groups;
      EXPECT_EQ(actions[i - 1].op, ps::Op::F) << ps::to_string(actions[i]);
      EXPECT_EQ(actions[i].op, ps::Op::B) << ps::to_string(actions[i]);
    }
  }
  EXPECT_EQ(groups, 2 * 4 - 3 * 2 + 1 + (2 * 4 - 3 * 2 + 2 - 1));  // 2M - 3K + r + 1, less one on the last rank
  EXPECT_NO_THROW(ps::validate(lowered));
  auto bad = ps::generate("dualpipe-v", {2, 4});
  bad.ranks[0][0].overlapped = true;
  EXPECT_NE(error_of([&] { ps::validate(bad); }).find("rank 0, step 0: 0F0 is marked overlapped but is its rank's first action"),
            std::string::npos) << error_of([&] { ps::validate(bad); });
  bad = ps::lower(ps::generate("dualpipe-v", {2, 4}));
  for (auto& a : bad.ranks[1]) {
    if (a.op == ps::Op::SEND_F) {
      a.overlapped = true;
      break;
    }
  }
  EXPECT_NE(error_of([&] { ps::validate(bad); }).find("is marked overlapped: only F, B, I and W run in an OVERLAP_F_B"),
            std::string::npos) << error_of([&] { ps::validate(bad); });
}

TEST(Csv, InfersTheInterleavedStageMap) {
  const auto p = ps::build_schedule("interleaved-1f1b", {2, 4, 2});
  const auto q = ps::parse_csv(ps::to_csv(p), "il.csv");
  EXPECT_EQ(q.stages_per_rank, 2);
  EXPECT_EQ(q.stage_to_rank, p.stage_to_rank);
}

TEST(Csv, InfersTheRecomputePolicy) {
  for (auto policy : {ps::RecomputePolicy::None, ps::RecomputePolicy::Full, ps::RecomputePolicy::ExceptLast}) {
    const auto p = ps::build_schedule("gpipe", {2, 4, 1, policy});
    EXPECT_EQ(ps::parse_csv(ps::to_csv(p), "r.csv").recompute, policy);
  }
}

TEST(Csv, BadCellNamesFileLineAndColumn) {
  const std::string msg = error_of([] { ps::parse_csv("0F0,0B0\n1F0,1Q0\n", "bad.csv"); });
  EXPECT_NE(msg.find("bad.csv:2: column 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'1Q0'"), std::string::npos) << msg;
}

TEST(Text, ErrorsNameFileAndLine) {
  EXPECT_NE(error_of([] { ps::parse_text("ranks 2\nranks two\n", "s.txt"); }).find("s.txt:2: 'two' is not an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { ps::parse_text("ranks 1\nrank 0: 0F0 0X0\n", "s.txt"); }).find("s.txt:2:"),
            std::string::npos);
  EXPECT_NE(error_of([] { ps::parse_text("bogus 3\n", "s.txt"); }).find("s.txt:1: unknown line 'bogus'"),
            std::string::npos);
  EXPECT_NE(error_of([] { ps::parse_text("rank 1: 1F0\n", "s.txt"); }).find("expected rank 0"), std::string::npos);
  EXPECT_NE(error_of([] { ps::parse_text("recompute sometimes\nrank 0: 0F0 0B0\n", "s.txt"); }).find("s.txt:1:"),
            std::string::npos);
}

TEST(Text, LinesOfOtherWhitespaceAreBlank) {
  // Found by fuzz_schedule_text: a line holding only a vertical tab.
  const auto p = ps::parse_text("\v\nrank 0: 0F0 0B0\n\f \n", "ws.txt");
  EXPECT_EQ(p.ranks.size(), 1u);
}

TEST(Csv, AStagePastTheLimitIsRefusedBeforeAnythingIsSized) {
  // Found by fuzz_schedule_csv: one row naming stage 777777777 made the reader
  // size a stage map of 777777778 entries (seconds and gigabytes) before
  // finding that the other stages appear on no rank.
  EXPECT_NE(error_of([] { ps::parse_csv("0F01,2B0,777777777F01\n", "big.csv"); })
                .find("big.csv: 1 ranks x 777777778 stages per rank is more than the 1000000 stages"),
            std::string::npos);
  EXPECT_NE(error_of([] { ps::parse_text("ranks 2\nstages_per_rank 2000000000\nrank 0: 0F0\nrank 1: 1F0\n", "big.txt"); })
                .find("big.txt: 2 ranks x 2000000000 stages per rank is more than"),
            std::string::npos);
}

TEST(Text, ANegativeStageCountIsAnError) {
  // Found by fuzz_schedule_text: 'stages_per_rank -1' sized the stage map with
  // -4 (std::length_error, not a pipetwin error).
  EXPECT_NE(error_of([] { ps::parse_text("stages_per_rank -1\nrank 0: 0F0 0B0\nrank 1: 1F0 1B0\n", "neg.txt"); })
                .find("neg.txt: stages per rank must be at least 1, got -1"),
            std::string::npos);
}

TEST(Json, NumbersPastTheirRangeAreErrors) {
  // Found by fuzz_schedule_json: a number too large for a double made
  // nlohmann::json throw out_of_range, which escaped as another exception.
  EXPECT_NE(error_of([] { ps::parse_json("404e0404e4", "n.json"); }).find("n.json: not valid JSON"), std::string::npos);
  auto j = ps::to_json(ps::build_schedule("gpipe", {2, 2}));
  const auto wrapped = std::string(j).replace(j.find("\"ranks\": 2"), 10, "\"ranks\": 4294967298");  // 2^32 + 2
  EXPECT_NE(error_of([&] { ps::parse_json(wrapped, "p.json"); }).find("field 'ranks' must be an integer (32 bits)"),
            std::string::npos);
  const auto huge = std::string(j).replace(j.find("\"stages_per_rank\": 1"), 20, "\"stages_per_rank\": 1500000000");
  EXPECT_NE(error_of([&] { ps::parse_json(huge, "p.json"); }).find("'ranks' x 'stages_per_rank' make more than"),
            std::string::npos);
  EXPECT_NE(error_of([] { ps::parse_json("{\"format\": 7}", "f.json"); }).find("f.json: field 'format'"), std::string::npos);
}

TEST(Json, ErrorsNameTheField) {
  EXPECT_NE(error_of([] { ps::parse_json("{", "p.json"); }).find("p.json: not valid JSON"), std::string::npos);
  auto j = ps::to_json(ps::build_schedule("gpipe", {2, 2}));
  const auto bad_ranks = std::string(j).replace(j.find("\"ranks\": 2"), 10, "\"ranks\": \"2\"");
  EXPECT_NE(error_of([&] { ps::parse_json(bad_ranks, "p.json"); }).find("field 'ranks' must be an integer"),
            std::string::npos);
  const auto bad_action = std::string(j).replace(j.find("\"0F0\""), 5, "\"0Z0\"");
  EXPECT_NE(error_of([&] { ps::parse_json(bad_action, "p.json"); }).find("field 'actions[0][0]'"), std::string::npos);
}

TEST(Files, ReadProgramDetectsTheFormatAndWritesAreAtomic) {
  const auto dir = std::filesystem::temp_directory_path() / ("pipetwin_io_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto p = ps::build_schedule("zb-h1", {3, 5});
  for (auto format : {ps::Format::Text, ps::Format::Csv, ps::Format::Json}) {
    const auto path = (dir / "s").string();
    ps::write_file_atomic(path, ps::format_program(p, format));
    auto q = ps::read_program(path);
    EXPECT_EQ(q.ranks, p.ranks);
  }
  // No temporary is left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);
  EXPECT_NE(error_of([&] { ps::read_program((dir / "missing").string()); }).find("cannot open"), std::string::npos);
  ps::write_file_atomic((dir / "empty").string(), "\n");
  EXPECT_NE(error_of([&] { ps::read_program((dir / "empty").string()); }).find("empty file"), std::string::npos);
  EXPECT_THROW(ps::write_file_atomic((dir / "no/such/dir/f").string(), "x"), pipetwin::Error);
  std::filesystem::remove_all(dir);
}

TEST(Io, AtomicWritesFollowLinksAndLeaveDevicesAndFoldersAlone) {
  const auto dir = std::filesystem::temp_directory_path() / ("pipetwin-io-links-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "sub");
  const auto slurp = [](const std::filesystem::path& p) { return ps::read_file(p.string()); };
  // A link (relative, into a subfolder) stays a link; its target gets the text,
  // also when the target does not exist yet.
  std::filesystem::create_symlink("sub/real.txt", dir / "link.txt");
  ps::write_file_atomic((dir / "link.txt").string(), "first\n");
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.txt"));
  EXPECT_EQ(slurp(dir / "sub" / "real.txt"), "first\n");
  ps::write_file_atomic((dir / "link.txt").string(), "second\n");
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.txt"));
  EXPECT_EQ(slurp(dir / "sub" / "real.txt"), "second\n");
  // A device is written in place: /dev/null stays a character device, also
  // through a link to it.
  ps::write_file_atomic("/dev/null", "nothing\n");
  std::filesystem::create_symlink("/dev/null", dir / "null");
  ps::write_file_atomic((dir / "null").string(), "nothing\n");
  EXPECT_TRUE(std::filesystem::is_character_file("/dev/null"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "null"));
  // A full device's failure is an error naming the path, not a silent success.
  if (std::filesystem::is_character_file("/dev/full")) {
    EXPECT_NE(error_of([] { ps::write_file_atomic("/dev/full", std::string(1 << 16, 'x')); }).find("/dev/full: write failed"),
              std::string::npos);
    EXPECT_TRUE(std::filesystem::is_character_file("/dev/full"));
  }
  // A folder is refused naming it.
  EXPECT_NE(error_of([&] { ps::write_file_atomic((dir / "sub").string(), "x"); }).find("is a folder"), std::string::npos);
  // Nothing else was left: the link, the null link, the folder and its file.
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::recursive_directory_iterator(dir)) ++entries;
  EXPECT_EQ(entries, 4);
  std::filesystem::remove_all(dir);
}
