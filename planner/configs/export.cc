// Plan export: format names, the context a config needs (HF layer class, batch, world), and the
// helpers the per-format writers share (quoting, comment blocks, notes common to FSDP2 targets).
#include "planner/configs/export.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iterator>
#include <sstream>

#include "model/errors.h"
#include "model/strict_json.h"
#include "model/text.h"
#include "planner/configs/export_formats.h"
#include "planner/configs/format_names.h"

namespace shardtune::configs {
namespace {

using model::Join;

bool Contains(std::string text, const std::string& lower_word) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text.find(lower_word) != std::string::npos;
}

// Appends `text` as "# "-prefixed lines of at most `width` columns (continuations indented).
void AppendWrapped(const std::string& text, size_t width, std::string* out) {
  std::istringstream words(internal::OneLine(text));
  std::string word, line = "#";
  bool first = true;
  while (words >> word) {
    if (!first && line.size() + 1 + word.size() > width) {
      *out += line + "\n";
      line = "#  ";
    }
    line += " " + word;
    first = false;
  }
  *out += line + "\n";
}

}  // namespace

const std::vector<std::string>& ExportFormatNames() {
  static const std::vector<std::string> names = {"accelerate", "torchtitan", "hf-trainer",
                                                 "deepspeed", "roll", "verl"};
  return names;
}

const char* ToString(ExportFormat f) {
  return internal::FormatName(ExportFormatNames(), static_cast<size_t>(f), "export format");
}

ExportFormat ParseExportFormat(const std::string& text, const std::string& where) {
  return static_cast<ExportFormat>(
      internal::ParseFormatName(ExportFormatNames(), text, where, "\"" + text + "\""));
}

// Class names as the HF modeling files define them: modeling_gpt2.py GPT2Block,
// modeling_gpt_neox.py GPTNeoXLayer, modeling_mixtral.py MixtralDecoderLayer, modeling_qwen2_moe.py
// Qwen2MoeDecoderLayer, modeling_qwen3_moe.py Qwen3MoeDecoderLayer, modeling_qwen3.py
// Qwen3DecoderLayer, modeling_olmo2.py Olmo2DecoderLayer, modeling_gemma2.py Gemma2DecoderLayer,
// modeling_gemma3.py Gemma3DecoderLayer, modeling_phi3.py Phi3DecoderLayer, modeling_qwen2.py
// Qwen2DecoderLayer, modeling_mistral.py MistralDecoderLayer,
// modeling_llama.py LlamaDecoderLayer. Llama and Mistral share a shape, so the name decides.
std::string HfDecoderLayerClass(const model::ModelSpec& spec) {
  // Layouts another family shares, told apart by the transformers class (modeling_gemma.py,
  // modeling_seed_oss.py).
  if (spec.hf_architecture == "GemmaForCausalLM") return "GemmaDecoderLayer";
  if (spec.hf_architecture == "SeedOssForCausalLM") return "SeedOssDecoderLayer";
  if (spec.positions == model::PositionKind::kLearned) return "GPT2Block";
  if (spec.parallel_residual) return "GPTNeoXLayer";
  if (spec.moe.gpt_oss_experts) return "GptOssDecoderLayer";  // modeling_gpt_oss.py
  if (spec.moe.enabled()) {
    if (spec.moe.num_shared_experts > 0) return "Qwen2MoeDecoderLayer";
    return spec.qk_norm ? "Qwen3MoeDecoderLayer" : "MixtralDecoderLayer";
  }
  if (spec.norm_placement == model::NormPlacement::kPost) return "Olmo2DecoderLayer";
  if (spec.norm_placement == model::NormPlacement::kSandwich) {
    return spec.qk_norm ? "Gemma3DecoderLayer" : "Gemma2DecoderLayer";
  }
  if (spec.fused_qkv) return "Phi3DecoderLayer";
  if (spec.qk_norm) return "Qwen3DecoderLayer";
  if (spec.qkv_bias) return "Qwen2DecoderLayer";
  if (Contains(spec.name, "mistral") || Contains(spec.source, "mistral"))
    return "MistralDecoderLayer";
  return "LlamaDecoderLayer";
}

