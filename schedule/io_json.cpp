// JSON form of a Program, file reading with format detection, atomic writes.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "schedule/error.hpp"
#include "schedule/names.hpp"
#include "schedule/io.hpp"

namespace pipetwin::schedule {
namespace {

using nlohmann::json;

const json& field(const json& j, const char* name, const std::string& source) {
  if (!j.contains(name)) throw Error(source + ": missing field '" + name + "'");
  return j.at(name);
}

bool is_int(const json& v) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT_MAX);
  return v.is_number_integer() && v.get<std::int64_t>() >= INT_MIN && v.get<std::int64_t>() <= INT_MAX;
}

int int_field(const json& j, const char* name, const std::string& source) {
  const json& v = field(j, name, source);
  if (!is_int(v)) throw Error(source + ": field '" + std::string(name) + "' must be an integer (32 bits)");
  return v.get<int>();
}

std::vector<int> int_list(const json& j, const char* name, const std::string& source) {
  const json& v = field(j, name, source);
  std::vector<int> out;
  if (!v.is_array()) throw Error(source + ": field '" + std::string(name) + "' must be a list of integers");
  for (const auto& x : v) {
    if (!is_int(x)) throw Error(source + ": field '" + std::string(name) + "' must be a list of integers (32 bits)");
    out.push_back(x.get<int>());
  }
  return out;
}

}  // namespace

std::string to_json(const Program& p, int indent) {
  json j;
  j["format"] = "pipetwin-schedule";
  j["version"] = 1;
  j["schedule"] = p.schedule;
  j["ranks"] = p.num_ranks;
  j["stages_per_rank"] = p.stages_per_rank;
  j["microbatches"] = p.num_microbatches;
  j["recompute"] = std::string(recompute_name(p.recompute));
  if (!p.is_pipeline_only()) {  // absent for a pipeline alone, so that older files read the same
    j["tensor_parallel"] = p.tensor_parallel;
    j["data_parallel"] = p.data_parallel;
    j["sequence_parallel"] = p.sequence_parallel;
    j["shard_optimizer"] = p.shard_optimizer();
    if (p.zero > 1) j["zero"] = p.zero;
    if (p.zero == 3 && !p.reshard_after_forward) j["reshard_after_forward"] = false;
    if (p.shard_group > 0) j["shard_group"] = p.shard_group;
    if (p.context_parallel > 1) j["context_parallel"] = p.context_parallel;
    if (p.expert_parallel > 1) j["expert_parallel"] = p.expert_parallel;
    if (p.expert_tensor_parallel > 0) j["expert_tensor_parallel"] = p.expert_tensor_parallel;
  }
  j["stage_to_rank"] = json::array();
  for (const auto r : p.stage_to_rank) j["stage_to_rank"].push_back(r.value);
  j["weight_versions"] = p.weight_versions;
  j["partition"] = json::array();
  for (const auto& range : p.partition) j["partition"].push_back({range.begin, range.end});
  j["actions"] = json::array();
  for (const auto& actions : p.ranks) {
    json row = json::array();
    for (const auto& cell : to_cells(actions)) row.push_back(cell);
    j["actions"].push_back(row);
  }
  return j.dump(indent) + "\n";
}

