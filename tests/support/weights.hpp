// For the execution tests: the weights that `pipetwin run --save-weights DIR`
// writes (one file per layer), loaded and compared.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace pipetwin::test {

// Every layer's parameters, on the CPU, by layer index.
inline std::map<int, std::vector<at::Tensor>> load_weights(const std::filesystem::path& dir) {
  std::map<int, std::vector<at::Tensor>> out;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("layer_", 0) != 0) continue;
    std::vector<at::Tensor> tensors;
    torch::load(tensors, f.path().string());
    for (auto& t : tensors) t = t.cpu();
    out[std::stoi(name.substr(6))] = tensors;
  }
  return out;
}

// Largest |a - b| over every parameter of every layer; -1 if the layers differ.
inline double max_difference(const std::map<int, std::vector<at::Tensor>>& a,
                             const std::map<int, std::vector<at::Tensor>>& b) {
  if (a.size() != b.size() || a.empty()) return -1;
  double worst = 0;
  for (const auto& [layer, ta] : a) {
    const auto it = b.find(layer);
    if (it == b.end() || it->second.size() != ta.size()) return -1;
    for (std::size_t i = 0; i < ta.size(); ++i) worst = std::max(worst, (ta[i] - it->second[i]).abs().max().item<double>());
  }
  return worst;
}

}  // namespace pipetwin::test
