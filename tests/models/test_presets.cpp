// Hardware presets as files: every file of presets/ (the build's glob, so a
// new one is covered without touching this test) loads, is the one embedded,
// and is complete; a user's folder (PIPETWIN_PRESETS) is searched first, and
// its malformed files are refused naming the file and the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>

#include "models/presets.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pm = pipetwin::models;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= s.size()) {
    const std::size_t end = std::min(s.find(sep, begin), s.size());
    if (end > begin) out.push_back(s.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// PIPETWIN_PRESETS set for the test's duration.
class PresetsEnv {
 public:
  explicit PresetsEnv(const std::string& value) {
    if (const char* v = std::getenv(pm::kPresetsEnv)) old_ = v;
    ::setenv(pm::kPresetsEnv, value.c_str(), 1);
  }
  ~PresetsEnv() {
    if (old_) ::setenv(pm::kPresetsEnv, old_->c_str(), 1);
    else ::unsetenv(pm::kPresetsEnv);
  }

 private:
  std::optional<std::string> old_;
};

class UserPresets : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pipetwin_presets_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "first");
    fs::create_directories(dir_ / "second");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& folder, const std::string& name, const std::string& text) const {
    const auto p = (dir_ / folder / name).string();
    pipetwin::schedule::write_file_atomic(p, text);
    return p;
  }
  std::string folder(const std::string& name) const { return (dir_ / name).string(); }
  // The error preset(name) throws.
  static std::string error_of(const std::string& name) {
    try {
      (void)pm::preset(name);
    } catch (const pipetwin::Error& e) {
      return e.what();
    }
    return "(no error)";
  }
  fs::path dir_;
};

bool same(const pm::Hardware& a, const pm::Hardware& b) {
  return a.name == b.name && a.source == b.source && a.device == b.device && a.topology == b.topology &&
         a.devices == b.devices;
}

}  // namespace

TEST(PresetFiles, EveryFileLoadsCompleteAndIsTheOneEmbedded) {
  const auto files = split(PIPETWIN_PRESET_FILES, '|');
  ASSERT_GE(files.size(), 14u);
  std::set<std::string> names;
  for (const auto& path : files) {
    const std::string name = fs::path(path).stem().string();
    SCOPED_TRACE(path);
    names.insert(name);
    const pm::Hardware h = pm::load_preset_file({name, pm::PresetOrigin::Folder, path, {}});
    EXPECT_EQ(h.name, name);
    EXPECT_GT(h.source.size(), 20u) << "a preset says where its figures come from (source:)";
    EXPECT_GT(h.device.peak_flops_fp32, 0);
    EXPECT_GE(h.device.peak_flops_half, h.device.peak_flops_fp32);
    EXPECT_GT(h.device.memory_bytes, 0);
    EXPECT_GT(h.topology.intra.bandwidth, 0);
    EXPECT_TRUE(h.device.kinds.empty()) << "calibrated curves belong to a calibrated profile, not to a preset";
    // The embedded text is the file's, and loads to the same hardware.
    const auto embedded = pm::preset_candidates(name);
    ASSERT_EQ(embedded.size(), 1u);
    EXPECT_EQ(embedded[0].origin, pm::PresetOrigin::Embedded);
    EXPECT_EQ(std::string(embedded[0].embedded), pipetwin::schedule::read_file(path));
    EXPECT_TRUE(same(pm::preset(name), h));
    EXPECT_TRUE(same(pm::load_hardware(name), h));
  }
  // The build's list is the folder's (a file added since the build is picked
  // up by the next build's glob), and the embedded ones are exactly those.
  std::set<std::string> on_disk, built_in;
  for (const auto& e : fs::directory_iterator(PIPETWIN_PRESETS_DIR)) {
    if (e.path().extension() == ".yaml") on_disk.insert(e.path().stem().string());
  }
  for (const auto& e : pm::embedded_presets()) built_in.insert(std::string(e.name));
  EXPECT_EQ(names, on_disk);
  EXPECT_EQ(names, built_in);
  const auto listed = pm::preset_names();
  EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()), names);
}

TEST(PresetFiles, AnUnknownPresetListsTheKnownOnes) {
  try {
    (void)pm::preset("b200");
    FAIL() << "no error";
  } catch (const pipetwin::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("unknown hardware preset 'b200'"), std::string::npos) << what;
    for (const auto& name : pm::preset_names()) EXPECT_NE(what.find(name), std::string::npos) << name;
  }
}