namespace {

// T, D, HSDP's shard group, C, sequence parallelism and ZeRO: absent for a pipeline alone.
void read_parallel(const json& j, const std::string& source, Program& p) {
  const std::pair<const char*, int*> degrees[] = {{"tensor_parallel", &p.tensor_parallel},
                                                  {"data_parallel", &p.data_parallel},
                                                  {"shard_group", &p.shard_group},
                                                  {"context_parallel", &p.context_parallel},
                                                  {"expert_parallel", &p.expert_parallel},
                                                  {"expert_tensor_parallel", &p.expert_tensor_parallel}};
  for (const auto& [key, field] : degrees) {
    if (!j.contains(key)) continue;
    const int v = int_field(j, key, source);
    if (v < 1 || v > kMaxParallel) {
      throw Error(source + ": field '" + key + "' must be between 1 and " + std::to_string(kMaxParallel) + ", got " +
                  std::to_string(v));
    }
    *field = v;
  }
  for (const char* key : {"sequence_parallel", "shard_optimizer", "reshard_after_forward"}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_boolean()) throw Error(source + ": field '" + key + "' must be true or false");
    const bool on = j[key].get<bool>();
    if (std::string(key) == "sequence_parallel") p.sequence_parallel = on;
    if (std::string(key) == "shard_optimizer") p.zero = on ? 1 : 0;
    if (std::string(key) == "reshard_after_forward") p.reshard_after_forward = on;
  }
  if (j.contains("zero")) {
    const int v = int_field(j, "zero", source);
    if (v < 0 || v > 3) throw Error(source + ": field 'zero' (ZeRO's stage) must be 0, 1, 2 or 3, got " + std::to_string(v));
    if (j.contains("shard_optimizer") && j["shard_optimizer"].get<bool>() != (v >= 1)) {
      throw Error(source + ": field 'zero' is " + std::to_string(v) + " but 'shard_optimizer' says otherwise");
    }
    p.zero = v;
  }
}

}  // namespace

Program parse_json(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number past a double
    throw Error(source + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) throw Error(source + ": expected a JSON object");
  if (!j.contains("format") || j["format"] != "pipetwin-schedule") {
    throw Error(source + ": field 'format' must be \"pipetwin-schedule\"");
  }
  // Version 1 is the only one: a later file may mean something else by its fields.
  if (j.contains("version") && (!j["version"].is_number_integer() || j["version"].get<std::int64_t>() != 1)) {
    throw Error(source + ": field 'version' is " + j["version"].dump() + ": this pipetwin reads version 1");
  }
  Program p;
  const json& name = field(j, "schedule", source);
  if (!name.is_string()) throw Error(source + ": field 'schedule' must be a string");
  p.schedule = name.get<std::string>();
  p.num_ranks = int_field(j, "ranks", source);
  p.stages_per_rank = int_field(j, "stages_per_rank", source);
  if (static_cast<std::int64_t>(p.num_ranks) * p.stages_per_rank > kMaxStages) {
    throw Error(source + ": fields 'ranks' x 'stages_per_rank' make more than the " + std::to_string(kMaxStages) +
                " stages pipetwin reads");
  }
  p.num_microbatches = int_field(j, "microbatches", source);
  const json& recompute = field(j, "recompute", source);
  if (!recompute.is_string()) throw Error(source + ": field 'recompute' must be a string");
  try {
    p.recompute = parse_recompute(recompute.get<std::string>());
  } catch (const Error& e) {
    throw Error(source + ": field 'recompute': " + e.what());
  }
  read_parallel(j, source, p);
  for (const int r : int_list(j, "stage_to_rank", source)) p.stage_to_rank.push_back(RankId{r});
  p.weight_versions = int_list(j, "weight_versions", source);
  if (j.contains("partition")) {
    for (const auto& range : j.at("partition")) {
      if (!range.is_array() || range.size() != 2 || !is_int(range[0]) || !is_int(range[1])) {
        throw Error(source + ": field 'partition' must be a list of [begin, end] pairs");
      }
      p.partition.push_back({range[0].get<int>(), range[1].get<int>()});
    }
  }
  const json& actions = field(j, "actions", source);
  if (!actions.is_array()) throw Error(source + ": field 'actions' must be a list of lists");
  for (std::size_t r = 0; r < actions.size(); ++r) {
    if (!actions[r].is_array()) throw Error(source + ": field 'actions[" + std::to_string(r) + "]' must be a list");
    p.ranks.emplace_back();
    for (std::size_t i = 0; i < actions[r].size(); ++i) {
      const std::string where = source + ": field 'actions[" + std::to_string(r) + "][" + std::to_string(i) + "]'";
      if (!actions[r][i].is_string()) throw Error(where + " must be a string");
      try {
        for (const auto& a : parse_cell(actions[r][i].get<std::string>())) p.ranks.back().push_back(a);
      } catch (const Error& e) {
        throw Error(where + ": " + e.what());
      }
    }
  }
  return p;
}

