// SpinBackoff, and the epoll_wait, recv and writev that pipetwin-exec puts in
// front of libc's (see gloo_backoff.hpp). This file is linked into the
// executor as an object, so that its definitions are the ones
// libtorch_cpu.so binds to. recv and writev only count the calling thread's
// I/O; epoll_wait backs off on Gloo's loop thread alone, every other thread
// goes straight to libc's. Sanitizer builds keep their own interceptors.
#include "exec/gloo_backoff.hpp"

#include <dlfcn.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace pipetwin::exec {

double SpinBackoff::returned(int n, std::uint64_t data, std::uint32_t flags, std::uint64_t io) {
  const bool idle_repeat = n == 1 && have_last_ && data == last_data_ && flags == last_flags_ && io == last_io_;
  if (idle_repeat) {
    ++idle_repeats_;
  } else {
    idle_repeats_ = 0;
    sleep_s_ = 0;
  }
  have_last_ = n == 1;
  last_data_ = data;
  last_flags_ = flags;
  last_io_ = io;
  if (idle_repeats_ < limits_.repeats) return 0;
  sleep_s_ = sleep_s_ == 0 ? limits_.first_s : std::min(2 * sleep_s_, limits_.longest_s);
  ++backoffs_;
  return sleep_s_;
}

namespace {
std::atomic<std::uint64_t> g_backoffs{0};
}  // namespace

std::uint64_t gloo_backoffs() { return g_backoffs.load(std::memory_order_relaxed); }

}  // namespace pipetwin::exec

#ifndef PIPETWIN_NO_INTERPOSE
namespace {
thread_local std::uint64_t t_io = 0;

template <class F>
F libc(const char* name) {
  return reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

bool enabled() {
  static const bool on = [] {
    const char* v = std::getenv("PIPETWIN_GLOO_BACKOFF");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// Gloo names its loop thread; the name is read once per thread.
bool gloo_loop_thread() {
  thread_local const bool is = [] {
    char name[16] = {};
    return ::pthread_getname_np(::pthread_self(), name, sizeof name) == 0 && std::strcmp(name, "gloo_tcp_loop") == 0;
  }();
  return is;
}
}  // namespace

extern "C" ssize_t recv(int fd, void* buf, size_t len, int flags) {
  using F = ssize_t (*)(int, void*, size_t, int);
  static const F real = libc<F>("recv");
  ++t_io;
  return real(fd, buf, len, flags);
}

extern "C" ssize_t writev(int fd, const struct iovec* iov, int iovcnt) {
  using F = ssize_t (*)(int, const struct iovec*, int);
  static const F real = libc<F>("writev");
  ++t_io;
  return real(fd, iov, iovcnt);
}

extern "C" int epoll_wait(int epfd, struct epoll_event* events, int maxevents, int timeout) {
  using F = int (*)(int, struct epoll_event*, int, int);
  static const F real = libc<F>("epoll_wait");
  if (!enabled() || !gloo_loop_thread()) return real(epfd, events, maxevents, timeout);
  thread_local pipetwin::exec::SpinBackoff backoff;
  thread_local double pending_sleep = 0;
  if (pending_sleep > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(pending_sleep));
    pipetwin::exec::g_backoffs.fetch_add(1, std::memory_order_relaxed);
  }
  const int n = real(epfd, events, maxevents, timeout);
  const int saved = errno;
  const epoll_event first = n >= 1 ? events[0] : epoll_event{};
  pending_sleep = backoff.returned(n, first.data.u64, first.events, t_io);
  errno = saved;
  return n;
}
#endif
