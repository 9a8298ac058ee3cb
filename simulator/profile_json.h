// The calibrated profile (`--profile FILE`, "schema": "shardtune.profile"): values that replace
// the simulator's named guesses. Today its "memory" section overrides MemoryConstants; the
// calibration issue (#6) adds compute and collective fits to the same file.
#pragma once

#include <string>

#include "simulator/cost_model.h"
#include "simulator/memory_model.h"

namespace shardtune::sim {

struct Profile {
  std::string name;    // free text, e.g. "H100 SXM, torch 2.11, NCCL 2.28, 2026-11-13"
  MemoryConstants memory;
  CostConstants costs;  // "compute" and "network" sections
};

// Reads and validates a profile; keys absent from "memory", "compute" ({matmul_efficiency,
// attention_efficiency, memory_efficiency, host_memory_bytes_per_s_per_node}) and "network"
// ({nvlink_efficiency, pcie_efficiency, network_efficiency}) keep their defaults.
// Throws InputError naming the file and JSON pointer.
Profile ReadProfileFile(const std::string& path);

}  // namespace shardtune::sim
