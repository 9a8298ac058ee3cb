// Rendezvous of the ranks of one run: a c10d TCPStore served by rank 0 at MASTER_ADDR:MASTER_PORT
// (the variables torchrun and Slurm jobs set). Backends build their process groups on it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "executor/rank_env.h"

namespace shardtune::exec {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int rank = 0;
  int world_size = 1;
  double timeout_s = 60;  // store connection and collective timeout
};

// The store of the launched ranks `env` names (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), with
// `timeout_s`: what `run` and `probe` connect to.
inline RendezvousOptions RendezvousOptionsOf(const RankEnv& env, double timeout_s) {
  return {env.master_addr, env.master_port, env.rank, env.world_size, timeout_s};
}

// Holds the store; process groups keep their own reference to it. Not copyable.
class Rendezvous {
 public:
  // Connects to (rank 0: serves) the store. Throws BackendError naming the address when the
  // store cannot be reached within timeout_s.
  static std::unique_ptr<Rendezvous> Connect(const RendezvousOptions& options);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const RendezvousOptions& options() const { return options_; }
  void Set(const std::string& key, const std::vector<uint8_t>& value);
  // Blocks until `key` is set (up to the timeout). Throws BackendError.
  std::vector<uint8_t> Get(const std::string& key);

  struct Impl;  // the c10d store, for backends (executor/comm/rendezvous_impl.h)
  Impl& impl() { return *impl_; }

 private:
  Rendezvous(RendezvousOptions options, std::unique_ptr<Impl> impl);
  RendezvousOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardtune::exec