ExportContext MakeExportContext(const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                                const model::Plan& plan) {
  ExportContext ctx;
  ctx.num_nodes = cluster.num_nodes;
  ctx.gpus_per_node = cluster.gpus_per_node;
  ctx.world_size = cluster.world_size();
  ctx.model_name = spec.name;
  ctx.layer_class = HfDecoderLayerClass(spec);
  ctx.tied_embeddings = spec.tied_embeddings;
  ctx.seq_len = plan.ResolvedSeqLen(spec.max_seq_len);
  ctx.global_batch = plan.GlobalBatch(ctx.world_size);
  return ctx;
}

ExportResult ExportPlan(const model::Plan& plan, const ExportContext& ctx, ExportFormat format) {
  SHARDTUNE_CHECK(ctx.world_size >= 1 && ctx.world_size == ctx.num_nodes * ctx.gpus_per_node)
      << "world " << ctx.world_size << " != " << ctx.num_nodes << " x " << ctx.gpus_per_node;
  SHARDTUNE_CHECK(ctx.global_batch == plan.GlobalBatch(ctx.world_size))
      << "global batch " << ctx.global_batch << " != micro-batch x grad-accum x world";
  SHARDTUNE_CHECK(ctx.seq_len >= 1) << "seq_len " << ctx.seq_len;
  if (plan.wrap.sub_block_units && format != ExportFormat::kRoll) {
    // Only ROLL's wrap policy names sub-block classes; the others get whole blocks, said.
    model::Plan blocks = plan;
    blocks.wrap.sub_block_units = false;
    ExportResult r = ExportPlan(blocks, ctx, format);
    r.notes.push_back("attention and MLP units per block: " + std::string(ToString(format)) +
                      " wraps whole blocks here (only ROLL's transformer_layer_cls_to_wrap names "
                      "the sub-block classes)");
    return r;
  }
  // The writer of each format, in ExportFormat's order.
  using Writer = ExportResult (*)(const model::Plan& plan, const ExportContext& ctx);
  static constexpr Writer kWriters[] = {internal::ExportAccelerate, internal::ExportTorchtitan,
                                        internal::ExportHfTrainer, internal::ExportDeepspeed,
                                        internal::ExportRoll, internal::ExportVerl};
  auto i = static_cast<size_t>(format);
  SHARDTUNE_CHECK(i < std::size(kWriters))
      << "unhandled export format " << static_cast<int>(format);
  return kWriters[i](plan, ctx);
}

namespace internal {

Layout ResolveLayout(const model::Plan& plan, const ExportContext& ctx) {
  Layout l;
  l.shard = plan.Sharded() ? plan.ResolvedShardGroup(ctx.world_size, ctx.gpus_per_node) : 1;
  SHARDTUNE_CHECK(l.shard >= 1 && ctx.world_size % l.shard == 0)
      << "shard group " << l.shard << " does not divide world " << ctx.world_size;
  l.replicate = ctx.world_size / l.shard;
  l.reshard_after_forward = l.shard > 1 && model::StrategyReshardsAfterForward(plan.strategy) &&
                            plan.reshard_after_forward;
  return l;
}

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string OneLine(const std::string& s) {
  std::string out = s;
  for (char& ch : out) {
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) ch = ' ';
  }
  return out;
}

