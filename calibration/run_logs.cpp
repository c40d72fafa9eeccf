// Megatron-LM's training log as a measured run (calibration/runs.hpp), and
// the helpers both log readers share (calibration/run_logs_parse.hpp).
//
// What the log holds (Megatron-LM, megatron/training/arguments.py
// `_print_args` and megatron/training/training.py `training_log`; the same
// in megatron/arguments.py and megatron/training.py of 2021-2022):
//
//   ------------------------ arguments ------------------------
//     accumulate_allreduce_grads_in_fp32 .............. False
//     num_layers ...................................... 24
//     ...                  (every argument, sorted, dots to column 50)
//   -------------------- end of arguments ---------------------
//   ...
//    [2024-05-01 10:00:00.123456] iteration       10/     100 | consumed samples: 5120 |
//        elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 123.4 | ...
//
// (one line each; older logs have no timestamp). Each iteration line is the
// mean over its log interval. An argument name of 48 characters or more has
// no dots. A launcher may put a prefix before every line ("0: " with srun
// --label): the one before the header's dashes is taken off the arguments.
// A log with several argument blocks (a job restarted into the same file)
// is read from its last block on.
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "calibration/run_logs_parse.hpp"
#include "calibration/runs.hpp"
#include "schedule/error.hpp"
#include "schedule/stats.hpp"

namespace pipetwin::calibration {
namespace logs {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the file");
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
  }
  return lines;
}

std::string strip_ansi(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\x1b' && i + 1 < text.size() && text[i + 1] == '[') {
      i += 2;
      while (i < text.size() && !((text[i] >= 'A' && text[i] <= 'Z') || (text[i] >= 'a' && text[i] <= 'z'))) ++i;
      continue;
    }
    out += text[i];
  }
  return out;
}

std::string_view trim(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  return text;
}

double median_after(const std::vector<double>& values, int skip, const std::string& what, const std::string& path) {
  if (skip < 0) throw Error(path + ": the number of " + what + " values to skip must be at least 0");
  if (values.size() <= static_cast<std::size_t>(skip)) {
    throw Error(path + ": no " + what + " values after skipping the first " + std::to_string(skip) + " (found " +
                std::to_string(values.size()) + ")");
  }
  return schedule::median(std::vector<double>(values.begin() + skip, values.end()));
}

}  // namespace logs

namespace {

const std::string kArgumentsHeader = "------------------------ arguments ------------------------";
const std::string kArgumentsFooter = "-------------------- end of arguments ---------------------";
const std::string kElapsed = "elapsed time per iteration (ms):";

// The arguments as printed, by name, and the line each came from.
struct MegatronArgs {
  std::string path;
  std::map<std::string, std::pair<std::string, int>> values;

  bool has(const std::string& name) const {
    const auto it = values.find(name);
    return it != values.end() && it->second.first != "None";
  }
  std::string at(const std::string& name) const {
    const auto it = values.find(name);
    return it == values.end() ? path : path + ":" + std::to_string(it->second.second);
  }
  const std::string& text(const std::string& name) const {
    if (!has(name)) throw Error(path + ": the arguments block has no value for '" + name + "'");
    return values.at(name).first;
  }
  long long integer(const std::string& name) const {
    const std::string& t = text(name);
    long long v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size()) throw Error(at(name) + ": '" + name + "' must be an integer, got " + t);
    return v;
  }
  int positive(const std::string& name) const {
    const long long v = integer(name);
    if (v < 1 || v > 1'000'000'000) throw Error(at(name) + ": '" + name + "' must be positive, got " + text(name));
    return static_cast<int>(v);
  }
  double number(const std::string& name) const {
    const std::string& t = text(name);
    double v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size()) throw Error(at(name) + ": '" + name + "' must be a number, got " + t);
    return v;
  }
  // True or False; `fallback` where the argument is absent (older versions).
  bool flag(const std::string& name, bool fallback) const {
    if (!has(name)) return fallback;
    const std::string& t = text(name);
    if (t != "True" && t != "False") throw Error(at(name) + ": '" + name + "' must be True or False, got " + t);
    return t == "True";
  }
  // A string or an enum member's name ("AttnBackend.flash" -> "flash").
  std::string word(const std::string& name, const std::string& fallback) const {
    if (!has(name)) return fallback;
    const std::string& t = text(name);
    const std::size_t dot = t.rfind('.');
    return dot == std::string::npos ? t : t.substr(dot + 1);
  }
};

