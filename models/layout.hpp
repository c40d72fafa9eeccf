// Megatron-LM's --pipeline-model-parallel-layout: the layers of each pipeline
// stage spelled out, stage by stage in layer order (stage i of the K x V is
// virtual stage i / K of rank i % K, Megatron-LM's vpp_rank * pp + pp_rank,
// which is pipetwin's stage numbering), stages separated by '|':
//   E  the embedding        t  a decoder (transformer) layer
//   L  the loss (the final norm, the output layer and the cross-entropy)
//   m  a multi-token prediction layer (no pipetwin model has one: refused)
// "x*n" repeats a character, "(...)*n" a group (not nested); commas are
// cosmetic. "Et*3|t*4|t*4|t*3,L" puts the embedding with 3 layers on the
// first stage and the loss with 3 on the last: uneven first and last stages,
// as --decoder-first-pipeline-num-layers 3 --decoder-last-pipeline-num-layers 3.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/model.hpp"
#include "schedule/program.hpp"

namespace pipetwin::models {

// True for a word made only of the layout's characters with an 'E' or a '|'
// (never a method's name or a range file's path).
bool is_layout(std::string_view text);
// The layout expanded: one string of E, t, L (and m) per stage. Throws
// pipetwin::Error naming the layout and the character at fault.
std::vector<std::string> expand_layout(std::string_view text);
// Stage i's layers of `model` (in topological order: embedding, blocks,
// head): the layout's first symbol must be E, its last L, one E and one L in
// all, a t for each of the model's other layers, no stage empty. Throws
// pipetwin::Error naming the stage and what the model holds instead.
std::vector<schedule::LayerRange> layout_ranges(const Model& model, std::string_view text);

}  // namespace pipetwin::models