std::string FormatFloat(double v) {
  std::ostringstream os;
  os.precision(6);
  os << v;
  std::string s = os.str();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

std::string CommentBlock(const std::vector<std::string>& header,
                         const std::vector<std::string>& notes) {
  std::string out;
  for (const auto& h : header) AppendWrapped(h, 100, &out);
  for (const auto& n : notes) AppendWrapped("note: " + n, 100, &out);
  return out;
}

std::string Provenance(const model::Plan& plan, const ExportContext& ctx) {
  return "Written by `shardtune export` for " + ctx.model_name + " on " +
         std::to_string(ctx.num_nodes) + " node(s) x " + std::to_string(ctx.gpus_per_node) +
         " GPUs: " + model::ToString(plan.strategy) + ", micro-batch " +
         std::to_string(plan.micro_batch) + " x " + std::to_string(ctx.seq_len) +
         " tokens, grad-accum " + std::to_string(plan.grad_accum) + ", checkpointing " +
         model::CheckpointingSpecToString(plan) + ", offload " + model::ToString(plan.offload) +
         ".";
}

std::string CommentedText(const std::string& how_to_run, const model::Plan& plan,
                          const ExportContext& ctx, const std::vector<std::string>& notes,
                          const std::string& body) {
  return CommentBlock({how_to_run, Provenance(plan, ctx)}, notes) + body;
}

void AddPrefetchNotes(const model::Plan& plan, const std::string& target,
                      std::vector<std::string>* notes) {
  if (plan.forward_prefetch) {
    notes->push_back("forward_prefetch true: " + target +
                     " has no setting for explicit forward "
                     "prefetch (FSDP2 set_modules_to_forward_prefetch); it prefetches implicitly");
  }
  if (plan.backward_prefetch != model::BackwardPrefetch::kPre) {
    notes->push_back(std::string("backward_prefetch ") + model::ToString(plan.backward_prefetch) +
                     ": " + target +
                     " always prefetches the next unit before its backward (BACKWARD_PRE)");
  }
  if (plan.max_inflight_allgathers != 2) {
    notes->push_back("max_inflight_allgathers " + std::to_string(plan.max_inflight_allgathers) +
                     ": " + target + " has no setting for it (FSDP2 keeps at most 2 in flight)");
  }
}

void AddWrapNote(const model::Plan& plan, const ExportContext& ctx, const std::string& target,
                 bool supports_size, std::vector<std::string>* notes) {
  using Kind = model::WrapPolicy::Kind;
  Kind k = plan.wrap.kind;
  if (k == Kind::kBlock || (k == Kind::kSize && supports_size)) return;
  notes->push_back("wrap " + model::WrapSpecToString(plan.wrap) + ": " + target +
                   " cannot express it; written as one unit per " + ctx.layer_class);
}

void AddBlockCheckpointNote(const model::Plan& plan, const std::string& target,
                            std::vector<std::string>* notes) {
  using C = model::Checkpointing;
  if (plan.checkpointing == C::kFirstK) {
    notes->push_back("checkpointing " + model::CheckpointingSpecToString(plan) + ": " + target +
                     " checkpoints every block or none (only Megatron-LM's recompute_method block with "
                     "recompute_num_layers " + std::to_string(plan.checkpoint_first_k) +
                     " says the first k" + (plan.checkpoint_rest_selective ? ", and none runs the other blocks selective" : "") +
                     "); written as full (less activation memory, more recompute than the plan)");
    return;
  }
  if (plan.checkpointing == C::kBlocks) {
    notes->push_back("checkpointing " + model::CheckpointingSpecToString(plan) + ": " + target +
                     " checkpoints every whole block or none, not a policy per block (keep, rerun whole, "
                     "op-level SAC with a save set); written as full (less activation memory, more recompute "
                     "than the plan)");
    return;
  }
  if (plan.checkpointing != C::kSelective && plan.checkpointing != C::kEveryK) return;
  notes->push_back("checkpointing " + model::CheckpointingSpecToString(plan) + ": " + target +
                   " checkpoints every whole block only; written as full (less activation memory, "
                   "more recompute than the plan)");
}

void AddActivationOffloadNote(const model::Plan& plan, const std::string& target,
                              std::vector<std::string>* notes) {
  if (plan.activation_offload == model::ActivationOffload::kNone) return;
  notes->push_back(std::string("activation_offload ") + model::ActivationOffloadSpecToString(plan) + ": " + target +
                   " has no switch for verl's per-layer activation offload; written without it (the "
                   "activations stay on the GPU: more memory than the plan)");
}

void AddOptimizerOffloadNote(const model::Plan& plan, const std::string& target,
                             std::vector<std::string>* notes) {
  if (plan.offload != model::Offload::kOptimizer) return;
  notes->push_back("offload optimizer: " + target +
                   " offloads parameters, gradients and optimizer "
                   "state together (FSDP2 CPUOffloadPolicy) or nothing; written as no offload");
}

void AddBlockUnitNotes(const model::Plan& plan, const std::string& target,
                       std::vector<std::string>* notes) {
  AddBlockCheckpointNote(plan, target, notes);
  AddActivationOffloadNote(plan, target, notes);
  AddOptimizerOffloadNote(plan, target, notes);
  AddPrefetchNotes(plan, target, notes);
}

void AddAccelerateFsdpNotes(const model::Plan& plan, const ExportContext& ctx,
                            const std::string& target, const std::string& transformer_wrap,
                            std::vector<std::string>* notes) {
  AddWrapNote(plan, ctx, target, /*supports_size=*/true, notes);
  if (plan.wrap.kind != model::WrapPolicy::Kind::kSize &&
      (plan.wrap.embedding_unit || plan.wrap.head_unit)) {
    notes->push_back("embedding_unit/head_unit: " + transformer_wrap + " wraps only " +
                     ctx.layer_class + "; the embedding and [norm, head] stay in the root unit");
  }
  AddBlockUnitNotes(plan, target, notes);
}

void AddLigerNote(const model::Plan& plan, const std::string& target,
                  std::vector<std::string>* notes) {
  if (!plan.liger.any()) return;
  notes->push_back(std::string("liger ") + (plan.liger.rms_norm ? "rms_norm " : "") +
                   (plan.liger.swiglu ? "swiglu " : "") + (plan.liger.rope ? "rope " : "") + "on: " +
                   target + " has no key for Liger-Kernel's module patches; call "
                   "apply_liger_kernel_to_<model>(rms_norm=" + (plan.liger.rms_norm ? "True" : "False") +
                   ", swiglu=" + (plan.liger.swiglu ? "True" : "False") + ", rope=" +
                   (plan.liger.rope ? "True" : "False") + ", model=model) on the loaded model");
}

void AddFusedLossNote(const model::Plan& plan, const std::string& target,
                      std::vector<std::string>* notes) {
  if (plan.loss_kernel == model::LossKernel::kTrlLogps || plan.reference != model::InStepReference::kNone) {
    notes->push_back("reference " + std::string(model::ToString(plan.reference)) +
                     ", loss_kernel trl_logps: TRL's DPO step (its reference forward and per-token log-probs); " + target +
                     " has no key for them: run the file with `trl dpo` and your DPO keys (beta, loss_type), "
                     "as the plan's memory assumes");
    return;
  }
  if (plan.loss_kernel == model::LossKernel::kTrlChunkedNll) {
    notes->push_back("loss_kernel trl_chunked_nll: TRL's SFTTrainer loss (loss_type chunked_nll, its default); " +
                     target + " runs the model's own cross-entropy, whose [tokens, vocabulary] logits the "
                     "plan's memory does not count");
    return;
  }
  if (plan.loss_kernel != model::LossKernel::kFusedLinear) return;
  notes->push_back("loss_kernel fused_linear: " + target +
                   " has no key for the fused loss alone; apply Liger-Kernel's "
                   "apply_liger_kernel_to_<model>(fused_linear_cross_entropy=True, rope=False, "
                   "rms_norm=False, swiglu=False, cross_entropy=False) in code (its other kernels "
                   "change memory and time in ways the plan does not model)");
}

void AddModelFeatureNotes(const model::Plan& plan, const std::string& target, bool has_cp,
                          std::vector<std::string>* notes, bool has_fused_loss) {
  if (plan.cp > 1 && !has_cp) {
    notes->push_back("cp " + std::to_string(plan.cp) + ": " + target +
                     " has no Ulysses sequence parallelism; written without");
  }
  if (plan.ep > 1 && !has_cp) {
    notes->push_back("ep " + std::to_string(plan.ep) + ": " + target +
                     " has no expert parallelism beside FSDP; written without (every rank holds "
                     "every expert: estimate that plan with --ep 1)");
  }
  if (!has_fused_loss || plan.loss_kernel == model::LossKernel::kTrlChunkedNll ||
      plan.loss_kernel == model::LossKernel::kTrlLogps) {
    AddFusedLossNote(plan, target, notes);
    AddLigerNote(plan, target, notes);
  }
  if (plan.role == model::Role::kInfer) {
    notes->push_back("role infer: " + target + " configures training; run the forward-only "
                     "worker (no gradients, no optimizer) yourself");
  }
  if (!plan.frozen_prefixes.empty()) {
    std::string list;
    for (const auto& f : plan.frozen_prefixes) list += (list.empty() ? "" : ", ") + f;
    notes->push_back("frozen prefixes " + list + ": " + target +
                     " has no key for them; set requires_grad_(False) on those parameters in code");
  }
  if (plan.lora.enabled()) {
    notes->push_back("LoRA rank " + std::to_string(plan.lora.rank) + ": " + target +
                     " has no key for it; wrap the model with peft.get_peft_model(LoraConfig(r=" +
                     std::to_string(plan.lora.rank) + ", lora_alpha=" +
                     FormatFloat(plan.lora.alpha) + ")) in code");
  }
  if (plan.tiled_mlp_shards > 1) {
    notes->push_back("tiled MLP (" + std::to_string(plan.tiled_mlp_shards) + " shards): " +
                     target + " has no key for it");
  }
  if (plan.sdpa_backend != model::SdpaBackend::kAuto) {
    const char* member = "MATH";  // torch.nn.attention.SDPBackend's member for the plan's name
    switch (plan.sdpa_backend) {
      case model::SdpaBackend::kFlash: member = "FLASH_ATTENTION"; break;
      case model::SdpaBackend::kCudnn: member = "CUDNN_ATTENTION"; break;
      case model::SdpaBackend::kEfficient: member = "EFFICIENT_ATTENTION"; break;
      case model::SdpaBackend::kMath:
      case model::SdpaBackend::kAuto: break;
    }
    notes->push_back(std::string("sdpa_backend ") + model::ToString(plan.sdpa_backend) + ": " + target +
                     " has no key for it; run the step under torch.nn.attention.sdpa_kernel(SDPBackend." +
                     member + ") in code");
  }
  AddFrozenDtypeNote(plan, target + " has no key for the dtype the model is loaded in", notes);
}

void AddFrozenDtypeNote(const model::Plan& plan, const std::string& why,
                        std::vector<std::string>* notes) {
  if (!plan.frozen_dtype || *plan.frozen_dtype == plan.master_dtype) return;
  notes->push_back(std::string("frozen_dtype ") + model::ToString(*plan.frozen_dtype) + ": " +
                   why + "; load the frozen weights with from_pretrained(torch_dtype=" +
                   TorchDtype(*plan.frozen_dtype) + ") in code");
}

const char* DtypeName(model::DType d, const char* bf16, const char* fp16, const char* fp32) {
  return d == model::DType::kBf16 ? bf16 : d == model::DType::kFp16 ? fp16 : fp32;
}

const char* TorchDtype(model::DType d) {
  return DtypeName(d, "torch.bfloat16", "torch.float16", "torch.float32");
}

// MoE expert MLP classes of the HF modeling files: modeling_mixtral.py MixtralBlockSparseTop2MLP,
// modeling_qwen2_moe.py Qwen2MoeMLP, modeling_qwen3_moe.py Qwen3MoeMLP.
std::string HfExpertClass(const std::string& layer_class) {
  if (layer_class == "MixtralDecoderLayer") return "MixtralBlockSparseTop2MLP";
  if (layer_class == "Qwen2MoeDecoderLayer") return "Qwen2MoeMLP";
  if (layer_class == "Qwen3MoeDecoderLayer") return "Qwen3MoeMLP";
  return "";
}

std::string HfFusedExpertsClass(const std::string& layer_class) {
  if (layer_class == "MixtralDecoderLayer") return "MixtralExperts";
  if (layer_class == "Qwen2MoeDecoderLayer") return "Qwen2MoeExperts";
  if (layer_class == "Qwen3MoeDecoderLayer") return "Qwen3MoeExperts";
  return "";
}

std::string OptimizerText(const model::Plan& plan) {
  return std::string(model::ToString(plan.optimizer)) + " (" +
         model::ToString(plan.optimizer_impl) + ")";
}

}  // namespace internal
}  // namespace shardtune::configs
