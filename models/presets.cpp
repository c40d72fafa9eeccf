// Hardware presets looked up by name: the user's folders (PIPETWIN_PRESETS),
// then the files of presets/ embedded at build time (presets_embedded.cpp).
#include "models/presets.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "schedule/error.hpp"
#include "schedule/io.hpp"

namespace pipetwin::models {
namespace {

namespace fs = std::filesystem;

// The files being loaded, innermost last: a preset file that starts from
// `preset: <its own name>` (a user's file overriding the embedded preset)
// gets the next file of that name, not itself.
thread_local std::vector<std::string> g_loading;

struct Loading {
  explicit Loading(const std::string& path) { g_loading.push_back(path); }
  ~Loading() { g_loading.pop_back(); }
  Loading(const Loading&) = delete;
  Loading& operator=(const Loading&) = delete;
};

bool loading(const std::string& path) { return std::find(g_loading.begin(), g_loading.end(), path) != g_loading.end(); }

// A folder's preset files (*.yaml), by name.
std::map<std::string, PresetFile> folder_files(const std::string& folder) {
  std::map<std::string, PresetFile> out;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    if (p.extension() != ".yaml" || !it->is_regular_file()) continue;
    out[p.stem().string()] = PresetFile{p.stem().string(), PresetOrigin::Folder, p.string(), {}};
  }
  if (ec) throw Error(std::string(kPresetsEnv) + ": cannot list the presets folder '" + folder + "': " + ec.message());
  return out;
}

PresetFile embedded_file(const EmbeddedPreset& e) {
  return {std::string(e.name), PresetOrigin::Embedded, "embedded:presets/" + std::string(e.name) + ".yaml", e.text};
}

std::string names_list() {
  std::string list;
  for (const auto& f : preset_files()) list += (list.empty() ? "" : ", ") + f.name;
  return list;
}

}  // namespace

std::vector<std::string> preset_folders() {
  std::vector<std::string> out;
  const char* env = std::getenv(kPresetsEnv);
  const std::string list = env == nullptr ? "" : env;
  std::size_t begin = 0;
  while (begin <= list.size()) {
    const std::size_t end = std::min(list.find(':', begin), list.size());
    const std::string folder = list.substr(begin, end - begin);
    begin = end + 1;
    if (folder.empty()) continue;
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) {
      throw Error(std::string(kPresetsEnv) + ": the presets folder '" + folder + "' does not exist");
    }
    out.push_back(folder);
  }
  return out;
}

std::vector<PresetFile> preset_candidates(const std::string& name) {
  std::vector<PresetFile> out;
  for (const auto& folder : preset_folders()) {
    auto files = folder_files(folder);
    if (const auto it = files.find(name); it != files.end()) out.push_back(it->second);
  }
  for (const auto& e : embedded_presets()) {
    if (e.name == name) out.push_back(embedded_file(e));
  }
  return out;
}

std::vector<PresetFile> preset_files() {
  std::map<std::string, PresetFile> first;
  for (const auto& folder : preset_folders()) first.merge(folder_files(folder));  // keeps the earlier folder's
  for (const auto& e : embedded_presets()) first.emplace(std::string(e.name), embedded_file(e));
  std::vector<PresetFile> out;
  for (auto& [_, f] : first) out.push_back(std::move(f));
  return out;
}

Hardware load_preset_file(const PresetFile& file) {
  const Loading guard(file.path);
  const YAML::Node node = file.origin == PresetOrigin::Embedded ? parse_yaml(std::string(file.embedded), file.path)
                                                                 : load_yaml_file(file.path);
  const YamlFields y(node, file.path);
  if (y.has("name") && y.line("name") != file.name) {
    y.fail("name", "is '" + y.line("name") + "', but a preset is named by its file: name it '" + file.name +
                       "' or rename the file");
  }
  return hardware_from_yaml(y);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const auto& f : preset_files()) out.push_back(f.name);
  return out;
}

Hardware preset(const std::string& name) {
  const auto files = preset_candidates(name);
  for (const auto& f : files) {
    if (!loading(f.path)) return load_preset_file(f);
  }
  if (files.empty()) throw Error("unknown hardware preset '" + name + "' (valid: " + names_list() + ")");
  std::string chain;
  for (const auto& p : g_loading) chain += (chain.empty() ? "" : " -> ") + p;
  throw Error("hardware preset '" + name + "' starts from itself, and no other file of that name is found (" +
              chain + ")");
}

}  // namespace pipetwin::models
