// torchtitan's job TOML and training log as a measured run
// (calibration/runs.hpp).
//
// The TOML (torchtitan/config/job_config.py; the llama3 train_configs/*.toml):
//   [training]  local_batch_size (batch_size before 2025), seq_len,
//               global_batch_size (-1: local_batch_size x D),
//               mixed_precision_param
//   [parallelism] data_parallel_replicate_degree, data_parallel_shard_degree
//               (-1: the GPUs left over), tensor_parallel_degree,
//               pipeline_parallel_degree, pipeline_parallel_schedule,
//               pipeline_parallel_microbatch_size, context_parallel_degree
//               (older files: the degrees under [training], the pipeline's
//               under [experimental], pipeline_parallel_microbatches a count)
//   [activation_checkpoint] mode, selective_ac_option
// Absent keys take torchtitan's defaults.
//
// The log (torchtitan/components/metrics.py `MetricsProcessor.log`, coloured
// with ANSI codes, after torchtitan's "[titan] DATE - root - INFO - " prefix
// and torchrun's "[rank0]:"):
//   step: 10  loss:  7.8765  grad_norm:  1.2345  memory: 30.52GiB(38.63%)
//       tps: 5,432  tflops: 314.55  mfu: 31.80%
// tps is tokens per second per GPU: the tokens this rank loaded since the
// last line (its local batch, every gradient-accumulation step) over the
// time, divided by the non-data-parallel size cp x tp x pp. So the whole
// step moves global_batch x seq_len tokens in tokens / (tps x GPUs) seconds.
// Each line is the mean over its log interval; "validate step:" lines (the
// validation's throughput) are left out.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>

#include "calibration/run_logs_parse.hpp"
#include "calibration/runs.hpp"
#include "schedule/error.hpp"

namespace pipetwin::calibration {
namespace {

using logs::TomlFile;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// The first of `keys` the file sets (a newer layout's name before an older one's).
std::string first_set(const TomlFile& toml, std::initializer_list<const char*> keys) {
  for (const char* k : keys) {
    if (toml.has(k)) return k;
  }
  return *keys.begin();
}

int degree(const TomlFile& toml, std::initializer_list<const char*> keys, int fallback) {
  const std::string key = first_set(toml, keys);
  const long long v = toml.integer_or(key, fallback);
  if (v < -1 || v == 0 || v > 1'000'000) throw Error(toml.where(key) + ": '" + key + "' must be positive, got " + std::to_string(v));
  return static_cast<int>(v);
}

// torchtitan's (PyTorch's) schedule name as pipetwin's, and whether it
// places several stages on each rank; the names are case-insensitive there.
struct Schedule {
  const char* name;
  bool looped;
};
Schedule schedule_of(const TomlFile& toml, const std::string& key) {
  const std::string given = toml.string_or(key, "1F1B");
  const std::string s = lower(given);
  if (s == "1f1b") return {"1f1b", false};
  if (s == "gpipe") return {"gpipe", false};
  if (s == "interleaved1f1b") return {"interleaved-1f1b", true};
  if (s == "interleavedzerobubble") return {"interleaved-zb", true};
  if (s == "zbvzerobubble") return {"zb-v", true};
  if (s == "dualpipev") return {"dualpipe-v", true};
  throw Error(toml.where(key) + ": pipeline_parallel_schedule " + given +
              " has no pipetwin schedule (1F1B, GPipe, Interleaved1F1B, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV)");
}

// [activation_checkpoint] as a recompute choice (models/recompute.hpp).
// mode "full" checkpoints every block: uniform:1. "selective" with an integer
// N checkpoints every N-th block whole (torchtitan's _apply_layer_sac; 0 and
// 1: all of them, uniform:1); pipetwin has no spelling for every N-th block
// with N > 1 (block:n checkpoints the first n of each stage): refused.
// "op" (every second matrix product saved) is pipetwin's op.
std::string recompute(const TomlFile& toml) {
  const std::string mode = toml.string_or("activation_checkpoint.mode", "selective");
  if (mode == "none") return "none";
  if (mode == "full") return "uniform:1";
  if (mode != "selective") {
    throw Error(toml.where("activation_checkpoint.mode") + ": activation_checkpoint.mode " + mode +
                " is not modelled (none, full or selective)");
  }
  const std::string key = "activation_checkpoint.selective_ac_option";
  const std::string option = toml.string_or(key, "2");
  if (option == "op") return "op";
  int every = -1;
  const auto [end, ec] = std::from_chars(option.data(), option.data() + option.size(), every);
  if (ec != std::errc() || end != option.data() + option.size() || every < 0) {
    throw Error(toml.where(key) + ": selective_ac_option must be \"op\" or a non-negative integer, got " + option);
  }
  if (every > 1) {
    throw Error(toml.where(key) + ": selective_ac_option = \"" + option + "\" (every " + option +
                "-th block checkpointed) is not modelled; \"1\" or mode = \"full\" is uniform:1");
  }
  return "uniform:1";
}

// The tps values of the log's step lines, and the dp_shard its device-mesh
// line names (0 where it has none): "Building device mesh with parallelism:
// pp=1, dp_replicate=1, dp_shard=8, ..." (2026), or "Building 2-D device
// mesh with ['dp_shard', 'tp'], [4, 2]" before.
struct TitanLog {
  std::vector<double> tps;
  int dp_shard = 0;
};

// A list's elements between its brackets, trimmed and unquoted: "['a', 'b']".
std::vector<std::string> list_items(std::string_view list) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    std::string_view item = logs::trim(list.substr(start, comma - start));
    if (item.size() >= 2 && item.front() == '\'' && item.back() == '\'') item = item.substr(1, item.size() - 2);
    items.emplace_back(item);
    start = comma + 1;
  }
  return items;
}

