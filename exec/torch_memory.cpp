// MemoryMeter: a counting wrapper around LibTorch's CPU allocator.
#include "exec/torch_memory.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <sys/resource.h>

#include <atomic>
#include <memory>

namespace pipetwin::exec {

struct MemoryMeter::State {
  struct Counter {
    std::atomic<std::int64_t> live{0}, peak{0};
    void add(std::int64_t n) {
      const std::int64_t now = live.fetch_add(n) + n;
      std::int64_t p = peak.load();
      while (now > p && !peak.compare_exchange_weak(p, now)) {
      }
    }
  };
  explicit State(int stages) : stages(static_cast<std::size_t>(stages)) {}
  Counter total;
  std::vector<Counter> stages;
  std::atomic<int> tag{-1};
};

namespace {

// Allocates like LibTorch's CPU allocator (64-byte aligned), with a 64-byte
// header in front of the data holding its size and stage; the context is the
// data pointer itself, so raw_allocate()/raw_deallocate() work as well.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(MemoryMeter::State* state) { g_state = state; }

  c10::DataPtr allocate(std::size_t n) override {
    auto* base = static_cast<char*>(c10::alloc_cpu(n + kHeader));
    auto* h = reinterpret_cast<Header*>(base);
    h->bytes = static_cast<std::int64_t>(n);
    h->tag = g_state->tag.load(std::memory_order_relaxed);
    g_state->total.add(h->bytes);
    if (h->tag >= 0) g_state->stages[h->tag].add(h->bytes);
    void* data = base + kHeader;
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &release; }

  static void attribute(const c10::DataPtr& data, int stage) {
    if (data.get_deleter() != &release || data.get() == nullptr) return;
    auto* h = reinterpret_cast<Header*>(static_cast<char*>(data.get()) - kHeader);
    if (h->tag == stage) return;
    if (h->tag >= 0) g_state->stages[h->tag].live.fetch_sub(h->bytes);
    h->tag = stage;
    if (stage >= 0) g_state->stages[stage].add(h->bytes);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

 private:
  static constexpr std::size_t kHeader = 64;  // keeps the data 64-byte aligned
  struct Header {
    std::int64_t bytes;
    int tag;
  };
  static void release(void* data) {
    if (data == nullptr) return;
    char* base = static_cast<char*>(data) - kHeader;
    const auto* h = reinterpret_cast<const Header*>(base);
    g_state->total.live.fetch_sub(h->bytes);
    if (h->tag >= 0) g_state->stages[h->tag].live.fetch_sub(h->bytes);
    c10::free_cpu(base);
  }
  static inline MemoryMeter::State* g_state = nullptr;
};

}  // namespace

MemoryMeter& MemoryMeter::install(int stages) {
  // Process-wide and never freed: tensors may outlive any object of ours.
  static auto* state = new State(stages);
  static auto* allocator = [] {
    auto* a = new CountingAllocator(state);
    c10::SetCPUAllocator(a, /*priority=*/1);
    return a;
  }();
  (void)allocator;
  static MemoryMeter meter(state);
  return meter;
}

MemoryMeter::Tag::Tag(MemoryMeter& meter, int stage) : meter_(meter), previous_(meter.state_->tag.exchange(stage)) {}
MemoryMeter::Tag::~Tag() { meter_.state_->tag.store(previous_); }

void MemoryMeter::attribute(const at::Tensor& tensor, int stage) {
  if (!tensor.defined() || !tensor.has_storage()) return;
  CountingAllocator::attribute(tensor.storage().data_ptr(), stage);
}

std::int64_t MemoryMeter::live_bytes() const { return state_->total.live.load(); }
std::int64_t MemoryMeter::peak_bytes() const { return state_->total.peak.load(); }
std::int64_t MemoryMeter::stage_bytes(int s) const { return state_->stages.at(s).live.load(); }
std::int64_t MemoryMeter::stage_peak_bytes(int s) const { return state_->stages.at(s).peak.load(); }

void MemoryMeter::reset_peaks() {
  state_->total.peak.store(state_->total.live.load());
  for (auto& c : state_->stages) c.peak.store(c.live.load());
}

std::int64_t MemoryMeter::peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::int64_t>(u.ru_maxrss) * 1024;
}

namespace {
constexpr auto kAggregate = static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE);
}

std::int64_t MemoryMeter::cuda_live_bytes(int device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device)).allocated_bytes[kAggregate].current;
}
std::int64_t MemoryMeter::cuda_peak_bytes(int device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device)).allocated_bytes[kAggregate].peak;
}
void MemoryMeter::cuda_reset_peak(int device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
}

}  // namespace pipetwin::exec
