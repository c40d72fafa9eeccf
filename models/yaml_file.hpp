// Loading the YAML files that people write (model, hardware, sweep specs):
// errors name the file, the line and the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace pipetwin::models {

YAML::Node load_yaml_file(const std::string& path);
YAML::Node parse_yaml(const std::string& text, const std::string& source);

// A mapping read field by field; every error says "<source>:<line>: field '<key>': ...".
class YamlFields {
 public:
  YamlFields(YAML::Node node, std::string source, std::string context = "");

  bool has(const std::string& key) const;
  std::string line(const std::string& key) const;  // text() on one line: a name
  std::string text(const std::string& key) const;
  // Integers are also bounded (default 10^7): sizes beyond any real model are
  // refused, so that the integer costs built from them cannot overflow.
  std::int64_t positive_int(const std::string& key, std::int64_t max = 10'000'000) const;
  std::int64_t positive_int_or(const std::string& key, std::int64_t fallback, std::int64_t max = 10'000'000) const;
  double positive_number(const std::string& key) const;
  double non_negative_number(const std::string& key) const;
  double number_or(const std::string& key, double fallback) const;  // >= 0
  bool boolean_or(const std::string& key, bool fallback) const;       // true | false
  // One of `options` (the first is the fallback when the key is absent).
  std::string choice_or(const std::string& key, const std::vector<std::string>& options) const;
  std::vector<std::int64_t> positive_int_list(const std::string& key, std::size_t max_length = 100'000,
                                              std::int64_t max = 10'000'000) const;
  YamlFields child(const std::string& key) const;  // a nested mapping
  // Throws for any key not in `known`, naming it and listing the known ones.
  void reject_unknown(const std::vector<std::string>& known) const;

  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const std::string& source() const { return source_; }
  const YAML::Node& node() const { return node_; }

 private:
  YAML::Node get(const std::string& key) const;
  double number(const std::string& key) const;
  std::string where(const YAML::Node& at) const;
  YAML::Node node_;
  std::string source_;
  std::string context_;  // dotted path of this mapping, e.g. "device."
};

// Writing YAML: the shortest text that reads back to the same double, and a
// double-quoted scalar (quotes, backslashes and newlines escaped).
std::string yaml_number(double x);
std::string yaml_quoted(const std::string& text);

}  // namespace pipetwin::models
