// topological_order over a Boost.Graph adjacency list.
#include "models/layer_graph.hpp"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <iterator>
#include <string>

#include "schedule/error.hpp"

namespace pipetwin::models {

std::vector<int> topological_order(int layers, const std::vector<std::pair<int, int>>& edges) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph g(layers);
  for (const auto& [from, to] : edges) {
    if (from < 0 || from >= layers || to < 0 || to >= layers) {
      throw Error("layer graph: edge " + std::to_string(from) + " -> " + std::to_string(to) +
                  " names a layer outside 0.." + std::to_string(layers - 1));
    }
    boost::add_edge(from, to, g);
  }
  std::vector<int> reversed;
  try {
    boost::topological_sort(g, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    throw Error("layer graph: the edges form a cycle; a model must be a DAG");
  }
  std::reverse(reversed.begin(), reversed.end());
  return reversed;
}

}  // namespace pipetwin::models

namespace pipetwin::models {

Model in_topological_order(const Model& model) {
  const int n = static_cast<int>(model.layers.size());
  const auto order = topological_order(n, model.edges());
  std::vector<int> position(n);
  for (int i = 0; i < n; ++i) position[order[i]] = i;
  bool forward = true;
  for (const auto& [u, v] : model.edges()) forward = forward && u < v;
  if (forward) return model;
  Model out = model;
  for (int i = 0; i < n; ++i) {
    out.layers[i] = model.layers[order[i]];
    for (int& input : out.layers[i].inputs) input = position[input];
  }
  return out;
}

}  // namespace pipetwin::models
