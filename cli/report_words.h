// The sentences that say how a memory verdict was reached ("judged on: ..."), written from the
// structured reports the simulator returns (issue #48 item 2: reports carry structure, cli/
// writes the sentences).
#pragma once

#include <string>

#include "simulator/colocation.h"
#include "simulator/memory_model.h"

namespace shardtune::cli {

// What MemoryReport::fits compared: the allocator replay, or the peak plus an allowance (the
// fragmentation percent or expandable segments' page rounding), or a CPU rank's share of RAM.
std::string JudgedOnSentence(const sim::MemoryReport& r);
// What ColocationReport::fits compared: the running role plus the idle roles' residue.
std::string JudgedOnSentence(const sim::ColocationReport& c);

// The plan's per-block activation policy (model::DescribeBlockPolicy), and where the model's
// blocks are MoE ones under op-level SAC what w1, w3, w2 name there (the routed experts' grouped
// GEMMs) and that the router reruns (model/activations.cc TorchtitanOpSac).
std::string BlockPolicyLine(const model::ModelSpec& spec, const model::Plan& plan);

}  // namespace shardtune::cli
