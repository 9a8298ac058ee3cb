// The plan search behind `shardtune tune`: enumerate FSDP plans for a model, cluster and global
// batch; prune by a memory lower bound, then by a time lower bound against the current top-k;
// simulate the rest; rank by the objective; keep the Pareto front of memory vs throughput and
// say why every other plan lost.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"
#include "simulator/simulate.h"

namespace shardtune::planner {

enum class Objective { kThroughput, kMemory, kCost };
const char* ToString(Objective o);

struct SearchSpace {
  // Each list is searched in full; an empty list means the default set for the cluster.
  std::vector<model::ShardingStrategy> strategies;
  std::vector<int> hybrid_shard_groups;          // default: divisors of the world that keep
                                                 // a group inside a node, plus whole nodes
  std::vector<model::WrapPolicy> wraps;          // default: block, block with separate
                                                 // embedding and head units, every:2, every:4
  std::vector<int> micro_batches;                // default: divisors of the per-rank batch
  std::vector<model::Checkpointing> checkpointing;  // default: none, selective, every:2, full
  std::vector<model::Offload> offloads;          // default: none, optimizer, all
  std::vector<bool> forward_prefetch;            // default: false, true
  std::vector<model::BackwardPrefetch> backward_prefetch;  // default: pre, none
  // Ulysses context-parallel degrees. Default: every cp verl accepts for the model (divides
  // num_heads; num_kv_heads divides it or it divides num_kv_heads) that divides the world and
  // seq_len, keeps the cp group inside a node, and leaves a whole number of sequences per
  // data-parallel rank. Values that break those rules are skipped, never simulated.
  std::vector<int> cp_sizes;
  // Expert-parallel degrees (Plan::ep). Default: the base plan's ep, and for an MoE model under
  // --modeling torchtitan every divisor of num_experts that keeps the ep group inside a node
  // (torchtitan's all-to-alls over NVLink). Values a plan's shard group cannot hold are skipped.
  std::vector<int> ep_sizes;
  // How the LM head and loss run (Plan::loss_kernel). Default: the base plan's. With
  // fused_linear listed, plans that cannot use it (Plan::Problems: logits held, an lm_head
  // adapter) are skipped.
  std::vector<model::LossKernel> loss_kernels;
};

struct SearchRequest {
  int64_t global_batch = 0;  // sequences per optimizer step over the whole job
  int64_t seq_len = 0;
  Objective objective = Objective::kThroughput;
  double min_tokens_per_s = 0;        // kMemory: throughput floor
  double price_per_gpu_hour = 0;      // kCost: dollars per GPU-hour
  int top_k = 5;
  model::Plan base;                   // knobs not searched (dtypes, optimizer, modeling, ...)
  SearchSpace space;
  sim::SimOptions options;
  // false: the exhaustive search (for tests): every plan walked in full (the model-state bound
  // still names the reason it fails, and the walk must agree), replayed through the caching
  // allocator, and simulated when it fits; nothing pruned by time. Same answer, more work.
  bool prune = true;
  // The caching-allocator replay (sim::MemoryOptions::allocator_replay) costs about as much as the
  // rest of a plan's memory estimate: by default the search screens plans with the
  // fragmentation allowance and replays only the plans it is about to list in `top` (dropping any
  // the replay finds out of memory). true: replay every memory-checked plan.
  bool replay_every_plan = false;
  // After the search, narrow the fastest checkpointing plans to first:K (checkpoint_refine.h).
  // false: the list is only what the space enumerates (tune --export: no format says first:K).
  bool refine_block_checkpointing = true;
  // When no plan fits in memory and the base plan trains without activation offload: search again
  // with verl's (Plan::activation_offload verl_async) and say in advice_if_none what fits with it.
  bool try_activation_offload = true;
  // Threads evaluating plans; 0: std::thread::hardware_concurrency(). The answer is the same for
  // any number (tests/planner/search_test.cc).
  int jobs = 0;
};

struct Candidate {
  model::Plan plan;
  std::string key;             // compact description, unique per plan
  double step_time_s = 0, tokens_per_s = 0, mfu = 0;
  double exposed_comm_s = 0, compute_s = 0;
  Bytes required, capacity;
  std::string peak_phase;
  double objective = 0;        // lower is better
  double dollars_per_million_tokens = 0;
  std::string why_not_best;    // filled for ranked plans after the first
};

struct Rejection {
  std::string reason;          // grouped, e.g. "OOM: model states alone exceed the GPU"
  int count = 0;
  std::string example;         // one plan key and the figure, e.g. "... needs 91.2 GiB"
  Bytes smallest_required;     // the least memory any plan in the group needed
};

// What the search found for one parallel layout, a (cp, ep) pair: does any plan with it fit, and
// why (not). Without MoE expert parallelism in the search, one per cp.
struct CpVerdict {
  int cp = 1;
  int ep = 1;                // expert-parallel degree (model::Plan::ep)
  int64_t plans = 0;         // plans enumerated with this layout
  int64_t fitting = 0;       // of those, plans found to fit (simulated or pruned by time)
  // Plans ruled out as slower than the top plans by a time bound known before the walk, whose
  // memory verdict was not booked (the fast search did not walk most of them).
  int64_t slower_by_compute = 0;
  Bytes smallest_required;   // least per-GPU need over its memory-checked plans
  std::string smallest_key;  // the plan that needed it
  // Over the plans a lower bound ruled out (not walked): the least bound, its plan and what it
  // counts ("model states", "model states and what forward keeps for backward").
  Bytes smallest_bound;
  std::string smallest_bound_key, smallest_bound_what;
  // The two largest categories at that plan's peak, e.g. {"activations saved for backward", ..}.
  std::vector<std::pair<std::string, Bytes>> smallest_peak_top;
  std::string smallest_peak_phase;
  double best_step_time_s = 0;  // fastest simulated plan that fits (0: none simulated)
  std::string best_key;
  model::Plan best_plan;        // that plan
  Bytes best_required;  // that plan's per-GPU need
  // The caching-allocator replay (which judges the listed plans) found that plan out of memory,
  // needing best_replay_required: its memory walk fit by allocated bytes, its reserved do not.
  bool best_replay_out_of_memory = false;
  Bytes best_replay_required;
  std::string why;      // one sentence with the figures, e.g. "cp=1: no plan fits: ..."
};

struct SearchResult {
  std::vector<Candidate> top;      // best first
  std::vector<Candidate> pareto;   // memory vs throughput, by required memory
  std::vector<Rejection> rejected;
  std::vector<CpVerdict> cp_verdicts;  // one per (cp, ep) searched, ascending by cp then ep
  // The work done: plans enumerated, ruled out by the model-state bound, walked for memory,
  // replayed through the caching allocator, ruled out by the time bound, simulated in time.
  int64_t enumerated = 0, pruned_by_memory_bound = 0, pruned_by_time_bound = 0;
  int64_t memory_checked = 0, replayed = 0, simulated = 0;
  // Plans ruled out by a time bound known before any walk (never walked), and the walks those
  // bounds took (one plan per combination of the knobs each depends on; each is that plan's
  // memory walk too and counts in memory_checked, except in the exhaustive search, which walks
  // the plan again to check its bounds).
  int64_t pruned_before_walk = 0, prewalk_bound_walks = 0;
  int threads = 1;
  int64_t equivalent_hidden = 0;   // top-k entries skipped as equal to the one above
  Bytes smallest_required;         // over everything checked (for "nothing fits" answers)
  std::string advice_if_none;      // what would make the model fit, when nothing does
  // When nothing fits: "memory" (every plan runs out) or "constraint" (plans fit in memory but a
  // request's constraint, e.g. the throughput floor, rules them out); "" otherwise.
  std::string no_plan_reason;
  double search_s = 0;  // wall seconds of SearchPlans
  // Plans RefineBlockCheckpointing added to `top` (first:K in place of full checkpointing).
  int refined_checkpointing = 0;
  // ... of which per-block activation policies (checkpoint_refine.h: every block kept, rerun
  // whole, or op-level SAC with its own save set).
  int refined_block_policies = 0;
};

// The cp degrees the default search space holds for this model, cluster and request.
std::vector<int> DefaultCpSizes(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                const SearchRequest& request);

// REQUIRES: request.global_batch divisible by the world size, seq_len valid for the model.
// `progress` (may be empty) is called with (done, total) now and then. Deterministic.
SearchResult SearchPlans(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                         const SearchRequest& request,
                         const std::function<void(int64_t, int64_t)>& progress = {});

// All plans of the space, in search order (exposed for tests and the exhaustive check).
std::vector<model::Plan> EnumeratePlans(const model::ModelSpec& spec,
                                        const profiles::ClusterSpec& cluster,
                                        const SearchRequest& request);
// Plans whose objectives (step times) differ by less than this fraction are ties the time model
// cannot separate: its median error against measured FSDP2 runs is 3.8% (simulator/README.md,
// "How the time model works"), so 2% is well inside it (issue #46 names 2%). Such ties go to
// the safer plan (SaferThan).
inline constexpr double kRankTolerance = 0.02;
// a is the safer of two near-tied plans: it offloads less (none < optimizer < all), then needs
// less memory (more headroom), then sets fewer knobs away from FSDP2's defaults (forward
// prefetch on, backward prefetch other than pre). false when neither is.
bool SaferThan(const Candidate& a, const Candidate& b);
// Within the prefix of `top` (best first) whose objective is within kRankTolerance of the best,
// the safer plans first (stable: otherwise the objective's order). Not for the memory objective.
void OrderNearTiesBySafety(std::vector<Candidate>* top);

std::string PlanKey(const model::Plan& p);
// What the list ranks a candidate by under `request`'s objective (lower is better): its step
// time, or its required memory for Objective::kMemory.
double ObjectiveOf(const Candidate& c, const SearchRequest& request);
// The list entry of `plan` simulated as `report` (memory figures the report's).
Candidate CandidateOf(const model::Plan& plan, const sim::SimReport& report, const SearchRequest& request,
                      const profiles::ClusterSpec& cluster);
// The plan as the plan flags that reproduce it over the search's base plan (issue #49 item 6: the
// keys above do not paste back), e.g. "--strategy hybrid_shard --shard-group 2 --wrap block
// --wrap-embedding --wrap-head --micro-batch 1 --grad-accum 8 --checkpointing selective
// --offload none --backward-prefetch pre". Dimensions the search does not vary (dtypes,
// optimizer, modeling) are left to the base plan's flags.
std::string PlanAsFlags(const model::Plan& p);

}  // namespace shardtune::planner