// dp_shard's size in "['dp_shard', 'tp'], [4, 2]": 1 where it is not a dimension.
int mesh_dp_shard(std::string_view text) {
  const std::size_t names_end = text.find(']');
  const std::size_t sizes_begin = text.find('[', names_end);
  const std::size_t sizes_end = text.find(']', sizes_begin);
  if (names_end == std::string_view::npos || sizes_end == std::string_view::npos) return 0;
  const std::vector<std::string> names = list_items(text.substr(1, names_end - 1));
  const std::vector<std::string> sizes = list_items(text.substr(sizes_begin + 1, sizes_end - sizes_begin - 1));
  for (std::size_t i = 0; i < names.size() && i < sizes.size(); ++i) {
    if (names[i] != "dp_shard") continue;
    int v = 0;
    std::from_chars(sizes[i].data(), sizes[i].data() + sizes[i].size(), v);
    return v;
  }
  return 1;
}

TitanLog read_log(const std::string& path) {
  TitanLog log;
  const std::vector<std::string> lines = logs::read_lines(path);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string line = logs::strip_ansi(lines[i]);
    const std::string where = path + ":" + std::to_string(i + 1);
    if (const std::size_t m = line.find("dp_shard="); m != std::string::npos && line.find("device mesh") != std::string::npos) {
      std::from_chars(line.data() + m + 9, line.data() + line.size(), log.dp_shard);
    } else if (const std::size_t d = line.find("-D device mesh with ["); d != std::string::npos) {
      log.dp_shard = mesh_dp_shard(std::string_view(line).substr(d + 20));
    }
    const std::size_t step = line.find("step:");
    const std::size_t tps = line.find("tps:");
    if (step == std::string::npos || tps == std::string::npos || line.find("validate step:") != std::string::npos) continue;
    std::string digits;
    std::size_t p = tps + 4;
    while (p < line.size() && line[p] == ' ') ++p;
    for (; p < line.size() && (std::isdigit(static_cast<unsigned char>(line[p])) || line[p] == ',' || line[p] == '.'); ++p) {
      if (line[p] != ',') digits += line[p];
    }
    double v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || !(v > 0)) {
      throw Error(where + ": cannot read the tps in: " + std::string(logs::trim(line)));
    }
    log.tps.push_back(v);
  }
  return log;
}

}  // namespace

