// ActionClock's two clocks: the host's, and CUDA events read back once a step.
#include "exec/torch_clock.hpp"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>

namespace pipetwin::exec {

namespace {

class HostClock final : public ActionClock {
 public:
  explicit HostClock(const Comm& comm) : comm_(comm) {}
  void begin_step() override { times_.clear(); }
  std::size_t start() override {
    times_.push_back({comm_.now(), 0});
    return times_.size() - 1;
  }
  void stop(std::size_t token) override { times_[token].second = comm_.now(); }
  std::vector<std::pair<double, double>> resolve() override { return times_; }

 private:
  const Comm& comm_;
  std::vector<std::pair<double, double>> times_;
};

// Events on the current stream, read back once per step against a reference
// event whose host time is known (taken after a synchronize).
class CudaClock final : public ActionClock {
 public:
  explicit CudaClock(const Comm& comm) : comm_(comm) {}
  void begin_step() override {
    events_.clear();
    torch::cuda::synchronize();
    reference_ = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    reference_->record();
    reference_->synchronize();
    reference_host_ = comm_.now();
  }
  std::size_t start() override {
    events_.emplace_back(std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault),
                         std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault));
    events_.back().first->record();
    return events_.size() - 1;
  }
  void stop(std::size_t token) override { events_[token].second->record(); }
  std::vector<std::pair<double, double>> resolve() override {
    torch::cuda::synchronize();
    std::vector<std::pair<double, double>> out;
    for (const auto& [a, b] : events_) {
      out.emplace_back(reference_host_ + reference_->elapsed_time(*a) / 1e3,
                       reference_host_ + reference_->elapsed_time(*b) / 1e3);
    }
    return out;
  }

 private:
  const Comm& comm_;
  std::unique_ptr<at::cuda::CUDAEvent> reference_;
  double reference_host_ = 0;
  std::vector<std::pair<std::unique_ptr<at::cuda::CUDAEvent>, std::unique_ptr<at::cuda::CUDAEvent>>> events_;
};

}  // namespace

std::unique_ptr<ActionClock> make_clock(const Comm& comm, bool cuda) {
  if (cuda) return std::make_unique<CudaClock>(comm);
  return std::make_unique<HostClock>(comm);
}

}  // namespace pipetwin::exec
