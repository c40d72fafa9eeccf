// pipetwin: one binary, one subcommand per task; it links no LibTorch.
// `run` is answered by the executor, pipetwin-exec (twin/executables.hpp).
#include <cstring>

#include "cli/app.hpp"
#include "twin/executables.hpp"
#include "schedule/error.hpp"

int main(int argc, char** argv) {
  namespace pc = pipetwin::cli;
  if (argc >= 2 && std::strcmp(argv[1], "run") == 0) {
    try {
      pipetwin::twin::hand_over_to_executor(argc, argv);
    } catch (const pipetwin::Error& e) {
      std::fprintf(stderr, "pipetwin: error: %s\n", pc::printable(e.what()).c_str());
      return 1;
    }
  }
  return pc::run_app(argc, argv, "pipetwin: simulate, run, calibrate and compare pipeline-parallel training schedules",
                     {pc::add_schedule_command, pc::add_validate_command, pc::add_partition_command,
                      pc::add_simulate_command, pc::add_sweep_command, pc::add_plan_command, pc::add_merge_command,
                      pc::add_calibrate_command, pc::add_info_command,
                      pc::add_compare_command, pc::add_plot_command, pc::add_probe_command},
                     {{"run", "Train one configuration for real: LibTorch, one process per rank, c10d (pipetwin-exec)"}});
}
