// Exports a plan as another trainer's configuration: Hugging Face Accelerate (FSDP2 YAML),
// torchtitan (job TOML), Hugging Face Trainer (TrainingArguments JSON), DeepSpeed (ZeRO JSON, the
// closest equivalent), ROLL (FSDP2 strategy YAML) and verl (FSDP worker YAML). What a format cannot
// say becomes a note. planner/configs/import.h reads the Accelerate, HF Trainer, ROLL and verl outputs back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model_spec.h"
#include "model/plan.h"
#include "profiles/cluster.h"

namespace shardtune::configs {

enum class ExportFormat { kAccelerate, kTorchtitan, kHfTrainer, kDeepspeed, kRoll, kVerl };

// "accelerate", "torchtitan", "hf-trainer", "deepspeed", "roll", "verl", in declaration order.
const std::vector<std::string>& ExportFormatNames();
const char* ToString(ExportFormat f);
// The format named `text`. Throws InputError "where: expected one of accelerate, torchtitan,
// hf-trainer, deepspeed, roll, verl, got \"x\" (did you mean \"y\"?)".
ExportFormat ParseExportFormat(const std::string& text, const std::string& where);

// What a config needs beyond the plan: the job's shape and the model's names.
// The verl trainer a config runs (import_verl.cc): main_ppo (ppo_trainer.yaml), fsdp_sft_trainer
// (sft_trainer.yaml) or sft_trainer (sft_trainer_engine.yaml); kNone for other formats.
enum class VerlTrainer { kNone, kPpo, kSft, kSftEngine };

struct ExportContext {
  int world_size = 1;  // ranks; REQUIRES: num_nodes * gpus_per_node
  int gpus_per_node = 1;
  int num_nodes = 1;
  std::string model_name;                         // shardtune preset or file name, e.g. "llama3-8b"
  std::string layer_class = "LlamaDecoderLayer";  // HF class of one block (wrap / checkpoint unit)
  bool tied_embeddings = false;                   // LM head shares the token embedding
  int64_t seq_len = 0;         // S in tokens, after the plan's default (the model's max_seq_len)
  int64_t global_batch = 0;    // sequences per optimizer step: micro_batch x grad_accum x world
  double max_grad_norm = 1.0;  // global-norm clipping, as the executor's default; <= 0: none
  // verl: the source config's prompt / response split and rollout.n when the plan was tuned from
  // one (ImportResult), kept by the export; 0: unknown (the split is written as halves and
  // rollout.n as 1, with notes).
  int64_t verl_prompt_length = 0, verl_response_length = 0;
  int verl_rollout_n = 0;
  // verl: the trainer of the config the plan was tuned from (ImportResult::verl_trainer): kSft
  // and kSftEngine are written as that SFT trainer's config; kNone or kPpo: a training plan with
  // verl's log-prob head is a PPO actor, any other an SFT job over sft_trainer.yaml.
  VerlTrainer verl_trainer = VerlTrainer::kNone;
};

// The Hugging Face transformers class of one decoder block of `spec`, derived from its shape:
// learned positions -> GPT2Block, parallel residual -> GPTNeoXLayer, MoE -> MixtralDecoderLayer
// (Qwen2MoeDecoderLayer with shared experts, Qwen3MoeDecoderLayer with q/k norms), q/k norms ->
// Qwen3DecoderLayer, q/k/v bias -> Qwen2DecoderLayer, a name or source naming Mistral ->
// MistralDecoderLayer, else LlamaDecoderLayer.
std::string HfDecoderLayerClass(const model::ModelSpec& spec);

// The context of `plan` for `spec` on `cluster`. REQUIRES: plan.Problems(...) is empty for them.
ExportContext MakeExportContext(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                const model::Plan& plan);

struct ExportResult {
  std::string text;                // the whole config file, ending in a newline
  std::vector<std::string> notes;  // plan settings the format cannot express, one sentence each
};

// Writes `plan` in `format`. YAML and TOML outputs repeat the notes as comments at the top; JSON
// has no comments, so its notes exist only in ExportResult::notes. Deterministic: the same
// inputs give the same bytes. REQUIRES: ctx from MakeExportContext (or equivalent) for a plan
// without Problems(); broken invariants throw InternalError. Thread-safe (no shared state).
ExportResult ExportPlan(const model::Plan& plan, const ExportContext& ctx, ExportFormat format);

}  // namespace shardtune::configs
