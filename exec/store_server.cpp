// StoreServer: a c10d TCPStore held by the launcher.
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "exec/launcher.hpp"
#include "schedule/error.hpp"

namespace pipetwin::exec {

struct StoreServer::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

StoreServer::StoreServer(int port, double timeout_s) : impl_(std::make_unique<Impl>()) {
  c10d::TCPStoreOptions o;
  o.port = static_cast<std::uint16_t>(port);
  o.isServer = true;
  o.waitWorkers = false;
  o.timeout = std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw Error("cannot start the rendezvous store on port " + std::to_string(port) +
                (what.find("in use") != std::string::npos ? ": the port is in use (choose another --master-port)"
                                                           : ": " + what));
  }
}

StoreServer::~StoreServer() = default;

int StoreServer::port() const { return impl_->store->getPort(); }

}  // namespace pipetwin::exec
