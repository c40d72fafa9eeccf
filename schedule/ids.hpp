// Strong ids for the three indices of a pipeline schedule.
//
// Index conventions, stated once for the whole project:
//   rank        0 .. K-1       a device / process
//   stage       0 .. S-1       a partition of the model, S = K * V; stage 0 holds
//                              the first layers, stage S-1 the loss
//   micro-batch 0 .. M-1       in the order the data loader yields them
// A rank holds V stages ("chunks" when V > 1); the stage -> rank map is part of
// the Program, not implied by these numbers.
#pragma once

#include <compare>
#include <cstddef>
#include <functional>

namespace pipetwin::schedule {

template <class Tag>
struct Id {
  int value = 0;
  constexpr Id() = default;
  constexpr explicit Id(int v) : value(v) {}
  friend constexpr auto operator<=>(Id, Id) = default;
};

using RankId = Id<struct RankTag>;
using StageId = Id<struct StageTag>;
using MicrobatchId = Id<struct MicrobatchTag>;

}  // namespace pipetwin::schedule

template <class Tag>
struct std::hash<pipetwin::schedule::Id<Tag>> {
  std::size_t operator()(pipetwin::schedule::Id<Tag> id) const noexcept {
    return std::hash<int>{}(id.value);
  }
};
