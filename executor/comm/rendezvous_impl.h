// The c10d store behind Rendezvous, for the backends that build process groups on it.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "executor/comm/rendezvous.h"

namespace shardtune::exec {

struct Rendezvous::Impl {
  c10::intrusive_ptr<c10d::Store> store;
};

}  // namespace shardtune::exec
