// Loading the YAML files that people write (model, hardware, sweep specs):
// errors name the file and the line.
#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

namespace pipetwin::models {

YAML::Node load_yaml_file(const std::string& path);

}  // namespace pipetwin::models
