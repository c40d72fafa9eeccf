# find_package(pipetwin): the twin library installed by `cmake --install`
# (PREFIX/lib/libpipetwin.so, headers under PREFIX/include/pipetwin), as the
# imported target pipetwin::pipetwin. Its headers include nlohmann/json.
include(CMakeFindDependencyMacro)
find_dependency(nlohmann_json 3.10)
get_filename_component(_pipetwin_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET pipetwin::pipetwin)
  add_library(pipetwin::pipetwin SHARED IMPORTED)
  set_target_properties(pipetwin::pipetwin PROPERTIES
    IMPORTED_LOCATION "${_pipetwin_prefix}/lib/libpipetwin.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_pipetwin_prefix}/include/pipetwin"
    INTERFACE_COMPILE_FEATURES cxx_std_20
    INTERFACE_LINK_LIBRARIES nlohmann_json::nlohmann_json)
endif()
set(pipetwin_FOUND TRUE)