namespace {

// The schedule, V, M and b: the pipeline's micro-batches of the local batch,
// or without a pipeline the gradient-accumulation steps.
void read_pipeline(const TomlFile& toml, long long local, long long accumulation, MeasuredRun& run) {
  if (run.pipeline == 1) {
    // No pipeline: each gradient-accumulation step is a micro-batch of the local batch.
    run.microbatch_size = static_cast<int>(local);
    run.microbatches = static_cast<int>(accumulation);
  } else {
    const std::string sched_key = first_set(toml, {"parallelism.pipeline_parallel_schedule", "experimental.pipeline_parallel_schedule"});
    const Schedule schedule = schedule_of(toml, sched_key);
    const std::string csv_key = first_set(toml, {"parallelism.pipeline_parallel_schedule_csv", "experimental.pipeline_parallel_schedule_csv"});
    if (!toml.string_or(csv_key, "").empty()) throw Error(toml.where(csv_key) + ": a schedule from a CSV file is not modelled");
    run.schedule = schedule.name;
    // Looped schedules put 2 stages on each rank unless layers per stage say
    // otherwise, which needs the model's layer count this reader lacks.
    const std::string lps_key = "parallelism.pipeline_parallel_layers_per_stage";
    if (schedule.looped && toml.has(lps_key)) {
      throw Error(toml.where(lps_key) + ": pipeline_parallel_layers_per_stage with a multi-stage schedule is not read yet "
                                        "(stages per rank come from the model's layers)");
    }
    run.virtual_stages = schedule.looped ? 2 : 1;
    if (accumulation > 1) {
      throw Error(toml.where("training.global_batch_size") + ": gradient accumulation (" + std::to_string(accumulation) +
                  " pipeline rounds a step) is not modelled with pipeline parallelism");
    }
    if (toml.has("experimental.pipeline_parallel_microbatches")) {
      const long long m = toml.integer("experimental.pipeline_parallel_microbatches");
      if (m < 1 || local % m != 0) {
        throw Error(toml.where("experimental.pipeline_parallel_microbatches") + ": must divide the local batch " + std::to_string(local));
      }
      run.microbatches = static_cast<int>(m);
      run.microbatch_size = static_cast<int>(local / m);
    } else {
      const std::string mb_key = "parallelism.pipeline_parallel_microbatch_size";
      const long long b = toml.integer_or(mb_key, 1);
      if (b < 1 || local % b != 0) {
        throw Error(toml.where(mb_key) + ": pipeline_parallel_microbatch_size " + std::to_string(b) +
                    " must divide the local batch " + std::to_string(local));
      }
      run.microbatch_size = static_cast<int>(b);
      run.microbatches = static_cast<int>(local / b);
    }
  }

}

// FSDP2 shards weights, gradients and optimizer state over dp_shard and the
// context ranks (ZeRO-3), replicated over dp_replicate (HSDP); its reshard_after_forward "default"
// frees a unit's weights after its forward without a pipeline and keeps them
// with one. Float8 training (torchao's tensorwise: current scaling) is a
// model converter.
void read_sharding(const TomlFile& toml, int shard, int replicate, MeasuredRun& run) {
  run.data = shard * replicate;
  run.zero = shard * run.context > 1 ? 3 : 0;
  run.shard_group = run.zero == 3 && replicate > 1 ? shard * run.context : 0;
  const std::string reshard = toml.string_or("parallelism.fsdp_reshard_after_forward", "default");
  if (reshard != "default" && reshard != "always" && reshard != "never") {
    throw Error(toml.where("parallelism.fsdp_reshard_after_forward") + ": fsdp_reshard_after_forward must be default, "
                "always or never, got " + reshard);
  }
  run.reshard_after_forward = reshard == "always" || (reshard == "default" && run.pipeline == 1);
  if (toml.has("model.converters")) {
    const auto converters = toml.strings("model.converters");
    if (std::find(converters.begin(), converters.end(), "float8") != converters.end()) run.precision = "fp8";
  }
}

}  // namespace

