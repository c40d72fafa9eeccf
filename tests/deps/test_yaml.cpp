// yaml-cpp: a spec loads; a malformed one names the file and the line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "models/yaml_file.hpp"
#include "schedule/error.hpp"
#include "schedule/io.hpp"

TEST(Yaml, LoadsAndReportsMalformedFilesWithTheirLine) {
  const auto dir = std::filesystem::temp_directory_path() / ("pipetwin_yaml_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto good = (dir / "good.yaml").string(), bad = (dir / "bad.yaml").string();
  pipetwin::schedule::write_file_atomic(good, "family: mlp\nlayers: 4\nwidth: 256\n");
  pipetwin::schedule::write_file_atomic(bad, "family: mlp\nlayers: [4\nwidth: 256\n");
  const auto node = pipetwin::models::load_yaml_file(good);
  EXPECT_EQ(node["layers"].as<int>(), 4);
  try {
    pipetwin::models::load_yaml_file(bad);
    FAIL() << "accepted malformed YAML";
  } catch (const pipetwin::Error& e) {
    EXPECT_NE(std::string(e.what()).find(bad + ":"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("malformed YAML"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}
