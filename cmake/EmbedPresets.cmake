# Writes OUTPUT, a C++ source that holds the text of every PRESETS_DIR/*.yaml
# (models/presets.hpp: embedded_presets()), sorted by name. Run at build time:
#   cmake -DPRESETS_DIR=<dir> -DOUTPUT=<file.cpp> -P EmbedPresets.cmake
# The file is written to a temporary and replaces OUTPUT only when it differs.
if(NOT PRESETS_DIR OR NOT OUTPUT)
  message(FATAL_ERROR "EmbedPresets.cmake: give -DPRESETS_DIR=<dir> and -DOUTPUT=<file.cpp>")
endif()
file(GLOB files "${PRESETS_DIR}/*.yaml")
list(SORT files)
set(delimiter "pipetwin_preset")
set(entries "")
foreach(file IN LISTS files)
  get_filename_component(name "${file}" NAME_WE)
  if(NOT name MATCHES "^[A-Za-z0-9._-]+$")
    message(FATAL_ERROR "${file}: a preset's name (its file's) is letters, digits, '.', '_' and '-' only")
  endif()
  file(READ "${file}" text)
  string(FIND "${text}" ")${delimiter}\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${file}: holds the text )${delimiter}\" that ends the embedded string")
  endif()
  string(APPEND entries "      {\"${name}\", R\"${delimiter}(${text})${delimiter}\"},\n")
endforeach()
set(content "// Generated at build time from presets/*.yaml by cmake/EmbedPresets.cmake: edit those files.
#include \"models/presets.hpp\"

namespace pipetwin::models {

const std::vector<EmbeddedPreset>& embedded_presets() {
  static const std::vector<EmbeddedPreset> presets{
${entries}  };
  return presets;
}

}  // namespace pipetwin::models
")
file(WRITE "${OUTPUT}.tmp" "${content}")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
