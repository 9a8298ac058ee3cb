// TCPStore rendezvous: rank 0 serves, the others connect; c10d errors become BackendError.
#include "executor/comm/rendezvous.h"

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "executor/errors.h"
#include "executor/comm/rendezvous_impl.h"

namespace shardtune::exec {
namespace {

std::chrono::milliseconds Millis(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000.0));
}

std::string Where(const RendezvousOptions& o) {
  return "rank " + std::to_string(o.rank) + ": rendezvous at " + o.master_addr + ":" +
         std::to_string(o.master_port);
}

}  // namespace

Rendezvous::Rendezvous(RendezvousOptions options, std::unique_ptr<Impl> impl)
    : options_(std::move(options)), impl_(std::move(impl)) {}

Rendezvous::~Rendezvous() = default;

std::unique_ptr<Rendezvous> Rendezvous::Connect(const RendezvousOptions& o) {
  c10d::TCPStoreOptions t;
  t.port = static_cast<std::uint16_t>(o.master_port);
  t.isServer = o.rank == 0;
  t.numWorkers = static_cast<std::size_t>(o.world_size);
  t.waitWorkers = true;
  t.timeout = Millis(o.timeout_s);
  auto impl = std::make_unique<Impl>();
  try {
    impl->store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, t);
  } catch (const std::exception& e) {
    // c10d's server socket reports a port someone else holds with strerror(EADDRINUSE)
    // (torch/csrc/distributed/c10d/socket.cpp: "(errno: 98 - Address already in use)").
    if (t.isServer && std::string(e.what()).find(std::strerror(EADDRINUSE)) != std::string::npos) {
      throw PortInUseError(Where(o) + " failed: the port is taken: " + e.what());
    }
    throw BackendError(Where(o) +
                       " failed (is MASTER_PORT free and every rank started?): " + e.what());
  }
  // Ranks started by `shardtune run` share their launch's id (executor/train/launcher.cc): every
  // key goes under it, so two launches handed the same port on one machine cannot exchange
  // addresses (seen once: two concurrent tests' ranks paired across runs and both failed). The
  // variable is the launcher's, not a user setting; ranks started otherwise have none.
  if (const char* run = std::getenv("SHARDTUNE_RUN_ID"); run != nullptr && *run != '\0') {
    impl->store = c10::make_intrusive<c10d::PrefixStore>(std::string(run), impl->store);
  }
  return std::unique_ptr<Rendezvous>(new Rendezvous(o, std::move(impl)));
}

void Rendezvous::Set(const std::string& key, const std::vector<uint8_t>& value) {
  try {
    impl_->store->set(key, value);
  } catch (const std::exception& e) {
    throw BackendError(Where(options_) + ": set " + key + ": " + e.what());
  }
}

std::vector<uint8_t> Rendezvous::Get(const std::string& key) {
  try {
    return impl_->store->get(key);
  } catch (const std::exception& e) {
    throw BackendError(Where(options_) + ": get " + key + ": " + e.what());
  }
}

}  // namespace shardtune::exec
