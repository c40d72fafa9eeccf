// The TOML subset of torchtitan's job files (calibration/run_logs_parse.hpp):
// `[section]` headers, `key = value` lines with basic ("...") and literal
// ('...') strings, integers (with `_` separators), floats, booleans and
// arrays of those (over several lines too), and `#` comments. Anything else
// on the right of an `=` is kept as written and refused only if read, so a
// job file with a form this reader lacks still gives the keys it has.
#include <charconv>

#include "calibration/run_logs_parse.hpp"
#include "schedule/error.hpp"

namespace pipetwin::calibration::logs {
namespace {

using Kind = TomlValue::Kind;

// `line` up to its comment: a `#` outside strings.
std::string_view without_comment(std::string_view line) {
  char quote = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#') {
      return line.substr(0, i);
    }
  }
  return line;
}

// Open '[' minus ']' outside strings: > 0 while a multi-line array goes on.
int bracket_depth(std::string_view text) {
  int depth = 0;
  char quote = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[') {
      ++depth;
    } else if (c == ']') {
      --depth;
    }
  }
  return depth;
}

// A quoted string's contents; false when `text` is not exactly one string.
bool unquote(std::string_view text, std::string& out) {
  if (text.size() < 2 || (text.front() != '"' && text.front() != '\'') || text.back() != text.front()) return false;
  if (text.substr(0, 3) == "\"\"\"" || text.substr(0, 3) == "'''") return false;  // multi-line strings: not in the subset
  const std::string_view body = text.substr(1, text.size() - 2);
  out.clear();
  if (text.front() == '\'') {
    if (body.find('\'') != std::string_view::npos) return false;
    out = body;
    return true;
  }
  for (std::size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '"') return false;
    if (body[i] != '\\') {
      out += body[i];
      continue;
    }
    if (++i == body.size()) return false;
    switch (body[i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '"': out += '"'; break;
      case '\\': out += '\\'; break;
      default: return false;
    }
  }
  return true;
}

bool is_integer(std::string_view text) {
  std::string digits;
  for (char c : text) {
    if (c != '_') digits += c;
  }
  if (!digits.empty() && digits.front() == '+') digits.erase(0, 1);
  long long v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  return !digits.empty() && ec == std::errc() && end == digits.data() + digits.size();
}

bool is_float(std::string_view text) {
  std::string digits;
  for (char c : text) {
    if (c != '_') digits += c;
  }
  if (!digits.empty() && digits.front() == '+') digits.erase(0, 1);
  double v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  return !digits.empty() && ec == std::errc() && end == digits.data() + digits.size();
}

// One scalar: its kind and its text (a string's contents).
TomlValue scalar(std::string_view text) {
  TomlValue v;
  if (unquote(text, v.text)) {
    v.kind = Kind::String;
    return v;
  }
  v.text = text;
  if (text == "true" || text == "false") v.kind = Kind::Boolean;
  else if (is_integer(text)) v.kind = Kind::Integer;
  else if (is_float(text)) v.kind = Kind::Float;
  return v;
}

// An array of scalars, split at the commas outside strings; Other if an
// element is not a scalar (a nested array, an inline table).
TomlValue array(std::string_view text) {
  TomlValue v;
  v.text = text;
  std::string_view body = trim(text.substr(1, text.size() - 2));
  std::vector<std::string_view> parts;
  char quote = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (quote) {
      if (c == '\\' && quote == '"') ++i;
      else if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == ',') {
      parts.push_back(trim(body.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (start < body.size()) parts.push_back(trim(body.substr(start)));
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].empty() && i + 1 == parts.size()) break;  // a trailing comma
    const TomlValue item = scalar(parts[i]);
    if (item.kind == Kind::Other) return v;
    v.items.push_back(item.text);
  }
  v.kind = Kind::Array;
  return v;
}

}  // namespace

TomlFile TomlFile::parse(const std::string& text, const std::string& path) {
  TomlFile f;
  f.path_ = path;
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  std::string section;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const int number = static_cast<int>(i) + 1;
    const std::string at = path + ":" + std::to_string(number);
    const std::string_view line = trim(without_comment(lines[i]));
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.substr(0, 2) == "[[") throw Error(at + ": arrays of tables ([[...]]) are not supported");
      if (line.back() != ']') throw Error(at + ": a section header must end with ']': " + std::string(line));
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) throw Error(at + ": expected `key = value` or `[section]`, got: " + std::string(line));
    std::string key(trim(line.substr(0, eq)));
    std::string quoted;
    if (unquote(key, quoted)) key = quoted;
    if (key.empty()) throw Error(at + ": a key is missing before '='");
    std::string value(trim(line.substr(eq + 1)));
    // A multi-line array: its next lines until the brackets close.
    while (!value.empty() && value.front() == '[' && bracket_depth(value) > 0) {
      if (++i == lines.size()) throw Error(at + ": the array of '" + key + "' is not closed");
      value += " ";
      value += trim(without_comment(lines[i]));
    }
    if (value.empty()) throw Error(at + ": '" + key + "' has no value");
    TomlValue v = value.front() == '[' && value.back() == ']' ? array(value) : scalar(value);
    v.line = number;
    const std::string full = section.empty() ? key : section + "." + key;
    if (f.values_.count(full)) throw Error(at + ": '" + full + "' is set twice");
    f.values_.emplace(full, std::move(v));
  }
  return f;
}

TomlFile TomlFile::load(const std::string& path) {
  std::string text;
  for (const std::string& line : read_lines(path)) text += line + "\n";
  return parse(text, path);
}

std::string TomlFile::where(const std::string& key) const {
  const auto it = values_.find(key);
  return it == values_.end() ? path_ : path_ + ":" + std::to_string(it->second.line);
}

const TomlValue& TomlFile::get(const std::string& key, Kind kind, const char* type) const {
  const auto it = values_.find(key);
  if (it == values_.end()) throw Error(path_ + ": '" + key + "' is missing");
  const TomlValue& v = it->second;
  const bool ok = v.kind == kind || (kind == Kind::Float && v.kind == Kind::Integer);
  if (!ok) throw Error(where(key) + ": '" + key + "' must be " + type + ", got " + v.text);
  return v;
}

std::string TomlFile::string(const std::string& key) const { return get(key, Kind::String, "a string").text; }

long long TomlFile::integer(const std::string& key) const {
  std::string digits;
  for (char c : get(key, Kind::Integer, "an integer").text) {
    if (c != '_' && c != '+') digits += c;
  }
  return std::stoll(digits);
}

double TomlFile::number(const std::string& key) const {
  std::string digits;
  for (char c : get(key, Kind::Float, "a number").text) {
    if (c != '_' && c != '+') digits += c;
  }
  double v = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), v);
  return v;
}

bool TomlFile::boolean(const std::string& key) const { return get(key, Kind::Boolean, "true or false").text == "true"; }

std::vector<std::string> TomlFile::strings(const std::string& key) const {
  return get(key, Kind::Array, "an array").items;
}

std::string TomlFile::string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? string(key) : fallback;
}

long long TomlFile::integer_or(const std::string& key, long long fallback) const {
  return has(key) ? integer(key) : fallback;
}

}  // namespace pipetwin::calibration::logs
