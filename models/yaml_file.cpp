// load_yaml_file: yaml-cpp with pipetwin's error messages.
#include "models/yaml_file.hpp"

#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pipetwin::models {

YAML::Node load_yaml_file(const std::string& path) {
  const std::string text = schedule::read_file(path);
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(path + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
  }
}

}  // namespace pipetwin::models