TEST_F(UserPresets, AUserFileWinsAndMayStartFromTheEmbeddedOne) {
  write("first", "a100.yaml", "preset: a100\nname: a100\ndevice:\n  memory_gb: 40\n");  // the embedded a100, changed
  write("first", "b200.yaml",
        "name: b200\nsource: a made-up part\ndevice: {name: B, peak_flops_fp32: 1e14, peak_flops_half: 2e15, "
        "memory_gb: 192}\ntopology: {kind: all-to-all, intra: {latency_us: 2, bandwidth_gbps: 900}}\n");
  write("second", "a100.yaml", "preset: a100\ndevice:\n  memory_gb: 1\n");  // behind first/: never read
  const PresetsEnv env(folder("first") + "::" + folder("second"));
  const pm::Hardware a = pm::preset("a100");
  EXPECT_DOUBLE_EQ(a.device.memory_bytes, 40e9);
  EXPECT_DOUBLE_EQ(a.device.peak_flops_half, 312e12);  // from the embedded a100
  EXPECT_EQ(pm::preset_candidates("a100").size(), 3u);
  EXPECT_DOUBLE_EQ(pm::load_hardware("b200").device.memory_bytes, 192e9);
  const auto files = pm::preset_files();
  ASSERT_EQ(files.size(), pm::embedded_presets().size() + 1);
  for (const auto& f : files) {
    if (f.name == "a100" || f.name == "b200") {
      EXPECT_EQ(f.origin, pm::PresetOrigin::Folder) << f.name;
      EXPECT_EQ(f.path, folder("first") + "/" + f.name + ".yaml");
    } else {
      EXPECT_EQ(f.origin, pm::PresetOrigin::Embedded) << f.name;
    }
  }
  // A hardware file starting from the user's preset gets the user's.
  const auto hw = write("second", "hw.txt", "preset: b200\ndevice: {memory_gb: 96}\n");
  EXPECT_DOUBLE_EQ(pm::load_hardware(hw).device.peak_flops_half, 2e15);
}

TEST_F(UserPresets, AMalformedUserFileIsNamedWithItsField) {
  const auto bad = write("first", "bad.yaml", "preset: v100\ndevice:\n  memory_gb: lots\n");
  const auto named = write("first", "other.yaml", "preset: v100\nname: v100-big\n");
  const auto broken = write("first", "broken.yaml", "device: [unclosed\n");
  const auto unknown = write("first", "typo.yaml", "preset: v100\ndevice:\n  memory: 32\n");
  const PresetsEnv env(folder("first"));
  EXPECT_NE(error_of("bad").find(bad + ":3: field 'device.memory_gb': expected a number"), std::string::npos)
      << error_of("bad");
  EXPECT_NE(error_of("other").find(named + ":2: field 'name': is 'v100-big', but a preset is named by its file"),
            std::string::npos)
      << error_of("other");
  EXPECT_NE(error_of("broken").find(broken + ":"), std::string::npos) << error_of("broken");
  EXPECT_NE(error_of("broken").find("malformed YAML"), std::string::npos) << error_of("broken");
  EXPECT_NE(error_of("typo").find(unknown + ":3: field 'device.memory': unknown"), std::string::npos)
      << error_of("typo");
  // The others still load.
  EXPECT_EQ(pm::preset("v100").name, "v100");
}

TEST_F(UserPresets, PresetsStartingFromEachOtherAreRefused) {
  write("first", "ping.yaml", "preset: pong\n");
  write("first", "pong.yaml", "preset: ping\n");
  const PresetsEnv env(folder("first"));
  const std::string what = error_of("ping");
  EXPECT_NE(what.find("hardware preset 'ping' starts from itself"), std::string::npos) << what;
  EXPECT_NE(what.find("ping.yaml -> "), std::string::npos) << what;
}

TEST_F(UserPresets, AFolderThatDoesNotExistIsNamed) {
  const PresetsEnv env(folder("missing"));
  const std::string what = error_of("a100");
  EXPECT_NE(what.find("PIPETWIN_PRESETS: the presets folder '" + folder("missing") + "' does not exist"),
            std::string::npos)
      << what;
}
