# What the twin library (schedule, models, sim, calibration, twin) needs:
# Debian's packages only. The whole build (cmake/Dependencies.cmake) and the
# Python package's (python/, PIPETWIN_PYTHON_MODULE) both start here.
find_package(PkgConfig REQUIRED)
# SimGrid 3.32 ships no CMake config in Debian; pkg-config it is.
pkg_check_modules(SimGrid REQUIRED IMPORTED_TARGET simgrid>=3.32)

find_package(Boost 1.74 REQUIRED COMPONENTS graph)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Eigen3 3.4 REQUIRED NO_MODULE)
find_package(ZLIB REQUIRED)  # torch.profiler's gzipped traces (calibration/kineto.cpp)