// "  name ....... value" after the launcher's prefix: the name and the value.
std::optional<std::pair<std::string, std::string>> argument_line(std::string_view line) {
  line = logs::trim(line);
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0) return std::nullopt;
  std::string name(line.substr(0, space));
  std::string_view rest = line.substr(space + 1);
  std::size_t dots = 0;
  while (dots < rest.size() && rest[dots] == '.') ++dots;
  if (dots != (name.size() >= 48 ? 0 : 48 - name.size())) return std::nullopt;
  rest.remove_prefix(dots);
  if (rest.empty() || rest.front() != ' ') return std::nullopt;
  return std::make_pair(std::move(name), std::string(logs::trim(rest)));
}

// The number after `elapsed time per iteration (ms):`, or an error naming the line.
double elapsed_ms(const std::string& line, std::size_t at, const std::string& where) {
  std::string_view rest = logs::trim(std::string_view(line).substr(at + kElapsed.size()));
  const std::size_t bar = rest.find('|');
  if (bar != std::string_view::npos) rest = logs::trim(rest.substr(0, bar));
  double v = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  if (ec != std::errc() || end != rest.data() + rest.size() || !(v > 0)) {
    throw Error(where + ": cannot read the elapsed time per iteration in: " + logs::strip_ansi(logs::trim(line)));
  }
  return v;
}

// The spec's `flash_attention`: whether the attention core writes no s x s
// score matrix. --attention-backend flash (flash-attn) and fused (cuDNN's
// fused attention) do not; unfused (Transformer Engine's explicit softmax)
// and local (Megatron's own core and fused softmax kernel) do. auto lets
// Transformer Engine pick flash or fused, so it writes none there; without
// Transformer Engine (transformer_impl local, or logs before it) only
// --use-flash-attn avoids the scores.
bool flash_attention(const MegatronArgs& a) {
  const std::string backend = a.word("attention_backend", "auto");
  if (backend == "flash" || backend == "fused") return true;
  if (backend == "unfused" || backend == "local") return false;
  if (backend != "auto") throw Error(a.at("attention_backend") + ": unknown attention_backend " + a.text("attention_backend"));
  if (a.flag("use_flash_attn", false)) return true;
  return a.word("transformer_impl", "local") == "transformer_engine";
}

// The blocks with a dense MLP before the routed ones: moe_layer_freq 1, or
// a pattern of K zeros then ones, "[0]*K+[1]*R" (with or without parentheses).
int dense_layers(const MegatronArgs& a, int layers) {
  if (!a.has("moe_layer_freq")) return 0;
  std::string t;
  for (const char c : a.text("moe_layer_freq")) {
    if (c != ' ' && c != '(' && c != ')') t += c;
  }
  if (t == "1") return 0;
  int zeros = 0, ones = 0;
  char tail = 0;
  if (std::sscanf(t.c_str(), "[0]*%d+[1]*%d%c", &zeros, &ones, &tail) == 2 && zeros >= 0 && ones > 0 &&
      zeros + ones == layers) {
    return zeros;
  }
  throw Error(a.at("moe_layer_freq") + ": moe_layer_freq " + a.text("moe_layer_freq") +
              " is not modelled: 1, or the first K blocks dense and the rest routed ([0]*K+[1]*R, K + R = num_layers)");
}

