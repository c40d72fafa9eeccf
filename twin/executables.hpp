// Where pipetwin finds what it does not link. The executor: `pipetwin-exec`, the executable that links LibTorch and runs
// configurations for real. `pipetwin` links no LibTorch; it hands `run` over
// to the executor (same process, same arguments) and asks it for the
// versions `info` reports.
//
//   pipetwin run ...  --execv-->  pipetwin-exec run ...  --fork-->  ranks 0..K-1
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace pipetwin::twin {

// PIPETWIN_EXEC when set, else `pipetwin-exec` next to this executable (in
// the build's cli/ folder, or in PREFIX/bin after an install).
std::string executor_path();

// The plot scripts: PIPETWIN_PLOTS_DIR when set; else PREFIX/share/pipetwin/plots
// beside an installed pipetwin; else the source tree's plots/.
std::string plots_dir();
// The Python that runs them: PIPETWIN_VENV's when set, else the virtualenv
// found at configure time (cmake/Dependencies.cmake).
std::string plots_python();

// Replaces this process with the executor, giving it argv[1..] (argv[0]
// kept for its messages). Throws pipetwin::Error when it cannot be started.
[[noreturn]] void hand_over_to_executor(int argc, char** argv);

// The executor's `info --json` (LibTorch, CUDA and NCCL versions), or
// {"executor": "unavailable: <why>"} when it cannot answer.
nlohmann::json executor_info();

}  // namespace pipetwin::twin
