// SpinBackoff's rule, and the epoll_wait the executor puts in front of libc's
// (exec/gloo_backoff.hpp): run on a real epoll set whose socket stays
// readable, from threads named as Gloo names its loop and otherwise.
#include "exec/gloo_backoff.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

namespace pe = pipetwin::exec;

TEST(SpinBackoff, IdleRepeatsOfOneEventBackOffDoublingUpToTheLongest) {
  pe::SpinBackoff b;
  EXPECT_EQ(b.returned(1, 7, EPOLLIN, 0), 0);
  EXPECT_EQ(b.returned(1, 7, EPOLLIN, 0), 0);        // first idle repeat
  EXPECT_DOUBLE_EQ(b.returned(1, 7, EPOLLIN, 0), 20e-6);  // second: back off
  EXPECT_DOUBLE_EQ(b.returned(1, 7, EPOLLIN, 0), 40e-6);
  for (int i = 0; i < 10; ++i) b.returned(1, 7, EPOLLIN, 0);
  EXPECT_DOUBLE_EQ(b.returned(1, 7, EPOLLIN, 0), 320e-6);
  EXPECT_EQ(b.backoffs(), 13U);  // every return from the second idle repeat on
}

TEST(SpinBackoff, IoAnotherEventATimeoutOrSeveralEventsEndTheSpin) {
  for (int end = 0; end < 4; ++end) {
    pe::SpinBackoff b;
    for (int i = 0; i < 5; ++i) b.returned(1, 7, EPOLLIN, 3);
    ASSERT_GT(b.returned(1, 7, EPOLLIN, 3), 0);
    switch (end) {
      case 0: EXPECT_EQ(b.returned(1, 7, EPOLLIN, 4), 0); break;  // it read: work, not a spin
      case 1: EXPECT_EQ(b.returned(1, 8, EPOLLIN, 3), 0); break;
      case 2: EXPECT_EQ(b.returned(0, 0, 0, 3), 0); break;
      case 3: EXPECT_EQ(b.returned(2, 7, EPOLLIN, 3), 0); break;
    }
    // and a spin starts again from the first sleep
    EXPECT_EQ(b.returned(1, 9, EPOLLIN, 4), 0);
    EXPECT_EQ(b.returned(1, 9, EPOLLIN, 4), 0);
    EXPECT_DOUBLE_EQ(b.returned(1, 9, EPOLLIN, 4), 20e-6);
  }
}

TEST(SpinBackoff, ADifferentFlagIsAnotherEvent) {
  pe::SpinBackoff b;
  for (int i = 0; i < 3; ++i) b.returned(1, 7, EPOLLIN, 0);
  EXPECT_EQ(b.returned(1, 7, EPOLLIN | EPOLLOUT, 0), 0);
}

namespace {
// Waits `rounds` times on a socket that stays readable (nothing reads it
// unless `read_between`), in a thread called `name`; returns the backoffs
// taken meanwhile.
std::uint64_t spin(const char* name, int rounds, bool read_between) {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  EXPECT_EQ(::write(fds[1], "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", 64), 64);
  const int ep = ::epoll_create1(0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 42;
  EXPECT_EQ(::epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], &ev), 0);
  const auto before = pe::gloo_backoffs();
  int returned = 0;
  std::thread t([&] {
    ::pthread_setname_np(::pthread_self(), name);
    for (int i = 0; i < rounds; ++i) {
      epoll_event got[4];
      returned += ::epoll_wait(ep, got, 4, 1000);
      char c;
      if (read_between) {
        ASSERT_EQ(::recv(fds[0], &c, 1, 0), 1);
      }
    }
  });
  t.join();
  EXPECT_EQ(returned, rounds);  // every wait saw the socket ready
  ::close(ep);
  ::close(fds[0]);
  ::close(fds[1]);
  return pe::gloo_backoffs() - before;
}
}  // namespace

TEST(GlooBackoff, TheLoopThreadBacksOffASpinAndNoOtherThreadDoes) {
  if (!pe::kGlooBackoffInterposed) GTEST_SKIP() << "sanitizer builds keep their own epoll_wait";
  // The first two returns are not a spin yet; the sleep the last return asks
  // for would come before a 41st wait.
  EXPECT_EQ(spin("gloo_tcp_loop", 40, false), 37U);
  EXPECT_EQ(spin("other_thread", 40, false), 0U);
  EXPECT_EQ(spin("gloo_tcp_loop", 40, true), 0U);    // it read between the waits: work
}
