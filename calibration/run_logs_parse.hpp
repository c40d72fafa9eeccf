// What the training-log readers of calibration/runs.hpp share: a file's
// lines, the median of a log's per-interval figures, and a reader for the
// subset of TOML that torchtitan's job files use (sections, `key = value`
// with strings, integers, floats, booleans and arrays of scalars, comments).
// Every error is a pipetwin::Error naming the file and, where there is one,
// the line.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace pipetwin::calibration::logs {

// The file's lines, without their line ends (\n or \r\n).
std::vector<std::string> read_lines(const std::string& path);

// `text` without ANSI colour codes (ESC '[' ... letter), as torchtitan's
// coloured log lines carry them.
std::string strip_ansi(std::string_view text);
std::string_view trim(std::string_view text);

// The median of `values` after the first `skip`; `what` names the figure and
// `path` the file in the error when none remain.
double median_after(const std::vector<double>& values, int skip, const std::string& what, const std::string& path);

// One value of a TOML file, kept as written and typed when read.
struct TomlValue {
  enum class Kind { String, Integer, Float, Boolean, Array, Other };
  Kind kind = Kind::Other;
  std::string text;                // the string's contents, or the literal as written
  std::vector<std::string> items;  // an array's elements (strings unquoted)
  int line = 0;
};

// A TOML file's values by "section.key" ("training.seq_len"; keys before any
// section have no prefix). Values of forms outside the subset (inline
// tables, dates) are kept as Other and refused only when read.
class TomlFile {
 public:
  static TomlFile parse(const std::string& text, const std::string& path);
  static TomlFile load(const std::string& path);

  bool has(const std::string& key) const { return values_.count(key) > 0; }
  // Typed reads: throw pipetwin::Error naming the file, line and key when the
  // value has another type. An integer is also a float.
  std::string string(const std::string& key) const;
  long long integer(const std::string& key) const;
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::vector<std::string> strings(const std::string& key) const;
  // The same, or `fallback` when the key is absent.
  std::string string_or(const std::string& key, const std::string& fallback) const;
  long long integer_or(const std::string& key, long long fallback) const;
  // "FILE:LINE" of a key, or the file's name where it is absent.
  std::string where(const std::string& key) const;
  const std::string& path() const { return path_; }

 private:
  const TomlValue& get(const std::string& key, TomlValue::Kind kind, const char* type) const;
  std::string path_;
  std::map<std::string, TomlValue> values_;
};

}  // namespace pipetwin::calibration::logs
