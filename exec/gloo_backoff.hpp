// Gloo's TCP event loop spins where a rank has more threads than cores.
//
// gloo::transport::tcp::Loop waits in epoll_wait (level-triggered) and hands
// each ready socket to its Pair, which only try-locks its mutex: when the
// rank's main thread holds it (posting a send or a receive, a write under the
// lock), the handler returns at once and epoll_wait returns the same event
// again, with no I/O in between, until the main thread lets go. With a core
// per thread that is microseconds. With four ranks on two cores the holder is
// often preempted inside, and the loop thread spins for whole scheduler
// slices on a core the ranks need: measured on a 2-core host, gpipe K=4 M=16
// made about 43,000 epoll_wait calls a step (98% of them handling nothing),
// and its ranks used 1.6x the CPU time of the same work on one rank.
//
// SpinBackoff tells such a spin from work: the same single event returned
// again with no socket read or write by the thread since the last return,
// several times in a row. It then asks for a short sleep before the next
// wait, doubling while the spin lasts (up to `longest`), so the lock's holder
// gets the core. Any I/O, another event, a timeout or several events end it.
// pipetwin-exec applies it to Gloo's loop thread (exec/gloo_backoff.cpp);
// PIPETWIN_GLOO_BACKOFF=0 turns it off.
#pragma once

#include <cstdint>

// Sanitizer builds keep their runtime's own interceptors of these calls.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PIPETWIN_NO_INTERPOSE 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PIPETWIN_NO_INTERPOSE 1
#endif

namespace pipetwin::exec {

#ifdef PIPETWIN_NO_INTERPOSE
inline constexpr bool kGlooBackoffInterposed = false;
#else
inline constexpr bool kGlooBackoffInterposed = true;  // this build's epoll_wait, recv and writev are ours
#endif

class SpinBackoff {
 public:
  struct Limits {
    int repeats = 2;            // idle repeats in a row before backing off
    double first_s = 20e-6;     // the first sleep
    double longest_s = 320e-6;  // the sleep doubles up to this
  };
  SpinBackoff() = default;
  explicit SpinBackoff(Limits l) : limits_(l) {}

  // A wait returned n events (the first one's data and flags); io counts the
  // thread's socket reads and writes so far. Returns how long to sleep (s)
  // before waiting again: 0 unless a spin is under way.
  double returned(int n, std::uint64_t data, std::uint32_t flags, std::uint64_t io);

  std::uint64_t backoffs() const { return backoffs_; }  // sleeps asked for so far

 private:
  Limits limits_;
  bool have_last_ = false;
  std::uint64_t last_data_ = 0;
  std::uint32_t last_flags_ = 0;
  std::uint64_t last_io_ = 0;
  int idle_repeats_ = 0;
  double sleep_s_ = 0;
  std::uint64_t backoffs_ = 0;
};

// Sleeps Gloo's loop thread has taken in this process (all threads together).
std::uint64_t gloo_backoffs();

}  // namespace pipetwin::exec
