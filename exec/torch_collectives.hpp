// The executor's call of each collective (internal to exec/: includes
// LibTorch): one case per row of the collectives' table
// (schedule::CollectiveAlgorithm, models/collectives.hpp), on a c10d group.
// The algorithm names what the models price; the backend runs its own (Gloo
// its ring, NCCL its ring or tree as its tuner picks), so both all-reduces
// are the one c10d all-reduce.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/torch.h>

#include <vector>

#include "schedule/collective.hpp"

namespace pipetwin::exec {

// Starts `algorithm`'s operation over `group` (n members) and returns its
// work; keep both tensors until it completes. Both are flat and contiguous:
//   all-reduce       `in` summed over the group, in place (`out` unused)
//   reduce-scatter   `in`, n equal parts, summed; this member's part into `out`
//   all-gather       every member's `in` into `out`, n parts in member order
//   all-to-all       `in`, n equal parts, part j to member j; `out` (as
//                    large) part i from member i
// Throws pipetwin::Error where the sizes do not fit the operation.
c10::intrusive_ptr<c10d::Work> start_collective(c10d::Backend& group, schedule::CollectiveAlgorithm algorithm,
                                                at::Tensor& in, at::Tensor& out);

// `t` summed over `group`, in place; returns when done.
void all_reduce_across(c10d::Backend& group, at::Tensor& t);

// Tensors' gradients (a missing one is zeros) as one flat buffer, padded with
// zeros to a multiple of `parts`.
at::Tensor flat_gradients(const std::vector<at::Tensor>& params, std::int64_t parts);
// Tensors' values as one flat buffer, padded with zeros to `padded` elements.
at::Tensor flat_weights(const std::vector<at::Tensor>& params, std::int64_t padded);

}  // namespace pipetwin::exec
