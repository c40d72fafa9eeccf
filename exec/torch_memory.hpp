// Memory measured by each rank (internal to exec/: includes LibTorch).
//
// On the CPU, a counting allocator wraps LibTorch's: every tensor allocation
// is counted while it lives, and attributed to the stage whose forward (or
// receive) made it, so the bytes a stage keeps stashed are measured, not
// estimated. On CUDA, the caching allocator's own statistics are read.
#pragma once

#include <cstdint>
#include <vector>

namespace at {
class Tensor;
}

namespace pipetwin::exec {

class MemoryMeter {
 public:
  // Installs the counting CPU allocator (once per process) for `stages` stages.
  static MemoryMeter& install(int stages);

  // Allocations made while a tag is set belong to that stage.
  class Tag {
   public:
    Tag(MemoryMeter& meter, int stage);
    ~Tag();
    Tag(const Tag&) = delete;
    Tag& operator=(const Tag&) = delete;

   private:
    MemoryMeter& meter_;
    int previous_;
  };

  // Counts `tensor`'s storage (allocated through the meter) as `stage`'s
  // from now on, whichever stage (or none) it was counted under: what a
  // deferred weight gradient keeps from its I to its W.
  void attribute(const at::Tensor& tensor, int stage);

  std::int64_t live_bytes() const;        // all tensors on the CPU now
  std::int64_t peak_bytes() const;        // since the last reset
  std::int64_t stage_bytes(int stage) const;
  std::int64_t stage_peak_bytes(int stage) const;
  void reset_peaks();

  static std::int64_t peak_rss_bytes();   // the process's high-water mark
  // CUDA caching allocator: bytes allocated now and at the peak on `device`.
  static std::int64_t cuda_live_bytes(int device);
  static std::int64_t cuda_peak_bytes(int device);
  static void cuda_reset_peak(int device);

  struct State;  // the counters, shared with the allocator

 private:
  explicit MemoryMeter(State* state) : state_(state) {}
  State* state_;
};

}  // namespace pipetwin::exec
