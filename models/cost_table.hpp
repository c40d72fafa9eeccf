// A table of the user's own costs, in place of a model spec and a hardware
// file: per stage the seconds of its actions, the bytes it sends and stashes
// and its fixed memory; optionally the link between neighbouring stages and
// the device's memory. `pipetwin simulate --costs FILE` and the Python
// package's own-costs simulation read it (docs/formats.md, "Cost tables").
//
//   stages:                  # one entry per stage, or one for every stage
//     - forward_s: 0.010     # F (required)
//       backward_s: 0.020    # B; or input_grad_s and weight_grad_s (I + W)
//       recompute_s: 0.010   # R (default: forward_s)
//       step_s: 0.002        # the optimizer step (default 0)
//       output_bytes: 8.4e6  # what crosses the cut after it, per micro-batch, both ways
//       activation_bytes: 2e9        # stashed per micro-batch until its backward
//       weights_bytes: 1e9, gradients_bytes: 1e9, optimizer_bytes: 4e9
//   link: {bandwidth: 25e9, latency_s: 1e-5}   # bytes/s and s (default: no time)
//   device: {memory_bytes: 80e9, reserve_bytes: 2e9}
//   samples_per_microbatch: 1
//
// A time may also be given per sample, `forward_s: {fixed_s: 1e-4, per_sample_s: 2e-3}`,
// and the table then times micro-batches of any size (simulate --batch).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "models/hardware.hpp"
#include "models/summary.hpp"
#include "schedule/dry_run.hpp"
#include "schedule/memory.hpp"
#include "schedule/program.hpp"

namespace pipetwin::models {

struct StageCostRow {
  double forward_s = 0, backward_s = 0, input_grad_s = 0, weight_grad_s = 0, recompute_s = 0, step_s = 0;
  bool split = false;  // input_grad_s and weight_grad_s given (else I/W-split schedules are refused)
  double output_bytes = 0;
  double activation_bytes = 0;
  std::optional<double> input_bytes;        // a checkpointed micro-batch's stash (default: the stage's input, the previous output_bytes)
  std::optional<double> weight_grad_bytes;  // kept from a micro-batch's I to its W (default: activation_bytes)
  double workspace_bytes = 0;               // a backward's working memory on top of the stash
  double weights_bytes = 0, gradients_bytes = 0, optimizer_bytes = 0;
  // The runtime's own time on the stage's rank: posting each of its sends,
  // and each of its receives (a receive that waits spends it while waiting).
  double send_s = 0, recv_s = 0;
  // The flight across the cut after the stage, both ways, per micro-batch;
  // given, it replaces latency + output_bytes / bandwidth.
  std::optional<double> output_transfer_s;
  // The stage's first forward of each step takes this much longer.
  double first_forward_extra_s = 0;
  // The fields given per sample ({fixed_s, per_sample_s}: seconds = fixed +
  // per_sample x samples per micro-batch), by name: their slope. The fields
  // above hold their value at the table's samples_per_microbatch.
  std::map<std::string, double> per_sample_s;
};

// The time fields that may be given per sample.
const std::vector<std::string>& per_sample_fields();
// A row's field by name (one of per_sample_fields()); nullptr for an unset
// output_transfer_s.
double* row_seconds(StageCostRow& row, const std::string& name);

struct CostTable {
  std::string source;               // the file (or "<costs>") for messages
  std::vector<StageCostRow> stages;  // one, or one per stage
  std::optional<double> link_bandwidth, link_latency_s;
  std::optional<double> memory_bytes, reserve_bytes;
  double samples_per_microbatch = 1;
  // The row of stage s of a Program with `stages` stages (throws, naming the
  // source, when the table has neither one row nor one per stage).
  const StageCostRow& row(int s, int stages) const;
  void check_stages(int stages) const;
  // True when some field is given per sample.
  bool scales() const;
  // The table for micro-batches of `samples`: each per-sample field moved
  // along its slope (the others as they are). Throws, naming the source,
  // where the table has no per-sample field and `samples` is not its own
  // samples_per_microbatch.
  CostTable at_samples(double samples) const;
  // at_samples(batch / microbatches); throws where the batch does not split
  // into that many micro-batches of whole samples.
  CostTable for_batch(int batch, int microbatches) const;
};

// A YAML or JSON file (*.yaml, *.yml, *.json) or a CSV file (*.csv: a header
// of the stage fields, one row per stage). Throws pipetwin::Error naming the
// file, the line and the field.
CostTable read_cost_table(const std::string& path);
// The same from YAML or JSON text (what the Python package passes).
CostTable parse_cost_table(const std::string& text, const std::string& source);

// The table as YAML that read_cost_table() reads back: `header` (comment
// lines, each starting with "# ") first, every field the table sets.
std::string cost_table_to_yaml(const CostTable& table, const std::string& header);

// The stage table the engines replay: the table's times; each transfer's
// flight over the table's link, or over `hardware`'s route between the two
// ranks (a table with a link and a hardware are refused: SimGrid replays the
// hardware's network), else instant. Throws where the Program needs what the table
// lacks (an I/W-split schedule without input_grad_s and weight_grad_s).
std::vector<schedule::StageCosts> cost_table_stages(const CostTable& table, const schedule::Program& program,
                                                    const Hardware* hardware);

// The table's memory for summarize(): capacity and reserve from the table,
// else from `hardware`'s device, else unbounded and none.
class CostTableMemory final : public StageMemorySource {
 public:
  CostTableMemory(const CostTable& table, const schedule::Program& program, const Hardware* hardware);
  int stages() const override { return static_cast<int>(rows_.size()); }
  Parts fixed_parts(int s) const override;
  double whole_stash_bytes(int s) const override { return rows_.at(s).activation_bytes; }
  double checkpoint_stash_bytes(int s) const override;
  double weight_grad_bytes(int s) const override;
  double workspace_bytes(int s) const override { return rows_.at(s).workspace_bytes; }
  double reserve_bytes(int s, double held) const override;
  double capacity_bytes(int s) const override;
  const schedule::StageMemory& stash(int s) const override { return stash_.at(s); }

 private:
  std::vector<StageCostRow> rows_;
  std::vector<schedule::StageMemory> stash_;
  std::vector<Device> devices_;  // [stage]: its rank's device, with a hardware
  std::optional<double> memory_bytes_, reserve_bytes_;
};

}  // namespace pipetwin::models
