// TraceMetadata: otherData written and read in one place.
#include "schedule/trace_metadata.hpp"

#include <algorithm>
#include <limits>

#include "schedule/error.hpp"

namespace pipetwin::schedule {
namespace {

using nlohmann::json;

const char* kHint = " (pipetwin run and simulate record the configuration in otherData)";

const json& field(const json& meta, const std::string& path, const std::string& key) {
  if (!meta.contains(key)) throw Error(path + ": otherData has no '" + key + "'" + kHint);
  return meta[key];
}

std::string text_field(const json& meta, const std::string& path, const std::string& key) {
  const json& v = field(meta, path, key);
  if (!v.is_string()) throw Error(path + ": otherData." + key + " must be a string");
  return v.get<std::string>();
}

std::optional<std::string> optional_text(const json& meta, const std::string& path, const std::string& key) {
  if (!meta.contains(key)) return std::nullopt;
  return text_field(meta, path, key);
}

int int_field(const json& meta, const std::string& path, const std::string& key, int max = kMaxStages) {
  const json& v = field(meta, path, key);
  if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > max) {
    throw Error(path + ": otherData." + key + " must be an integer from 1 to " + std::to_string(max));
  }
  return v.get<int>();
}

std::vector<LayerRange> partition_field(const json& meta, const std::string& path) {
  const json& v = field(meta, path, "partition");
  const std::string where = path + ": otherData.partition";
  if (!v.is_array()) throw Error(where + " must be a list of [begin, end] layer ranges");
  std::vector<LayerRange> out;
  for (std::size_t s = 0; s < v.size(); ++s) {
    const json& r = v[s];
    if (!r.is_array() || r.size() != 2 || !r[0].is_number_integer() || !r[1].is_number_integer()) {
      throw Error(where + "[" + std::to_string(s) + "] must be [begin, end]");
    }
    // Past an int, a layer index is out of every model: clamped, the reader refuses it as such.
    const auto clamp = [](std::int64_t x) {
      return static_cast<int>(std::clamp<std::int64_t>(x, -1, std::numeric_limits<int>::max()));
    };
    out.push_back({clamp(r[0].get<std::int64_t>()), clamp(r[1].get<std::int64_t>())});
  }
  return out;
}

}  // namespace

const std::vector<std::string>& configuration_fields() {
  static const std::vector<std::string> fields{"model",        "schedule",        "ranks",     "stages_per_rank",
                                               "microbatches", "microbatch_size", "recompute", "partition"};
  return fields;
}

json TraceMetadata::configuration_json() const {
  std::vector<std::vector<int>> ranges;
  for (const auto& range : partition) ranges.push_back({range.begin, range.end});
  return {{"model", model},
          {"hardware", hardware},
          {"schedule", schedule},
          {"ranks", ranks},
          {"stages_per_rank", stages_per_rank},
          {"microbatches", microbatches},
          {"microbatch_size", microbatch_size},
          {"batch", batch},
          {"recompute", recompute},
          {"partition", ranges}};
}

json TraceMetadata::to_json() const {
  json j = sections;
  j.update(configuration_json());
  if (!producer.empty()) j["producer"] = producer;
  j["model_spec"] = model_spec;
  j["hardware_spec"] = hardware_spec;
  if (program) j["program"] = *program;
  if (optimizer) j["optimizer"] = *optimizer;
  j["predicted_stash_bytes_per_stage"] = predicted_stash_bytes_per_stage;
  return j;
}

TraceMetadata read_trace_metadata(const json& meta, const std::string& path) {
  TraceMetadata m;
  m.model_spec = text_field(meta, path, "model_spec");
  m.schedule = text_field(meta, path, "schedule");
  m.ranks = int_field(meta, path, "ranks");
  m.stages_per_rank = int_field(meta, path, "stages_per_rank");
  m.microbatches = int_field(meta, path, "microbatches", 1'000'000);
  m.microbatch_size = int_field(meta, path, "microbatch_size", 1'000'000'000);
  m.recompute = text_field(meta, path, "recompute");
  m.partition = partition_field(meta, path);
  m.program = optional_text(meta, path, "program");
  m.batch = meta.contains("batch") && meta["batch"].is_number() ? meta["batch"].get<double>()
                                                                 : static_cast<double>(m.microbatches) * m.microbatch_size;
  if (meta.contains("optimizer") && meta["optimizer"].is_string()) m.optimizer = meta["optimizer"].get<std::string>();
  if (meta.contains("producer") && meta["producer"].is_string()) m.producer = meta["producer"].get<std::string>();
  if (meta.contains("model") && meta["model"].is_string()) m.model = meta["model"].get<std::string>();
  if (meta.contains("hardware") && meta["hardware"].is_string()) m.hardware = meta["hardware"].get<std::string>();
  if (meta.contains("hardware_spec") && meta["hardware_spec"].is_string()) m.hardware_spec = meta["hardware_spec"].get<std::string>();
  if (meta.contains("predicted_stash_bytes_per_stage") && meta["predicted_stash_bytes_per_stage"].is_array()) {
    for (const auto& v : meta["predicted_stash_bytes_per_stage"]) {
      if (v.is_number()) m.predicted_stash_bytes_per_stage.push_back(v.get<double>());
    }
  }
  for (const char* key : {"device", "step", "summary", "measured", "engine_reason"}) {
    if (meta.contains(key)) m.sections[key] = meta[key];
  }
  return m;
}

}  // namespace pipetwin::schedule
