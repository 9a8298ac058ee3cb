// Inputs every planning subcommand shares (estimate, simulate): --model, --cluster, plan flags,
// --profile, --model-load, --json; resolved and validated together, all problems in one error.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli/plan_flags.h"
#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"
#include "simulator/profile_json.h"
#include "simulator/simulate.h"

namespace shardtune::cli {

struct JobArgs {
  std::string model = "llama3-8b";
  std::string cluster = "8xH100";
  std::string model_load = "every-rank";
  std::string load_dtype = "bf16";            // dtype of the pretrained weights read at load
  std::string checkpoint_format = "sharded";  // none|sharded|full|full_cpu_offload
  std::string allocator = "default";          // default|expandable_segments
  std::string host_memory_limit;              // cgroup limit per node ("64GiB"); empty: none
  bool no_grad_clip = false;                  // no clip_grad_norm_ before the optimizer step
  double moe_capacity_factor = 1.0;           // MoE tokens per expert / balanced load
  std::string profile;  // calibrated profile JSON; empty: the named defaults
  bool json = false;
  bool timeline = false;
  bool explain = false;  // --explain: how each figure is judged (the "judged on" paragraphs)
  PlanFlags plan;
};

struct Job {
  model::ModelSpec spec;
  profiles::ClusterSpec cluster;
  model::Plan plan;
  sim::SimOptions options;
  std::vector<std::string> warnings;
  // Which sequence length the job uses and why ("8192 tokens per sequence (--seq-len)", or the
  // default's reason: ApplyDefaultSeqLen), for the first line of every answer.
  std::string seq_len_note;
  // A packed plan's token budget as the config or flags gave it (its row may be raised to the
  // largest verl forms: RaisePackedRowToLargest); 0: not packed.
  int64_t packed_budget = 0;
  // Sequences per optimizer step over the world: --global-batch, else a training config's own
  // (verl's ppo_mini_batch_size x rollout.n); 0: neither says.
  int64_t sequences_per_step = 0;
  FromExtras from;  // roles and the value head the --from configs name
  // The model a --from config named when --model was not given ('named by
  // cfg.yaml:/actor_rollout_ref/model/path "Qwen/Qwen3-8B"'; ResolveJobModel); "" otherwise.
  std::string model_from;
  // What times the job's kernels: "--profile cpu.json (probed on cpu (AMD EPYC, 2 threads),
  // 2026-11-28)", "the H100-SXM-80G catalog profile (probed 2026-11-22)" or "datasheet peaks x
  // the cost model's default efficiencies" (simulate's first line says it).
  std::string timed_by;
  // S after the plan's default (the model's max_seq_len): computed, never stored twice.
  int64_t SeqLen() const { return plan.ResolvedSeqLen(spec.max_seq_len); }
};

// The constants a job on `cluster` runs with (sim::JobProfile: the --profile file, else the
// catalog's measured profile, else the defaults). Throws InputError naming --profile when the
// file was probed on another device kind than the cluster's (sim::ProfileDeviceMismatch).
sim::Profile LoadJobProfile(const std::string& profile_flag, const profiles::ClusterSpec& cluster);

void AddJobFlags(CLI::App* sub, JobArgs* args);
// Every problem of the model, the cluster and the plan for them (`plan_where` names the plan's
// file or "plan"), in one list.
// verl's token-budget rows are balanced, not capped (model/packing.h LargestPackedRowAtLongest):
// a packed plan whose sequences per step are known is judged at the largest row the rule forms
// when every sequence is the longest. When that exceeds the plan's row (a budget that is not a
// whole number of sequences) the row is raised to it and the warning saying so is returned;
// otherwise "" and the plan is unchanged.
std::string RaisePackedRowToLargest(int64_t sequences_per_step, int world, model::Plan* plan);
// --image-pixels WxH: the plan's image_tokens from the model's processor rules
// (model::TokensForImage) times its images (1 when --images is not given). Throws InputError
// naming the flag on a malformed size, a text model, or --image-tokens given too.
void ApplyImagePixels(const PlanFlags& flags, const model::ModelSpec& spec, model::Plan* plan);
// ApplyImagePixels, then for a VL model with no images (text-only batches) a warning: the tower
// does not run, and its parameters get no gradient and no optimizer state
// (model::VisionTowerIdle).
void ApplyImages(const PlanFlags& flags, const model::ModelSpec& spec, model::Plan* plan,
                 std::vector<std::string>* warnings);
// `executor_run`: the plan of a run of shardtune's own executor (validate's measurements). On CPU
// ranks that run emulates a device whose memory is LibTorch's tensor allocator, and its
// activation offload moves saved tensors out of it (executor/nn/activation_offload.h), so the
// plan is taken there; a job planned for CPU ranks is refused it.
std::vector<std::string> JobProblems(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                     const model::Plan& plan, const std::string& plan_where,
                                     bool executor_run = false);
// The warning for a rotary model asked for more tokens than its max_seq_len.
std::string BeyondTrainedContext(const model::ModelSpec& spec, int64_t seq_len);
// Throws InputError listing every problem of the model, cluster and plan together.
Job ResolveJob(const JobArgs& args);
// "schema", "schema_version", "model", "cluster", "plan" keys of a report.
nlohmann::ordered_json JobHeaderJson(const Job& job, const std::string& schema);

}  // namespace shardtune::cli
