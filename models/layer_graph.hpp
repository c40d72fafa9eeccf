// The layer graph of a model (a DAG; a chain for sequential models) and its
// topological order, over which partitions are contiguous ranges.
#pragma once

#include <utility>
#include <vector>

namespace pipetwin::models {

// Layers 0..n-1, edges from producer to consumer. Throws pipetwin::Error when
// the edges form a cycle or name a layer that does not exist.
std::vector<int> topological_order(int layers, const std::vector<std::pair<int, int>>& edges);

}  // namespace pipetwin::models

#include "models/model.hpp"

namespace pipetwin::models {

// The model with its layers in a topological order of its layer graph (Boost),
// inputs renumbered; unchanged when every edge already points forward.
Model in_topological_order(const Model& model);

}  // namespace pipetwin::models
