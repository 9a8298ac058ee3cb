// The walk through training steps that feeds a MemoryLedger (internal to the memory model).
#pragma once

#include <vector>

#include "model/activations.h"
#include "model/model_spec.h"
#include "model/module_tree.h"
#include "model/plan.h"
#include "simulator/memory_ledger.h"

namespace shardtune::sim {

struct WalkSetup {
  const model::ModelSpec* spec = nullptr;
  const model::Plan* plan = nullptr;
  std::vector<model::FsdpUnit> units;
  int shard_n = 1;        // ranks a unit is sharded over
  int64_t seq_len = 1;    // S
  model::BlockActivations block;
  model::ActivationLedger head;
};

// Walks steps 0 and 1 (all micro-batches, optimizer, zero_grad) into `ledger`.
void WalkSteps(const WalkSetup& setup, MemoryLedger* ledger);

// Bytes per element of the sharded (master) parameters as they live on the GPU.
int64_t ShardedParamBytesPerElement(const model::Plan& plan);

}  // namespace shardtune::sim
