// What-if answers for one job: the same model, cluster and plan with each choice of CPU offload
// and activation checkpointing, so `estimate` can say which ones fit on the GPU and on the host.
#pragma once

#include <functional>

#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"
#include "simulator/memory_model.h"

namespace shardtune::planner {

struct Alternative {
  model::Offload offload = model::Offload::kNone;
  model::Checkpointing checkpointing = model::Checkpointing::kNone;
  Bytes gpu_required;        // per rank, the figure `fits` is judged on
  Bytes gpu_capacity;
  bool gpu_fits = false;
  Bytes host_peak_per_node;
  Bytes host_capacity_per_node;
  bool host_fits = false;
  std::string peak_phase;
  bool fits() const { return gpu_fits && host_fits; }
};

// Evaluates offload in {none, optimizer, all} x checkpointing in {none, full} with every other
// knob as in `plan`. Deterministic; order: offload-major.
std::vector<Alternative> CompareOffloadAndCheckpointing(const model::ModelSpec& spec,
                                                        const profiles::ClusterSpec& cluster,
                                                        const model::Plan& plan,
                                                        const sim::MemoryOptions& options);

// The same plan with the fused linear cross-entropy (Plan::loss_kernel fused_linear), for a plan
// that uses the materialised logits and could use it (training, logits not held, no lm_head
// adapter: Plan::Problems); `evaluated` false otherwise.
struct FusedLossAlternative {
  bool evaluated = false;
  Bytes peak_allocated, required;
  bool fits = false;
  std::string peak_phase;
};
FusedLossAlternative CompareFusedLoss(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                      const model::Plan& plan, const sim::MemoryOptions& options);

// A change the memory advice suggests, re-estimated on the same model and cluster before it is
// printed (issue #49 item 7): the flags that make it and the answer with them. `evaluated` false
// when the plan already has it or refuses it (Plan::Problems, CpProblems).
struct CheckedChange {
  std::string flags;  // e.g. "--checkpointing full"
  bool evaluated = false;
  Bytes required;
  bool fits = false;
  Bytes host_peak_per_node;  // the re-estimated job's host RAM peak (per host where nodes split)
  bool host_fits = true;
};
// The changes AdviseOnMemory may suggest beyond offload and the loss kernel: full activation
// checkpointing, Ulysses cp (the smallest degree above the plan's the model and mesh take),
// block wrapping, frozen weights loaded in bf16, and verl's activation offload.
enum class AdvisedChange { kCheckpointing, kCp, kWrap, kFrozenDtype, kActivationOffload };
CheckedChange CheckAdvisedChange(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                 const model::Plan& plan, const sim::MemoryOptions& options,
                                 AdvisedChange change);
// Re-estimates a change when the advice is about to suggest it (a walk each: asked lazily).
using ChangeChecker = std::function<CheckedChange(AdvisedChange)>;

// How many tokens one micro-batch can hold and still fit, for a plan whose micro-batches are
// packed tokens rather than padded rows: a packed plan (Plan::packed_seq_len: a token budget such
// as verl's ppo_max_token_len_per_gpu) or verl's log-prob path with use_remove_padding (loss_kernel
// verl_flash_ce, or a fused verl head without a padding mask: Plan::VerlPacksTokens). A packed
// row of whole sequences up to the plan's longest is sized up and down by bisection over
// multiples of cp x tiled_mlp_shards; the GPU verdict (required vs usable, allocator replayed)
// decides. `evaluated` false for other plans. The answer a verl user otherwise finds by running until OOM: fixed micro-batches fit
// while ppo_micro_batch_size_per_gpu x their mean length stays within max_tokens, a token budget
// while ppo_max_token_len_per_gpu x sp does.
struct TokenCapacity {
  bool evaluated = false;
  int64_t plan_tokens = 0;     // the plan's largest micro-batch (micro_batch x seq_len)
  int64_t longest_sequence = 0;
  int64_t max_tokens = 0;      // the most that fit; 0: not even one longest sequence
  Bytes required_at_max;       // required at max_tokens (when > 0)
  // The typical micro-batch when the data's mean sequence length is known (mean_seq_len > 0):
  // micro_batch x mean tokens for fixed micro-batches (never more than plan_tokens); a token
  // budget's rows fill up whatever the lengths, so theirs stays plan_tokens (only the number of
  // rows per update shrinks).
  int64_t typical_tokens = 0;
  Bytes typical_required;
  bool typical_fits = false;
  // Set by the caller for a packed plan with a length distribution (estimate --lengths
  // uniform:MIN-MAX): the largest row verl's rule formed in `sampled_steps` simulated steps under
  // the budget `sampled_budget` (model/packing.h LargestPackedRowOverSteps); 0: not sampled.
  int64_t sampled_largest_row = 0;
  int64_t sampled_budget = 0;
  int sampled_steps = 0;
  std::string sampled_lengths;  // "uniform:MIN-MAX"
};
// `plan` with its micro-batch one packed row of `tokens` tokens holding sequences of up to
// `longest` (Plan::packed_seq_len; not packed when one sequence fills the row): how a micro-batch
// of that many tokens is judged.
model::Plan PackedRowPlan(const model::Plan& plan, int64_t tokens, int64_t longest);

// `mean_seq_len` > 0 also evaluates the typical micro-batch. `known_fit_tokens` > 0: a row of
// that many tokens is known to fit (tune's winner), where the search starts. `granularity` > 1:
// the answer is a multiple of it (tune's report: fewer memory walks to stay under a second).
TokenCapacity LargestFittingMicroBatchTokens(const model::ModelSpec& spec,
                                             const profiles::ClusterSpec& cluster,
                                             const model::Plan& plan,
                                             const sim::MemoryOptions& options,
                                             int64_t mean_seq_len = 0, int64_t known_fit_tokens = 0,
                                             int64_t granularity = 1);

}  // namespace shardtune::planner
