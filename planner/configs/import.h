// Imports a trainer's existing configuration as a plan (`--from FILE`): Hugging Face Accelerate
// config YAML, Hugging Face Trainer arguments JSON, ROLL pipeline YAML and verl trainer YAML, the
// inverse of planner/configs/export.h. Every key of the file is either mapped onto the plan, reported as
// ignored (a warning: it does not change memory or time), or rejected (an InputError: it changes
// memory or time in a way shardtune does not model, or it is unknown).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "planner/configs/export.h"
#include "profiles/cluster.h"

namespace shardtune::configs {

enum class ImportFormat { kAccelerate, kHfTrainer, kRoll, kVerl, kTorchtitan };

// "accelerate", "hf-trainer", "roll", "verl", "torchtitan", in declaration order.
const std::vector<std::string>& ImportFormatNames();
const char* ToString(ImportFormat f);
// Throws InputError "where: expected one of accelerate, hf-trainer, roll, verl, got \"x\"".
ImportFormat ParseImportFormat(const std::string& text, const std::string& where);

// What an import checks the file against.
struct ImportContext {
  int world_size = 0;       // ranks of --cluster; 0: unknown (no conflict check, the file's own)
  int gpus_per_node = 0;    // 0: unknown
  std::string layer_class;  // HF class of one block (HfDecoderLayerClass); "": not checked
  bool tied_embeddings = false;  // ROLL wraps an untied embedding on its own
  int64_t model_parameters = 0;  // for Accelerate's NO_WRAP (one unit): 0 rejects NO_WRAP
  // A VL model's vision tower as verl's get_vl_model_vision_tower returns it (Qwen-VL:
  // model.visual, merger included; Gemma 3: model.vision_tower): what freeze_vision_tower
  // freezes. "": a text model.
  std::string vision_tower_prefix;
  // Which worker of a ROLL pipeline (actor_train, reference, critic, ...) or which verl role
  // (actor, ref, critic) to import; "": the training worker (ROLL: the only fsdp2_train worker,
  // else actor_train; verl: actor, or ref when the file has no actor).
  std::string worker;
  // The flag that set world_size / gpus_per_node, for error messages: "--cluster" (estimate,
  // simulate, tune) or "--nproc" (run: its own ranks).
  std::string world_flag = "--cluster";
  // Hydra-style overrides (--set KEY=VALUE, interpolation.h Override), applied to the parsed
  // file before its interpolations resolve, as Hydra applies a launch script's overrides before
  // OmegaConf resolves. An override whose first key the file lacks is applied only when
  // `overrides_add_top_level` (one --from file: it is the whole config); otherwise it is left for
  // the file that has that key.
  std::vector<std::string> overrides;
  bool overrides_add_top_level = true;
  // A worker may run on a whole-divisor subset of the cluster's GPUs (ROLL's device_mapping of 8
  // on a 16-GPU pool): ImportResult::world_size says how many, and the caller estimates on those.
  // false (tune, run): the config's world must be the cluster's.
  bool allow_subset_world = false;
};

// The context of `spec` on `cluster`.
ImportContext MakeImportContext(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster);
// The context of `spec` on `world_size` ranks of `gpus_per_node` (0: unknown) that `world_flag`
// set (run: "--nproc").
ImportContext MakeImportContext(const model::ModelSpec& spec, int world_size, int gpus_per_node,
                                const std::string& world_flag);

// Another role a config runs on the same GPUs (verl: the critic and the reference policy beside
// the actor), for estimate's co-location.
struct ImportedRole {
  std::string name;  // "critic", "ref"
  model::Plan plan;
  bool value_head = false;  // estimated on the model with a value head (ModelSpec::value_head)
  // Its parameters and optimizer state leave the GPU while another role runs (verl's
  // param_offload with optimizer_offload: offload_fsdp_model_to_cpu / offload_fsdp_optimizer).
  bool offloaded_when_idle = false;
  // The role runs on the actor's own FSDP module (verl's old-log-prob pass, compute_log_prob):
  // its parameters are the actor's, so it leaves nothing of its own while idle and, while it
  // runs, the actor's resident optimizer state (not its parameters again) is beside it.
  bool shares_actor_states = false;
  // The model the role loads when it is not the imported worker's (verl's FSDP reward model,
  // reward_model.model.path), as the file names it; "" when it runs on that model. The CLI
  // resolves it as --model would (model::ResolveModelArg), or takes --reward-model.
  std::string model_named;
  std::string model_named_where;  // "file:/reward_model/model/path"
};

// The rollout engine verl runs on the trainer's GPUs (actor_rollout_ref.rollout, name vllm, sglang
// or trtllm; verl/trainer/config/rollout/rollout.yaml at volcengine/verl@b178a3c). The engine
// sizes its weights, KV cache and activations to gpu_memory_utilization of the device's total
// memory (vLLM gpu_worker.py requested_memory = total_memory x gpu_memory_utilization; SGLang's
// mem_fraction_static; TensorRT-LLM's free_gpu_memory_fraction) and runs in its own process
// (vllm_async_server.py). With free_cache_engine (the default) it sleeps between rollouts
// (engine.sleep: level 2 in verl's hybrid mode, level 1 colocated), releasing the weights and the
// KV cache; its CUDA graphs stay (rollout.yaml: "cudagraph in inference engine can not be
// offloaded during update policy").
//
// verl's reward loop (reward_model.use_reward_loop, the default) serves a reward model the same
// way when reward_model.enable without enable_resource_pool: RewardLoopManager launches
// reward_model.rollout's engine on the actor's GPUs (experimental/reward_loop/reward_model.py
// init_colocated), wakes it for compute_rm_score and puts it back to sleep (level 1) after
// (reward_loop.py), with reward_model.rollout's own gpu_memory_utilization (default 0.5),
// free_cache_engine (true) and enforce_eager (true): one more engine, role "reward model".
struct RolloutEngine {
  std::string role = "rollout";         // "rollout", "reward model"
  std::string name;                     // "vllm", "sglang", "trtllm"
  double gpu_memory_utilization = 0.5;  // rollout.yaml default
  bool free_cache_engine = true;        // rollout.yaml default
  bool enforce_eager = false;           // true: no CUDA graphs
  std::string where;                    // "file:/actor_rollout_ref/rollout"
};

struct ImportResult {
  ImportFormat format = ImportFormat::kAccelerate;
  std::string worker;                 // the ROLL worker / verl role imported; "" for the others
  // verl's trainer the file configures (export.h VerlTrainer); kNone for the other formats.
  VerlTrainer verl_trainer = VerlTrainer::kNone;
  int world_size = 0;                 // ranks the file asks for; 0: it does not say
  std::vector<std::string> warnings;  // one line each, naming the file and the keys
  std::vector<std::string> overrides_applied;  // the ctx.overrides this file took, as given
  // The configs a Hydra defaults list composed into it, in merge order ("actor/dp_actor.yaml at
  // actor_rollout_ref.actor"); empty for a file without one (hydra_compose.h).
  std::vector<std::string> composed_from;
  // Where the file's sequence length came from ("/data/max_length", "verl's defaults
  // max_prompt_length 512 + max_response_length 512"); "" when the file sets none (Accelerate
  // configs carry none: the caller then needs --seq-len, never the model's maximum).
  std::string seq_len_from;
  // The imported worker's model has a value head (verl's critic, --from-worker critic).
  bool value_head = false;
  bool offloaded_when_idle = false;  // as ImportedRole's, for the imported worker
  // The other roles on the same GPUs when the file runs several (verl's PPO: critic when
  // need_critic, ref when need_reference_policy); empty when --from-worker picked one.
  std::vector<ImportedRole> roles;
  bool roles_in_one_process = false;  // verl: every role in one process per GPU (one context)
  // The inference engines on the same GPUs (a verl PPO config's actor, not with --from-worker):
  // the rollout engine, then the reward loop's reward model when it is co-located.
  std::vector<RolloutEngine> engines;
  // The model the imported worker loads, as the file names it (verl's model.path or
  // partial_pretrain, ROLL's model_args.model_name_or_path or pretrain): a Hugging Face id or a
  // local directory; "" when the file names none (Accelerate, HF Trainer arguments). The CLI
  // estimates this model when --model is not given (cli/model_choice.h).
  std::string model_named;
  std::string model_named_where;  // "file:/actor_rollout_ref/model/path"
  // The framework builds the model on the CPU of one rank per shard group and on the meta device
  // elsewhere, then broadcasts the state dict, unless the model ties its embeddings (verl:
  // fsdp_utils.py get_init_weight_context_manager(use_meta_tensor=not tie_word_embeddings),
  // fsdp2_load_full_state_dict / sync_module_states): the CLI's --model-load default becomes
  // rank0, or every-rank for a tied model.
  bool rank0_load_unless_tied = false;
  // The FSDP API the file sets (Accelerate's fsdp_version, the Trainer's fsdp_config version);
  // 0: it does not say.
  int fsdp_version = 0;
  // TRL DPO: the reference is a copy of the model (Plan::reference), wrapped as the FSDP version
  // decides (model::InStepReference kFsdp1Blocks or kFsdp2Root), which the caller settles once
  // every file is read (SettleReferenceWrap).
  bool reference_copy = false;
  // Sequences per optimizer step over the whole world (verl: ppo_mini_batch_size x rollout.n) for
  // a trained worker, which a packed plan's rows do not give back; 0: the file does not say
  // (inference roles, other formats: the plan's micro_batch x grad_accum x dp is the batch).
  int64_t sequences_per_step = 0;
  // verl's prompt / response split (data.max_prompt_length, max_response_length, their sum the
  // sequence length) and rollout.n (samples per prompt), for an export of a plan tuned from this
  // file to keep them; 0: not a verl PPO file.
  int64_t prompt_length = 0, response_length = 0;
  int rollout_n = 0;
};

// Reads `text` (the contents of `file`) and applies every plan setting it holds onto `*plan`;
// settings the file does not mention stay as they are, so several files layer in order.
// `format`: nullptr detects it from the content. Throws InputError with one line naming the file
// and the key path ("cfg.yaml:/fsdp_config/fsdp_sharding_strategy: expected one of ..., got
// \"FUL_SHARD\""). Deterministic; no I/O.
ImportResult ImportConfigText(const std::string& text, const std::string& file,
                              const ImportContext& ctx, const ImportFormat* format,
                              model::Plan* plan);
// The same for a file on disk. Throws InputError when it cannot be read.
ImportResult ImportConfigFile(const std::string& path, const ImportContext& ctx,
                              const ImportFormat* format, model::Plan* plan);
// The format `text` is in, from its keys; throws InputError naming the file when none matches.
ImportFormat DetectImportFormat(const std::string& text, const std::string& file);

}  // namespace shardtune::configs
