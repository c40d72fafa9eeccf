// The local launcher of `pipetwin run`: K processes of this executable on
// this host, each with the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and a TCPStore the launcher
// holds. It watches them: when one fails or dies, the others are stopped
// (SIGTERM, then SIGKILL after a grace period) and the error names the rank;
// Ctrl-C (SIGINT) or SIGTERM on the launcher stops every rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace pipetwin::exec {

// The launcher's TCPStore server (so no port has to be guessed free).
class StoreServer {
 public:
  // port 0: any free port. Throws pipetwin::Error when the port is in use.
  StoreServer(int port, double timeout_s);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct LaunchOptions {
  int ranks = 1;
  int master_port = 0;     // 0: any free port
  double timeout_s = 120;  // of the store
  double grace_s = 5;      // between SIGTERM and SIGKILL
};

// Runs `argv` (argv[0] is replaced by this executable) as ranks 0..K-1 and
// waits. Throws pipetwin::Error naming the rank that failed first; exits the
// process with 130 when interrupted.
void launch_local(const std::vector<std::string>& argv, const LaunchOptions& options);

}  // namespace pipetwin::exec
