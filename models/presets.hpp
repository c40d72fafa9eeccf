// Hardware presets as files: each preset is one YAML file in the hardware
// file format (`pipetwin simulate --hardware FILE` reads the same), named by
// its file. The project's presets/*.yaml are embedded in the binary at build
// time (cmake/EmbedPresets.cmake); the folders of PIPETWIN_PRESETS
// (colon-separated; `--presets-dir` puts its folder first) are searched
// before them, so a user's file of a preset's name wins.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/hardware.hpp"

namespace pipetwin::models {

inline constexpr const char* kPresetsEnv = "PIPETWIN_PRESETS";

enum class PresetOrigin { Folder, Embedded };

// One preset's file.
struct PresetFile {
  std::string name;  // the file's name without .yaml
  PresetOrigin origin = PresetOrigin::Embedded;
  std::string path;           // the file; embedded:presets/<name>.yaml for an embedded one
  std::string_view embedded;  // an embedded file's text
};

// The project's presets/*.yaml, by name (generated at build time).
struct EmbeddedPreset {
  std::string_view name, text;
};
const std::vector<EmbeddedPreset>& embedded_presets();

// The folders searched before the embedded presets, in order (PIPETWIN_PRESETS's);
// throws naming a folder that does not exist.
std::vector<std::string> preset_folders();
// Every file of that name, in lookup order: the folders', then the embedded one.
std::vector<PresetFile> preset_candidates(const std::string& name);
// The file each preset is loaded from (the first of its candidates), by name.
std::vector<PresetFile> preset_files();
// The file read as a preset: errors name the file and the field; a `name:`
// other than the file's is refused.
Hardware load_preset_file(const PresetFile& file);

}  // namespace pipetwin::models
