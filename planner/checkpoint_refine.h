// After the plan search: per-block activation checkpointing (issue #46, its first policy). A plan
// that checkpoints every block (full) pays a block's forward again for every block, and selective
// recompute reruns pieces of every block, although the plan may fit with only its first k blocks
// rerun whole and the rest keeping their activations, as Megatron-LM's --recompute-method block
// --recompute-num-layers k runs it (model::Plan kFirstK, "first:K"). For the fastest checkpointing
// plans of the list, the fewest leading blocks that must rerun for the plan to fit are found on
// the same caching-allocator replay that confirmed the plan, and the plan with first:K joins the
// list when it is faster. Likewise first:K+selective, the other blocks running selective
// recompute, bracketed between selective everywhere and full: it fits with fewer whole reruns.
#pragma once

#include "model/model_spec.h"
#include "planner/search.h"
#include "profiles/cluster.h"

namespace shardtune::planner {

// How many of the list's checkpointing plans are refined (the fastest ones; each costs a few
// allocator replays and one simulation).
inline constexpr int kRefinedPlans = 2;

// Adds, for each of the first kRefinedPlans plans in result->top that rerun something (full,
// every:K or selective checkpointing), the same plan with first:K for the least K whose replayed
// memory fits (found by bracketing between none, which the search found does not fit or is not
// listed, and full, which fits; the replayed need never grows as more blocks rerun), simulated
// for its step time, when it is faster than the plan it came from by more than kRankTolerance
// (it just fits: within the time model's error the roomier plan stays). Also tried, under the
// same rule: first:K+selective; where the blocks are alike, a policy per block (keep, full,
// selective, op-level SAC save sets); for the fastest one, verl's activation offload of the first
// K blocks instead of any rerun, and the first K blocks offloaded beside the per-block policy of
// the rest where the host holds only some blocks' copies or their copies show. Then re-sorts the list
// by the objective (near ties by safety, planner::OrderNearTiesBySafety), keeps request.top_k
// entries and rewrites the "why not #1" lines. Does nothing for the memory objective, without
// request.refine_block_checkpointing (tune --export), or when request.space.checkpointing is
// given and does not list kFirstK (a pinned --checkpointing, --export verl's space).
// Deterministic. Sets result->refined_checkpointing to the number of plans added.
void RefineBlockCheckpointing(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                              const SearchRequest& request, SearchResult* result);

}  // namespace shardtune::planner
