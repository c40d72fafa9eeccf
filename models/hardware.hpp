// Hardware: a device per rank and a topology, with where the figures come
// from; the hardware presets (presets/*.yaml, models/presets.hpp), and the YAML
// hardware spec (a preset name, a file, or a file that overrides a preset's
// fields): hardware_reader.cpp reads it, hardware_writer.cpp writes it.
//
// Heterogeneous hardware lists one device per rank under `devices:`, each
// starting from the file's `device` (or from its own `preset:`):
//
//   preset: v100
//   devices: [{}, {}, {preset: p100}, {preset: p100}]     # ranks 0-1 V100, 2-3 P100
//
// Units in code: seconds, bytes, FLOP/s, bytes/s. Units in YAML: *_us
// (microseconds), memory_gb and *_gbps (10^9 bytes, 10^9 bytes/s), FLOP/s.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "models/device.hpp"
#include "models/topology.hpp"
#include "models/yaml_file.hpp"

namespace pipetwin::models {

struct Hardware {
  std::string name;
  std::string source;  // where the figures come from
  Device device;       // every rank's device, unless `devices` lists them one by one
  Topology topology;
  std::vector<Device> devices;  // heterogeneous hardware: rank r on devices[r]; empty: `device` everywhere
  // How far the calibration that made this file was from the runs it did not
  // fit (calibrate --runs: the worst of its predicted runs' and its fitted
  // runs' leave-one-out step errors), relative; unset for an uncalibrated
  // file. `plan` gives its figures within it. YAML calibration.prediction_error.
  std::optional<double> prediction_error;
  // The device of each of `ranks` ranks; throws when `devices` lists fewer.
  std::vector<Device> rank_devices(int ranks) const;
  // "4 x V100 PCIe", or the devices one by one when they differ.
  std::string describe_devices(int ranks) const;
};

// The presets (models/presets.hpp: a user's folders, then presets/*.yaml
// embedded), by name; one loaded by name (throws, listing the valid names).
std::vector<std::string> preset_names();
Hardware preset(const std::string& name);
Hardware hardware_from_yaml(const YamlFields& fields);
// The hardware as a self-contained YAML file (no preset) that
// hardware_from_yaml() reads back to the same values (17 significant digits).
// `extra` (a YAML mapping's text, e.g. "calibration:\n  ...") is appended.
std::string hardware_to_yaml(const Hardware& hardware, const std::string& header_comment = "",
                             const std::string& extra = "");
// A preset name, or a YAML file (which may start from `preset:` and override fields).
Hardware load_hardware(const std::string& name_or_path);

}  // namespace pipetwin::models
