// load_yaml_file and YamlFields: yaml-cpp with pipetwin's error messages.
#include "models/yaml_file.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>

#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pipetwin::models {

namespace {

// yaml-cpp keeps the first of two equal keys in a mapping and drops the other
// without a word: a spec that says `layers: 4` and later `layers: 8` would be
// read as 4. Refused instead, naming both lines. At most `budget` nodes are
// visited (aliases can make a small file a huge tree; the fields read later
// are few).
void reject_duplicate_keys(const YAML::Node& node, const std::string& source, const std::string& context,
                           long& budget) {
  if (--budget < 0) return;
  if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size() && budget >= 0; ++i) {
      reject_duplicate_keys(node[i], source, context + "[" + std::to_string(i) + "]", budget);
    }
  } else if (node.IsMap()) {
    std::map<std::string, int> first_line;
    for (const auto& entry : node) {
      if (!entry.first.IsScalar()) continue;
      const std::string key = entry.first.Scalar();
      const int line = entry.first.Mark().line + 1;
      const auto [it, fresh] = first_line.emplace(key, line);
      if (!fresh) {
        throw Error(source + ":" + std::to_string(line) + ": field '" + context + key + "': given twice (first on line " +
                    std::to_string(it->second) + ")");
      }
      if (budget >= 0) reject_duplicate_keys(entry.second, source, context + key + ".", budget);
    }
  }
}

}  // namespace

YAML::Node parse_yaml(const std::string& text, const std::string& source) {
  // Names and specs go into JSON traces and summaries, which hold UTF-8 only.
  schedule::check_utf8(text, source);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(source + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
  }
  long budget = 100000;
  reject_duplicate_keys(root, source, "", budget);
  return root;
}

YAML::Node load_yaml_file(const std::string& path) { return parse_yaml(schedule::read_file(path), path); }

YamlFields::YamlFields(YAML::Node node, std::string source, std::string context)
    : node_(std::move(node)), source_(std::move(source)), context_(std::move(context)) {
  if (!node_.IsMap()) {
    throw Error(where(node_) + (context_.empty() ? "expected a mapping of fields"
                                                 : "field '" + context_.substr(0, context_.size() - 1) +
                                                       "': expected a mapping of fields"));
  }
}

std::string YamlFields::where(const YAML::Node& at) const {
  const auto mark = at.Mark();
  return source_ + (mark.line >= 0 ? ":" + std::to_string(mark.line + 1) : "") + ": ";
}

void YamlFields::fail(const std::string& key, const std::string& what) const {
  const YAML::Node at = node_[key] ? node_[key] : node_;
  throw Error(where(at) + "field '" + context_ + key + "': " + what);
}

bool YamlFields::has(const std::string& key) const { return static_cast<bool>(node_[key]); }

YAML::Node YamlFields::get(const std::string& key) const {
  const YAML::Node v = node_[key];
  if (!v) fail(key, "missing");
  return v;
}

std::string YamlFields::text(const std::string& key) const {
  const YAML::Node v = get(key);
  if (!v.IsScalar()) fail(key, "expected a string");
  // Text is printed and written into JSON: control characters (a NUL, an
  // escape sequence) are refused; line breaks and tabs are text.
  for (const char c : v.Scalar()) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      char code[8];
      std::snprintf(code, sizeof code, "\\x%02x", u);
      fail(key, std::string("holds the control character ") + code);
    }
  }
  return v.Scalar();
}

std::string YamlFields::line(const std::string& key) const {
  std::string s = text(key);
  if (s.find_first_of("\n\t") != std::string::npos) {
    fail(key, std::string("holds the control character ") + (s.find('\n') != std::string::npos ? "\\x0a" : "\\x09") +
                  "; a name is one line of printable text");
  }
  return s;
}

double YamlFields::number(const std::string& key) const {
  const YAML::Node v = get(key);
  if (!v.IsScalar()) fail(key, "expected a number");
  double x = 0;
  if (!YAML::convert<double>::decode(v, x) || !std::isfinite(x)) fail(key, "expected a number, got '" + v.Scalar() + "'");
  return x;
}

double YamlFields::positive_number(const std::string& key) const {
  const double x = number(key);
  if (!(x > 0)) fail(key, "must be positive, got " + node_[key].Scalar());
  return x;
}

double YamlFields::non_negative_number(const std::string& key) const {
  const double x = number(key);
  if (x < 0) fail(key, "must not be negative, got " + node_[key].Scalar());
  return x;
}

double YamlFields::number_or(const std::string& key, double fallback) const {
  return has(key) ? non_negative_number(key) : fallback;
}

bool YamlFields::boolean_or(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const YAML::Node v = get(key);
  bool x = false;
  if (!v.IsScalar() || !YAML::convert<bool>::decode(v, x)) {
    fail(key, "expected true or false, got '" + (v.IsScalar() ? v.Scalar() : std::string("a list or mapping")) + "'");
  }
  return x;
}

std::string YamlFields::choice_or(const std::string& key, const std::vector<std::string>& options) const {
  if (!has(key)) return options.front();
  const std::string v = text(key);
  for (const auto& o : options) {
    if (v == o) return v;
  }
  std::string valid;
  for (const auto& o : options) valid += (valid.empty() ? "" : ", ") + o;
  fail(key, "unknown value '" + v + "' (valid: " + valid + ")");
}

std::int64_t YamlFields::positive_int(const std::string& key, std::int64_t max) const {
  const YAML::Node v = get(key);
  std::int64_t x = 0;
  if (!v.IsScalar() || !YAML::convert<std::int64_t>::decode(v, x)) {
    fail(key, "expected an integer, got '" + (v.IsScalar() ? v.Scalar() : std::string("a list or mapping")) + "'");
  }
  if (x <= 0) fail(key, "must be positive, got " + std::to_string(x));
  if (x > max) fail(key, "must be at most " + std::to_string(max) + ", got " + std::to_string(x));
  return x;
}

std::int64_t YamlFields::positive_int_or(const std::string& key, std::int64_t fallback, std::int64_t max) const {
  return has(key) ? positive_int(key, max) : fallback;
}

std::vector<std::int64_t> YamlFields::positive_int_list(const std::string& key, std::size_t max_length,
                                                         std::int64_t max) const {
  const YAML::Node v = get(key);
  if (!v.IsSequence() || v.size() == 0) fail(key, "expected a non-empty list of positive integers");
  if (v.size() > max_length) fail(key, "holds more than " + std::to_string(max_length) + " entries");
  std::vector<std::int64_t> out;
  for (const auto& item : v) {
    std::int64_t x = 0;
    if (!item.IsScalar() || !YAML::convert<std::int64_t>::decode(item, x) || x <= 0 || x > max) {
      fail(key, "expected a non-empty list of positive integers up to " + std::to_string(max));
    }
    out.push_back(x);
  }
  return out;
}

YamlFields YamlFields::child(const std::string& key) const {
  return YamlFields(get(key), source_, context_ + key + ".");
}

void YamlFields::reject_unknown(const std::vector<std::string>& known) const {
  for (const auto& entry : node_) {
    const std::string key = entry.first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw Error(where(entry.first) + "field '" + context_ + key + "': unknown (valid: " + list + ")");
    }
  }
}

std::string yaml_number(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace pipetwin::models
