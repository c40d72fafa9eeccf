// For tests that start the pipetwin binary (or any command) through a shell,
// with a scratch folder each.
#pragma once

#include <arpa/inet.h>
#include <ftw.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

namespace pipetwin::test {

struct Result {
  int code = -1;    // the exit status; -1 when the shell did not exit normally
  std::string out;  // what the command printed, stdout and stderr together if it says 2>&1
};

// Runs `command` through /bin/sh and collects its standard output.
inline Result run_shell(const std::string& command) {
  Result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (const auto n = std::fread(buf.data(), 1, buf.size(), pipe)) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Removes `dir` and everything under it (nothing when it is not there)
// without std::filesystem::remove_all: a libtorch.so that exports its own
// std::filesystem symbols (the torch 2.11 of a GPU machine's image did)
// takes the place of the C++ library's in the binaries linked with it, and
// its remove_all crashed on a folder that was not empty (a second
// --gtest_repeat iteration of test_exec_cuda).
inline void remove_tree(const std::filesystem::path& dir) {
  ::nftw(dir.c_str(), [](const char* path, const struct stat*, int, struct FTW*) { return std::remove(path); }, 16,
         FTW_DEPTH | FTW_PHYS);
}

// An empty folder TMP/pipetwin_<suite>_<pid>/<name>.
inline std::filesystem::path scratch_dir(const std::string& suite, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("pipetwin_" + suite + "_" + std::to_string(::getpid())) / name;
  remove_tree(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// A TCP port on the loopback that nothing listens on now (the kernel's
// choice), for a rendezvous store that tests start by hand.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace pipetwin::test