// A mixture of experts' fields (family moe, docs/models.md): the experts,
// the router's top-k, their widths, the dense blocks first, the head size,
// Q/K norms, multi-head latent attention and the capacity factor.
std::string moe_fields(const MegatronArgs& a, int layers, int heads, int hidden) {
  if (!a.flag("swiglu", false)) throw Error(a.at("swiglu") + ": family moe's experts are SwiGLU (swiglu False is not modelled)");
  if (a.word("normalization", "LayerNorm") != "RMSNorm") {
    throw Error(a.at("normalization") + ": family moe normalizes with RMSNorm, not " + a.word("normalization", "LayerNorm"));
  }
  if (a.flag("add_bias_linear", true)) throw Error(a.at("add_bias_linear") + ": family moe has no biases (add_bias_linear True)");
  const int ffn = a.positive("ffn_hidden_size");
  const int expert_ffn = a.has("moe_ffn_hidden_size") ? a.positive("moe_ffn_hidden_size") : ffn;
  std::string s = "experts: " + std::to_string(a.positive("num_experts")) + "\n";
  s += "top_k: " + std::to_string(a.has("moe_router_topk") ? a.positive("moe_router_topk") : 2) + "\n";
  s += "expert_ffn_hidden: " + std::to_string(expert_ffn) + "\n";
  if (a.has("moe_shared_expert_intermediate_size")) {
    const int shared = a.positive("moe_shared_expert_intermediate_size");
    if (shared % expert_ffn != 0) {
      throw Error(a.at("moe_shared_expert_intermediate_size") + ": a shared width of " + std::to_string(shared) +
                  " is not a whole number of experts of " + std::to_string(expert_ffn));
    }
    s += "shared_experts: " + std::to_string(shared / expert_ffn) + "\n";
  }
  if (const int dense = dense_layers(a, layers); dense > 0) s += "dense_layers: " + std::to_string(dense) + "\n";
  if (a.flag("multi_latent_attention", false)) {
    if (a.has("q_lora_rank")) s += "q_lora_rank: " + std::to_string(a.positive("q_lora_rank")) + "\n";
    s += "kv_lora_rank: " + std::to_string(a.positive("kv_lora_rank")) + "\n";
    s += "qk_nope_dim: " + std::to_string(a.positive("qk_head_dim")) + "\n";
    s += "qk_rope_dim: " + std::to_string(a.positive("qk_pos_emb_head_dim")) + "\n";
    s += "v_head_dim: " + std::to_string(a.positive("v_head_dim")) + "\n";
  } else {
    if (a.has("kv_channels") && a.positive("kv_channels") * heads != hidden) {
      s += "head_dim: " + std::to_string(a.positive("kv_channels")) + "\n";
    }
    if (a.flag("qk_layernorm", false)) s += "qk_norm: true\n";
  }
  if (a.has("moe_expert_capacity_factor")) {
    const double c = a.number("moe_expert_capacity_factor");
    if (c < 1) throw Error(a.at("moe_expert_capacity_factor") + ": a capacity factor below 1 drops tokens of every expert (not modelled)");
    s += "capacity_factor: " + std::to_string(c) + "\n";
  }
  return s;
}