MeasuredRun read_torchtitan_run(const std::string& toml_path, const std::string& log_path, const std::string& model,
                                const std::string& hardware, int skip) {
  const TomlFile toml = TomlFile::load(toml_path);
  const TitanLog log = read_log(log_path);

  MeasuredRun run;
  run.name = std::filesystem::path(log_path).stem().string();
  run.source = log_path;
  run.model = model;
  run.hardware = hardware;

  run.context = degree(toml, {"parallelism.context_parallel_degree", "experimental.context_parallel_degree"}, 1);
  const auto t_keys = {"parallelism.tensor_parallel_degree", "training.tensor_parallel_degree"};
  const auto k_keys = {"parallelism.pipeline_parallel_degree", "experimental.pipeline_parallel_degree"};
  const auto r_keys = {"parallelism.data_parallel_replicate_degree", "training.data_parallel_replicate_degree"};
  const auto s_keys = {"parallelism.data_parallel_shard_degree", "training.data_parallel_shard_degree"};
  run.tensor = degree(toml, t_keys, 1);
  run.pipeline = degree(toml, k_keys, 1);
  const int replicate = degree(toml, r_keys, 1);
  int shard = degree(toml, s_keys, -1);
  for (int d : {run.tensor, run.pipeline, replicate}) {
    if (d < 1) throw Error(toml_path + ": only data_parallel_shard_degree may be -1");
  }
  if (shard == -1) {
    // The GPUs left over: the world size is not in the TOML, the log's mesh says it.
    if (log.dp_shard < 1) {
      throw Error(toml.where(first_set(toml, s_keys)) + ": data_parallel_shard_degree is -1 (all GPUs left) and " + log_path +
                  " has no \"device mesh\" line naming dp_shard: set the degree in the TOML");
    }
    shard = log.dp_shard;
  }
  read_sharding(toml, shard, replicate, run);
  // torchtitan's tensor parallelism shards the norms' and residuals'
  // activations over the sequence whenever it is on.
  run.sequence_parallel = run.tensor > 1;

  const std::string lb_key = first_set(toml, {"training.local_batch_size", "training.batch_size"});
  const long long local = toml.integer_or(lb_key, 8);
  const long long seq_len = toml.integer_or("training.seq_len", 2048);
  long long global = toml.integer_or("training.global_batch_size", -1);
  if (local < 1) throw Error(toml.where(lb_key) + ": '" + lb_key + "' must be positive");
  if (seq_len < 1) throw Error(toml.where("training.seq_len") + ": 'training.seq_len' must be positive");
  if (global < 0) global = local * run.data;
  if (global % (local * run.data) != 0) {
    throw Error(toml.where("training.global_batch_size") + ": global_batch_size " + std::to_string(global) +
                " is not a multiple of local_batch_size x D = " + std::to_string(local * run.data));
  }
  const long long accumulation = global / (local * run.data);
  run.global_batch = static_cast<int>(global);

  const std::string precision = toml.string_or("training.mixed_precision_param", "bfloat16");
  // The precision is the model spec's (`model`); this only refuses what torchtitan does not take.
  if (precision != "bfloat16" && precision != "float32") {
    throw Error(toml.where("training.mixed_precision_param") + ": mixed_precision_param must be bfloat16 or float32, got " + precision);
  }
  run.recompute = recompute(toml);

  read_pipeline(toml, local, accumulation, run);

  const double tps = logs::median_after(log.tps, skip, "\"tps:\"", log_path);
  run.step_s = static_cast<double>(global) * static_cast<double>(seq_len) / (tps * run.gpus());
  return run;
}

}  // namespace pipetwin::calibration