namespace {
constexpr NameTable<Format, 4> kFormats{
    "format",
    {{{Format::Text, "text"}, {Format::Csv, "csv"}, {Format::Json, "json"}, {Format::PytorchCsv, "pytorch-csv"}}}};
}  // namespace

Format parse_format(std::string_view name) { return kFormats.parse(name); }
const std::vector<std::string>& format_names() {
  static const auto names = kFormats.names();
  return names;
}

std::string format_program(const Program& p, Format format) {
  switch (format) {
    case Format::Text: return to_text(p);
    case Format::Csv: return to_csv(p);
    case Format::Json: return to_json(p);
    case Format::PytorchCsv: return to_pytorch_csv(p);
  }
  return "";
}

std::string read_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) throw Error(path + ": is a folder, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw Error(path + ": read error");
  return buffer.str();
}

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  // The sequence's length from its lead byte, then its continuation bytes;
  // overlong forms, surrogates and code points past U+10FFFF are refused too.
  const std::size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  bool ok = n > 0 && i + n <= s.size();
  for (std::size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
  if (ok && n >= 3) {
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    ok = !((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 >= 0x90));
  }
  return ok ? n : 0;
}

void check_utf8(std::string_view s, const std::string& source) {
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) break;
    i += n;
  }
  if (i >= s.size()) return;
  const auto line_start = s.rfind('\n', i == 0 ? std::string_view::npos : i - 1);
  const std::size_t column = i - (line_start == std::string_view::npos || i == 0 ? 0 : line_start + 1) + 1;
  const auto line = std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(i), '\n') + 1;
  static const char* hex = "0123456789abcdef";
  const auto byte = static_cast<unsigned char>(s[i]);
  throw Error(source + ":" + std::to_string(line) + ": not UTF-8 text (byte \\x" + hex[byte >> 4] + hex[byte & 15] +
              " at column " + std::to_string(column) + ")");
}

Program parse_program(std::string_view text, const std::string& source, std::vector<std::string>* notes) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) throw Error(source + ": empty, expected a schedule");
  if (text[first] == '{') return parse_json(text, source);
  const bool has_rank_line = text.rfind("rank ", 0) == 0 || text.find("\nrank ") != std::string_view::npos;
  return has_rank_line ? parse_text(text, source) : parse_csv(text, source, notes);
}

Program read_program(const std::string& path, std::vector<std::string>* notes) {
  const std::string text = read_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) throw Error(path + ": empty file, expected a schedule");
  return parse_program(text, path, notes);
}

namespace {

// Where an output really goes: a symbolic link is followed (the link stays and
// its target is replaced, also where the target does not exist yet).
std::string output_target(const std::string& path) {
  std::string target = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat st {};
    if (::lstat(target.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return target;
    std::string link(PATH_MAX, '\0');
    const ssize_t n = ::readlink(target.c_str(), link.data(), link.size());
    if (n <= 0) return target;
    link.resize(static_cast<std::size_t>(n));
    const auto slash = target.rfind('/');
    target = link.front() == '/' || slash == std::string::npos ? link : target.substr(0, slash + 1) + link;
  }
  throw Error(path + ": too many levels of symbolic links");
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view content) {
  const std::string target = output_target(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw Error(path + ": is a folder, not a file to write");
    if (!S_ISREG(st.st_mode)) {
      // A device, FIFO or socket (/dev/null, /dev/stdout): written as it is,
      // never replaced by a regular file.
      std::ofstream out(target, std::ios::binary);
      if (!out) throw Error(path + ": cannot open for writing");
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
      out.close();
      if (!out) throw Error(path + ": write failed");
      return;
    }
  }
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(path + ": cannot open " + tmp + " for writing");
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();  // a failure to write back (a full disk) may show only here
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(path + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot rename " + tmp + " into place");
  }
}

}  // namespace pipetwin::schedule