// The llm-family spec (docs/models.md) the arguments describe; family moe
// where they name experts (num_experts).
std::string model_spec(const MegatronArgs& a, const std::vector<std::string>& lines) {
  const int layers = a.positive("num_layers"), heads = a.positive("num_attention_heads");
  const int seq = a.positive("seq_length");
  const int kv = a.flag("group_query_attention", false) ? a.positive("num_query_groups") : heads;
  // The padded vocabulary: an argument in a few versions, else the tokenizer's
  // " > padded vocab (size: N) with D dummy tokens (new size: V)" line.
  long long vocab = 0;
  if (a.has("padded_vocab_size")) vocab = a.positive("padded_vocab_size");
  for (std::size_t i = 0; vocab == 0 && i < lines.size(); ++i) {
    const std::size_t at = lines[i].find("(new size: ");
    if (lines[i].find("padded vocab (size:") == std::string::npos || at == std::string::npos) continue;
    const char* p = lines[i].data() + at + 11;
    std::from_chars(p, lines[i].data() + lines[i].size(), vocab);
  }
  if (vocab == 0 && a.has("vocab_size")) vocab = a.positive("vocab_size");
  if (vocab <= 0) throw Error(a.path + ": no vocabulary size: neither padded_vocab_size nor vocab_size is set, and no \"padded vocab\" line");

  const std::string norm = a.word("normalization", "LayerNorm");
  if (norm != "LayerNorm" && norm != "RMSNorm") throw Error(a.at("normalization") + ": unknown normalization " + norm);
  std::string positions = a.flag("use_rotary_position_embeddings", false) ? "rope" : "learned_absolute";
  positions = a.word("position_embedding_type", positions);
  const bool rotary = positions == "rope" || positions == "yarn" || positions == "mrope";
  if (!rotary && positions != "learned_absolute") {
    throw Error(a.at("position_embedding_type") + ": position_embedding_type " + positions +
                " is not modelled (rope, yarn, mrope or learned_absolute)");
  }
  const bool bias = a.flag("add_bias_linear", true);  // before --disable-bias-linear, always biased
  const double dropout = std::max(a.has("hidden_dropout") ? a.number("hidden_dropout") : 0.0,
                                  a.has("attention_dropout") ? a.number("attention_dropout") : 0.0);
  const std::string precision = a.flag("bf16", false) ? "bf16" : a.flag("fp16", false) ? "fp16" : "fp32";
  const auto yes = [](bool b) { return std::string(b ? "true" : "false"); };

  const bool moe = a.has("num_experts");
  std::string s = moe ? "family: moe\n" : "family: llm\n";
  s += "layers: " + std::to_string(layers) + "\n";
  s += "hidden: " + std::to_string(a.positive("hidden_size")) + "\n";
  s += "ffn_hidden: " + std::to_string(a.positive("ffn_hidden_size")) + "\n";
  s += "heads: " + std::to_string(heads) + "\n";
  if (!(moe && a.flag("multi_latent_attention", false))) s += "kv_heads: " + std::to_string(kv) + "\n";
  s += "seq_len: " + std::to_string(seq) + "\n";
  s += "vocab: " + std::to_string(vocab) + "\n";
  if (moe) {  // rotary, and no dropout masks kept (family moe has none)
    if (!rotary) throw Error(a.at("position_embedding_type") + ": family moe's positions are rotary, not " + positions);
    s += moe_fields(a, layers, heads, a.positive("hidden_size"));
    s += "tied_embeddings: " + yes(!a.flag("untie_embeddings_and_output_weights", false)) + "\n";
    return s + "precision: " + precision + "\n";
  }
  s += std::string("mlp: ") + (a.flag("swiglu", false) ? "swiglu" : "gelu") + "\n";
  s += std::string("norm: ") + (norm == "RMSNorm" ? "rmsnorm" : "layernorm") + "\n";
  s += std::string("positions: ") + (rotary ? "rotary" : "learned") + "\n";
  if (!rotary && a.has("max_position_embeddings") && a.positive("max_position_embeddings") > seq) {
    s += "max_positions: " + std::to_string(a.positive("max_position_embeddings")) + "\n";
  }
  s += "tied_embeddings: " + yes(!a.flag("untie_embeddings_and_output_weights", false)) + "\n";
  s += "bias: " + yes(bias) + "\n";
  if (!bias && a.flag("add_qkv_bias", false)) s += "qkv_bias: true\n";
  s += "dropout: " + yes(dropout > 0) + "\n";
  s += "flash_attention: " + yes(flash_attention(a)) + "\n";
  s += "precision: " + precision + "\n";
  return s;
}

// --recompute-granularity/--recompute-method/--recompute-num-layers (2022 on),
// or --activations-checkpoint-method/-num-layers before, as a recompute choice.
std::string recompute(const MegatronArgs& a) {
  std::string granularity = a.word("recompute_granularity", "");
  std::string method = a.word("recompute_method", "");
  std::string layers = "recompute_num_layers";
  if (granularity.empty() && a.has("activations_checkpoint_method")) {
    granularity = "full";
    method = a.word("activations_checkpoint_method", "");
    layers = "activations_checkpoint_num_layers";
  }
  if (granularity.empty()) return "none";
  if (granularity == "selective") return "selective";
  if (granularity != "full") throw Error(a.at("recompute_granularity") + ": unknown recompute_granularity " + granularity);
  if (method != "uniform" && method != "block") {
    throw Error(a.at("recompute_method") + ": recompute_granularity full needs recompute_method uniform or block, got " +
                (method.empty() ? "None" : method));
  }
  return method + ":" + std::to_string(a.has(layers) ? a.positive(layers) : 1);
}

// T, K, D and V from the arguments.
void read_layout(const MegatronArgs& a, MeasuredRun& run) {
  // Megatron-LM's data_parallel_size leaves out the context-parallel ranks, as MeasuredRun::data does.
  run.context = a.has("context_parallel_size") ? a.positive("context_parallel_size") : 1;
  run.tensor = a.positive("tensor_model_parallel_size");
  run.pipeline = a.positive("pipeline_model_parallel_size");
  if (a.has("data_parallel_size")) {
    run.data = a.positive("data_parallel_size");
  } else {
    const int world = a.positive("world_size"), group = run.tensor * run.pipeline * run.context;
    if (world % group != 0) {
      throw Error(a.at("world_size") + ": world_size " + std::to_string(world) + " is not a multiple of T x K x C = " +
                  std::to_string(group));
    }
    run.data = world / group;
  }
  const int layers = a.positive("num_layers");
  if (a.has("virtual_pipeline_model_parallel_size")) {
    run.virtual_stages = a.positive("virtual_pipeline_model_parallel_size");
  } else if (a.has("num_layers_per_virtual_pipeline_stage")) {
    const int per = a.positive("num_layers_per_virtual_pipeline_stage");
    if (layers % (run.pipeline * per) != 0) {
      throw Error(a.at("num_layers_per_virtual_pipeline_stage") + ": num_layers " + std::to_string(layers) +
                  " is not a multiple of K x num_layers_per_virtual_pipeline_stage = " + std::to_string(run.pipeline * per));
    }
    run.virtual_stages = layers / (run.pipeline * per);
  } else if (a.has("num_virtual_stages_per_pipeline_rank")) {
    run.virtual_stages = a.positive("num_virtual_stages_per_pipeline_rank");
  }
}

}  // namespace

MeasuredRun read_megatron_log(const std::string& path, const std::string& hardware, int skip) {
  const std::vector<std::string> lines = logs::read_lines(path);
  MegatronArgs a{path, {}};
  std::vector<double> elapsed;
  bool found = false, inside = false;
  std::string prefix;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    const int number = static_cast<int>(i) + 1;
    if (const std::size_t h = line.find(kArgumentsHeader); h != std::string::npos) {
      found = inside = true;
      prefix = line.substr(0, h);
      a.values.clear();
      elapsed.clear();
      continue;
    }
    if (inside) {
      if (line.find(kArgumentsFooter) != std::string::npos) {
        inside = false;
        continue;
      }
      // Lines other ranks print in between are not arguments: left out.
      if (line.compare(0, prefix.size(), prefix) != 0) continue;
      if (auto arg = argument_line(std::string_view(line).substr(prefix.size()))) {
        a.values[arg->first] = {arg->second, number};
      }
      continue;
    }
    if (const std::size_t e = line.find(kElapsed); e != std::string::npos) {
      elapsed.push_back(elapsed_ms(line, e, path + ":" + std::to_string(number)));
    }
  }
  if (!found) throw Error(path + ": no \"" + kArgumentsHeader + "\" block (Megatron-LM prints it on rank 0 at start)");
  if (inside) throw Error(path + ": the arguments block has no \"" + kArgumentsFooter + "\" line");

  MeasuredRun run;
  run.name = std::filesystem::path(path).stem().string();
  run.source = path;
  run.hardware = hardware;
  run.model_text = model_spec(a, lines);
  read_layout(a, run);
  run.schedule = run.virtual_stages > 1 ? "interleaved-1f1b" : "1f1b";
  run.microbatch_size = a.positive("micro_batch_size");
  run.global_batch = a.positive("global_batch_size");
  if (run.global_batch % (run.data * run.microbatch_size) != 0) {
    throw Error(a.at("global_batch_size") + ": global_batch_size " + std::to_string(run.global_batch) +
                " is not a multiple of D x micro_batch_size = " + std::to_string(run.data * run.microbatch_size));
  }
  run.microbatches = run.global_batch / (run.data * run.microbatch_size);
  run.recompute = recompute(a);
  run.sequence_parallel = a.flag("sequence_parallel", false);
  run.zero = a.flag("use_distributed_optimizer", false) ? 1 : 0;
  if (a.has("expert_model_parallel_size")) run.expert = a.positive("expert_model_parallel_size");
  if (run.expert > 1 && a.has("expert_tensor_parallel_size")) {
    const int etp = a.positive("expert_tensor_parallel_size");
    if (etp != 1 && etp != run.tensor) {
      throw Error(a.at("expert_tensor_parallel_size") + ": expert_tensor_parallel_size " + std::to_string(etp) +
                  " is not modelled (1 or tensor_model_parallel_size)");
    }
    run.expert_tensor = etp == 1 ? 1 : 0;
  }
  run.step_s = logs::median_after(elapsed, skip, "\"" + kElapsed + "\"", path) / 1000.0;
  return run;
}

}  // namespace pipetwin::calibration
