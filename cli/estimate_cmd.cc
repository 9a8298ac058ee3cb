// `shardtune estimate`: resolve inputs, validate them together, run the memory model, print.
#include "cli/estimate_cmd.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli/format.h"
#include "cli/report_words.h"
#include "model/activations.h"
#include "model/errors.h"
#include "model/packing.h"
#include "model/text.h"
#include "model/trainable.h"
#include "model/plan_json.h"
#include "model/presets.h"
#include "planner/advice.h"
#include "planner/offload_advisor.h"
#include "profiles/cluster.h"
#include "simulator/colocation.h"
#include "simulator/feature_savings.h"
#include "simulator/job_phases.h"
#include "simulator/memory_model.h"
#include "simulator/memory_plot.h"
#include "simulator/memory_snapshot.h"
#include "simulator/memory_report_json.h"

namespace shardtune::cli {
namespace {

// Why each category exists, for people reading the breakdown.
const std::map<std::string, std::string>& Why() {
  static const std::map<std::string, std::string> m{
      {"sharded parameters", "master shards FSDP keeps per rank (1/N of the model, padded)"},
      {"sharded gradients", "fp32 gradient shards from reduce-scatter, kept until zero_grad"},
      {"optimizer state", "AdamW exp_avg + exp_avg_sq, fp32, created at the first step()"},
      {"optimizer step temporaries", "foreach AdamW's exp_avg_sq.sqrt() for the whole param group"},
      {"gathered (unsharded) parameters", "units all-gathered for compute (current + prefetched, root stays)"},
      {"all-gather buffers", "flat all-gather outputs on the all-gather stream (kept one unit longer)"},
      {"unsharded gradients", "param-dtype gradients of gathered units before reduce-scatter"},
      {"reduce-scatter buffers", "fp32 reduce-scatter input of the previous unit, alive one unit longer"},
      {"no_sync accumulated gradients", "fp32 full unsharded gradients kept across micro-batches"},
      {"activations saved for backward", "tensors autograd keeps from forward, per block"},
      {"vision tower activations", "what the vision blocks keep for backward, over the images' patches, and the micro-batch's fp32 pixel values"},
      {"activation working set (temporaries, gradients)", "the current block's temporaries and activation gradients"},
      {"residual stream", "the hidden state passed between blocks"},
      {"logits and loss", "log-softmax (fp32 when upcast) and logits the loop holds"},
      {"cuBLAS workspaces", "cuBLAS's per-stream workspace, allocated through the caching allocator"},
      {"reference model shards", "the DPO reference copy's sharded parameters (frozen, load dtype)"},
      {"reference model forward", "the DPO reference's no_grad forward inside the step: its gathered parameters, activations and logits"},
  };
  return m;
}

std::string PlanLine(const model::Plan& p, const sim::MemoryReport& r, int64_t seq) {
  std::ostringstream o;
  o << model::ToString(p.strategy) << " (shard group " << r.shard_group << " x " << r.replicas
    << " replica" << (r.replicas > 1 ? "s" : "") << "), wrap " << model::WrapSpecToString(p.wrap)
    << " (" << r.units.size() << " units), ";
  if (p.packed_seq_len > 0) {
    o << "packed micro-batches of up to " << static_cast<int64_t>(p.micro_batch) * seq
      << " tokens (sequences up to " << p.packed_seq_len << " tokens; judged at a full one)";
  } else {
    o << "micro-batch " << p.micro_batch << " x " << seq << " tokens";
  }
  o << ", grad-accum " << p.grad_accum << (p.no_sync ? " (no_sync)" : "");
  if (r.cp > 1) {
    o << ", Ulysses cp " << r.cp << " (each rank holds " << seq / r.cp
      << " tokens of a sequence; FSDP over "
      << (r.cp_fsdp_mesh == "dp" ? "dp ranks, cp ranks replicate" : "dp x cp ranks") << "; "
      << FormatBytes(r.all_to_all_bytes_per_layer) << " of all-to-alls per layer per pass)";
  }
  if (r.ep > 1) {
    o << ", expert parallelism " << r.ep << " (each rank holds 1/" << r.ep
      << " of every MoE layer's experts, sharded over " << r.expert_shard_group << " rank"
      << (r.expert_shard_group > 1 ? "s" : "") << "; tokens reach them by "
      << (p.modeling == model::Modeling::kTorchtitan ? "torchtitan's" : "ROLL's")
      << " all-to-all dispatch)";
  }
  o << ", checkpointing " << model::CheckpointingSpecToString(p) << ", offload "
    << model::ToString(p.offload)
    << (p.activation_offload == model::ActivationOffload::kVerlAsync
            ? (p.activation_offload_blocks > 0
                   ? " + the first " + std::to_string(p.activation_offload_blocks) +
                         " blocks' activations to pinned host memory layer by layer (verl's handler)"
                   : std::string(" + activations to pinned host memory layer by layer (verl's enable_activation_offload)"))
            : "")
    << ", " << model::ToString(p.param_dtype) << " params / "
    << model::ToString(p.reduce_dtype) << " reduce, " << model::ToString(p.optimizer) << " ("
    << model::ToString(p.optimizer_impl) << "), " << model::ToString(p.modeling) << " modeling, "
    << model::ToString(p.attention) << " attention";
  if (p.padding_mask) o << " with a padding mask (flash-attn's unpad / pad copies)";
  switch (p.reference) {
    case model::InStepReference::kNone: break;
    case model::InStepReference::kFsdp2Root:
      o << ", a reference forward per micro-batch (TRL DPO: a frozen " << model::ToString(p.FrozenDtype())
        << " copy, FSDP2 on its root only: gathered whole for its forward)";
      break;
    case model::InStepReference::kFsdp1Blocks:
      o << ", a reference forward per micro-batch (TRL DPO: a frozen " << model::ToString(p.FrozenDtype())
        << " copy, FSDP1 a block per unit, its root kept gathered)";
      break;
    case model::InStepReference::kAdaptersOff:
      o << ", a reference forward per micro-batch (TRL DPO: the policy with its adapters off)";
      break;
  }
  if (p.loss_kernel == model::LossKernel::kVerlFlashCe) {
    o << ", loss: verl's log-prob path (packed logits in " << model::ToString(p.param_dtype)
      << ", temperature divided in place, flash-attn cross-entropy with in-place backward)";
  } else if (p.loss_kernel == model::LossKernel::kVerlPaddedCe) {
    o << ", loss: verl's padded log-prob path (logits [B, S, V] in " << model::ToString(p.param_dtype)
      << " divided in place, the last " << p.response_len
      << " positions copied for flash-attn's in-place cross-entropy"
      << (p.entropy_from_logits ? ", the entropy reading the logits" : "") << ")";
  } else if (p.loss_kernel == model::LossKernel::kFusedLinear) {
    o << ", loss: fused linear cross-entropy (chunked)";
  } else if (p.loss_kernel == model::LossKernel::kVerlFusedTorch) {
    o << ", loss: verl's fused log-prob kernel (torch backend: 512-token chunks of fp32 logits, "
         "recomputed in backward"
      << (p.entropy_from_logits ? ", with the entropy's gradient" : "") << ")";
  } else if (p.loss_kernel == model::LossKernel::kTrlLogps) {
    o << ", loss: TRL's per-token log-probs (selective_log_softmax over logits [rows, S, V] in "
      << model::ToString(p.param_dtype) << (p.param_dtype == model::DType::kFp32 ? ", logsumexp per row" : ", log_softmax per row")
      << ")";
  } else if (p.loss_kernel == model::LossKernel::kTrlChunkedNll) {
    o << ", loss: TRL's chunked NLL (" << model::kTrlChunkRows
      << "-token chunks, fp32 logits and a fp32 copy of the head weight per chunk, rerun in backward; fp32 GEMMs)";
  } else if (p.loss_kernel == model::LossKernel::kVerlFusedTriton) {
    o << ", loss: verl's fused log-prob kernel (Triton backend: no logits tensor, d logits [tokens, "
      << model::kVerlTritonBackwardSplit << "] per vocabulary split in backward)";
  }
  if (p.liger.any()) {
    o << ", Liger-Kernel's " << (p.liger.rms_norm ? "RMSNorm " : "") << (p.liger.swiglu ? "SwiGLU " : "")
      << (p.liger.rope ? "RoPE " : "") << "modules";
  }
  if (p.attention == model::Attention::kSdpa && p.sdpa_backend != model::SdpaBackend::kAuto) {
    o << " (" << model::ToString(p.sdpa_backend) << ")";
  }
  if (!p.Trains()) o << ", role infer (forward only)";
  if (p.lora.enabled()) {
    o << ", LoRA r=" << p.lora.rank << " on ";
    for (size_t i = 0; i < p.lora.targets.size(); ++i) o << (i ? "," : "") << p.lora.targets[i];
  }
  if (!p.frozen_prefixes.empty()) {
    o << ", frozen ";
    for (size_t i = 0; i < p.frozen_prefixes.size(); ++i)
      o << (i ? "," : "") << p.frozen_prefixes[i];
  }
  if (p.tiled_mlp_shards > 1) o << ", tiled MLP x" << p.tiled_mlp_shards;
  if (p.wrap.expert_units) o << ", per-expert units";
  if (p.wrap.sub_block_units) o << ", attention and MLP units per block";
  return o.str();
}

// --lengths: "mean:N" (N tokens per sequence on average) or "uniform:MIN-MAX" (run's lengths,
// model/packing.h: their mean, rounded), for plans whose micro-batches are packed tokens
// (planner::LargestFittingMicroBatchTokens); 0 when not given.
int64_t ParseLengths(const std::string& text, const model::Plan& plan) {
  if (text.empty()) return 0;
  const std::string where = "--lengths";
  const int64_t longest = plan.packed_seq_len > 0 ? plan.packed_seq_len : plan.seq_len;
  const bool uniform = text.rfind("uniform:", 0) == 0;
  if (text.rfind("mean:", 0) != 0 && !uniform) {
    throw InputError(where + ": expected mean:N (the mean tokens per sequence) or uniform:MIN-MAX "
                             "(length histograms are not read yet), got \"" +
                     model::EscapeControls(text) + "\"");
  }
  int64_t n = 0;
  if (uniform) {
    n = std::llround(model::SequenceLengths::Parse(text, where, longest).Mean(longest));
  } else {
    n = model::ParseInt64(text.substr(5)).value_or(0);
  }
  if (n < 1) {
    throw InputError(where + ": expected mean:N with N a whole number of tokens >= 1, got \"" +
                     model::EscapeControls(text) + "\"");
  }
  if (plan.packed_seq_len <= 0 && !plan.VerlPacksTokens()) {
    throw InputError(where + ": expected a plan with packed micro-batches (a verl config, or "
                             "--max-tokens-per-micro-batch), got padded ones, whose size the "
                             "lengths do not change");
  }
  if (longest > 0 && n > longest) {
    throw InputError(where + ": expected a mean of at most the longest sequence " +
                     std::to_string(longest) + ", got " + std::to_string(n));
  }
  return n;
}

// A packed plan judged at uniform:MIN-MAX lengths with its sequences per step known (--global-batch
// or the config's): the largest row verl's rule forms over kSampledSteps steps of such lengths,
// which can exceed the budget (its rows are balanced on workload, not capped).
constexpr int kSampledSteps = 256;
void SampleVerlRows(const EstimateArgs& a, const Job& job, planner::TokenCapacity* capacity) {
  const model::Plan& plan = job.plan;
  if (!capacity->evaluated || plan.packed_seq_len <= 0 || a.lengths.rfind("uniform:", 0) != 0) return;
  const int64_t sequences = job.sequences_per_step;
  const int dp = plan.DataParallel(job.cluster.world_size());
  if (sequences <= 0 || dp < 1 || sequences % dp != 0) return;
  const int64_t budget = job.packed_budget > 0 ? job.packed_budget : plan.seq_len;
  const model::SequenceLengths lengths =
      model::SequenceLengths::Parse(a.lengths, "--lengths", plan.packed_seq_len);
  capacity->sampled_largest_row = model::LargestPackedRowOverSteps(
      lengths, 0, plan.packed_seq_len, budget, sequences / dp, dp, kSampledSteps);
  capacity->sampled_budget = budget;
  capacity->sampled_steps = kSampledSteps;
  capacity->sampled_lengths = lengths.Describe(plan.packed_seq_len);
}

// The token capacity of packed micro-batches (planner::LargestFittingMicroBatchTokens), one line.
std::string CapacityLine(const model::Plan& plan, const planner::TokenCapacity& t) {
  std::ostringstream o;
  if (t.max_tokens == 0) {
    o << "not even one " << t.longest_sequence << "-token sequence per micro-batch fits";
    return o.str();
  }
  o << "fits while a micro-batch holds at most " << t.max_tokens << " tokens ("
    << FormatBytes(t.required_at_max) << " required there); this plan's largest holds "
    << t.plan_tokens;
  if (plan.packed_seq_len <= 0 && plan.micro_batch > 1) {
    o << " (" << plan.micro_batch << " x " << t.longest_sequence
      << "; with use_remove_padding its sequences fit while their mean length is at most "
      << t.max_tokens / plan.micro_batch << ")";
  } else if (plan.packed_seq_len > 0 && plan.cp > 1) {
    o << " (a token budget per GPU of " << t.plan_tokens / plan.cp << " over cp " << plan.cp
      << "; at most " << t.max_tokens / plan.cp << " fits)";
  }
  if (t.typical_tokens > 0) {
    o << "; the typical micro-batch (" << t.typical_tokens << " tokens at the given mean length) "
      << (t.typical_fits ? "fits" : "does not fit") << " (" << FormatBytes(t.typical_required)
      << " required)";
  }
  if (t.sampled_largest_row > 0) {
    o << "; with " << t.sampled_lengths << " lengths verl's balanced rows reached "
      << t.sampled_largest_row << " tokens in " << t.sampled_steps << " simulated steps (budget "
      << t.sampled_budget << "): "
      << (t.sampled_largest_row <= t.max_tokens ? "they fit" : "the largest do not fit");
  }
  return o.str();
}

void PrintTable(const model::ModelSpec& spec, const profiles::ClusterSpec& c, const model::Plan& plan,
                const sim::MemoryReport& r, const std::vector<planner::Alternative>& alts,
                const planner::TokenCapacity& capacity,
                bool timeline, const std::string& seq_len_note, const std::string& model_from,
                const std::string& first_screen, bool explain, const std::vector<std::string>& advice,
                std::ostream& out) {
  int64_t seq = plan.ResolvedSeqLen(spec.max_seq_len);
  const sim::UnitMemory* largest = &r.units.front();
  for (const auto& u : r.units) {
    if (u.gathered_bytes > largest->gathered_bytes) largest = &u;
  }
  out << "shardtune estimate: " << spec.name << " (" << FormatCount(r.parameters) << " parameters"
      << (model_from.empty() ? "" : "; " + model_from) << ") on "
      << c.name << " ("
      << (c.cpu_only ? std::to_string(r.world) + " CPU rank" + (r.world > 1 ? "s sharing " : " on ") + c.machine
                     : std::to_string(r.world) + " GPU" + (r.world > 1 ? "s" : "") + ", " + c.gpu.name)
      << "), " << seq_len_note << "\n";
  out << first_screen;
  out << "plan: " << PlanLine(plan, r, seq) << "\n";
  if (model::ExplicitSacSave(plan) || plan.checkpointing == model::Checkpointing::kBlocks) {
    out << "activations: " << BlockPolicyLine(spec, plan) << "\n";
  }
  out << "largest unit: " << largest->name << ", " << FormatCount(largest->parameters)
      << " params, " << FormatBytes(largest->gathered_bytes) << " when gathered\n\n";
  auto row = [&](const std::string& k, Bytes b, const std::string& note) {
    out << "  " << std::left << std::setw(46) << k << std::right << std::setw(11) << FormatBytes(b)
        << (note.empty() ? "" : "  " + note) << "\n";
  };
  out << (c.cpu_only ? "Per rank\n" : "Per GPU\n");
  std::string frozen;
  if (r.frozen_sharded_params.count() > 0) {
    // A VL tower on text-only batches is not trained because it does not run, not because it was
    // frozen (model::VisionTowerIdle).
    const bool idle_only = model::VisionTowerIdle(spec, plan) && plan.frozen_prefixes.empty() && !plan.lora.enabled() &&
                           plan.Trains();
    frozen = std::string(idle_only ? " (idle vision tower " : " (frozen ") + FormatBytes(r.frozen_sharded_params) +
             " in " + r.frozen_dtype + ")";
  }
  row("model states (persistent)", r.model_state,
      "params " + FormatBytes(r.sharded_params) + frozen + " + grads " +
          FormatBytes(r.sharded_grads) + " + optimizer " + FormatBytes(r.optimizer_state));
  row("peak allocated (torch max_memory_allocated)", r.peak_allocated, "at: " + r.peak_phase);
  out << "    breakdown at the peak:\n";
  for (const auto& [cat, b] : r.peak_breakdown) {
    auto it = Why().find(cat);
    std::string why = it == Why().end() ? "" : it->second;
    // AdamW's states are zeros_like(param): the master weights' dtype (fp32 unless the weights
    // train in bf16 or fp16, e.g. a TRL model loaded in bf16 without FSDP's upcast).
    if (cat == "optimizer state" && plan.master_dtype != model::DType::kFp32) {
      why = std::string("AdamW exp_avg + exp_avg_sq, ") + model::ToString(plan.master_dtype) +
            " (the master weights' dtype), created at the first step()";
    }
    row("    " + cat, b, why);
  }
  row("step 0 peak / steady-state (step 1) peak", r.step0_peak,
      "/ " + FormatBytes(r.steady_peak) + (r.step0_peak > r.steady_peak ? "  (step 0 is worse)" : ""));
  if (r.allocator_replayed) {
    row("caching allocator reserved (no pressure)", r.reserved_no_pressure,
        "step 0 " + FormatBytes(r.reserved_step0) + " / steady " + FormatBytes(r.reserved_steady) +
            " (allocator replayed tensor by tensor)");
    out << "    reserved " << FormatBytes(r.reserved_no_pressure) << " = allocated peak "
        << FormatBytes(r.peak_allocated) << " + " << FormatBytes(r.fragmentation)
        << " cached free blocks (split segments, per-stream pools), largest free block "
        << FormatBytes(r.largest_free_block) << " at the allocated peak";
    if (r.allocator_retries > 0) {
      out << "; under the capacity the allocator frees its cache and retries "
          << r.allocator_retries << " time(s)"
          << (r.fits ? " and the step completes (each retry is a device-wide sync)"
                     : ", then a cudaMalloc fails even after freeing it: out of memory");
    }
    out << "\n";
  } else {
    row("caching allocator reserved (no pressure)", r.reserved_no_pressure,
        "per-stream pools: blocks freed on one stream are not reused by another");
  }
  for (const auto& [k, b] : r.outside_allocator) row("outside the allocator: " + k, b, "");
  if (!r.allocator_replayed) row("fragmentation allowance", r.fragmentation, "");
  row("required", r.required, std::string(r.fits ? "FITS" : "DOES NOT FIT") + " in " +
                                  FormatBytes(r.capacity) + " usable (headroom " +
                                  FormatBytes(r.capacity - r.required) + ")");
  if (explain) out << "  judged on: " << JudgedOnSentence(r) << "\n";
  if (capacity.evaluated) out << "  packed tokens: " << CapacityLine(plan, capacity) << "\n";
  out << "\n";
  const bool per_host = c.HostsPerNode() > 1;  // a node of several hosts (GB200 NVL72)
  if (!per_host) {
    out << "Host (per node)\n";
  } else {
    out << "Host (per host: " << c.GpusPerHost() << " of the node's " << c.gpus_per_node << " GPUs)\n";
  }
  for (const auto& [k, b] : r.host.breakdown) row(k, b, "");
  row("peak (" + r.host.peak_phase + ")", r.host.peak_per_node,
      std::string(r.host.fits ? "fits" : "DOES NOT FIT") + " in " + FormatBytes(r.host.capacity_per_node));
  out << "\nWhat if (same plan, other offload / checkpointing):\n";
  out << "  offload    checkpointing   GPU required       " << (per_host ? "RAM per host " : "host per node")
      << "      verdict\n";
  for (const auto& a : alts) {
    out << "  " << std::left << std::setw(11) << model::ToString(a.offload) << std::setw(16)
        << model::ToString(a.checkpointing) << std::setw(19) << FormatBytes(a.gpu_required)
        << std::setw(19) << FormatBytes(a.host_peak_per_node)
        << (a.fits() ? "fits" : !a.gpu_fits && !a.host_fits ? "GPU and host too small"
                                : !a.gpu_fits ? "GPU too small" : "host RAM too small")
        << std::right << "\n";
  }
  if (!advice.empty()) out << "\nWhy, and what would help:\n";
  for (const auto& line : advice) out << "  - " << line << "\n";
  if (timeline) {
    out << "\nTimeline (allocated at the end of each phase / peak within it):\n";
    for (const auto& t : r.timeline) {
      out << "  " << std::setw(11) << FormatBytes(t.allocated_after) << std::setw(12)
          << FormatBytes(t.allocated_peak) << "  " << t.phase << "\n";
    }
  }
}

}  // namespace

std::string PhaseVerdict(const sim::JobPhases& p) {
  if (p.phases.empty()) return "";
  const sim::PhaseMemory& d = p.phases[static_cast<size_t>(p.deciding)];
  std::string where = std::string(sim::ToString(d.phase));
  std::ostringstream o;
  if (p.fits) {
    o << "fits in every phase; tightest: " << where << " (" << FormatBytes(d.required) << " required at "
      << d.moment << ", headroom " << FormatBytes(d.headroom) << ")";
    return o.str();
  }
  o << (p.training_fits ? "fits in training, " : "") << "runs out ";
  bool gpu = !d.fits;
  if (d.phase == sim::JobPhase::kSave) o << "while saving";
  else if (d.phase == sim::JobPhase::kResume) o << "while resuming";
  else if (d.phase == sim::JobPhase::kLoad) o << "while loading the model";
  else o << "in " << where;
  if (gpu) {
    o << ": " << FormatBytes(d.required) << " > " << FormatBytes(p.capacity) << " at the " << d.moment;
  } else {
    o << " on the host: " << FormatBytes(d.host_total) << " per " << p.host_scope << " > " << FormatBytes(p.host_limit)
      << " (" << d.host_moment << ")";
  }
  if (!d.hint.empty()) o << "; " << d.hint;
  return o.str();
}

namespace {
void PrintPhaseTable(const sim::JobPhases& p, const std::string& verdict, std::ostream& out);

// Advice that was checked (issue #49 item 7): when the job runs out of host RAM at load with every
// rank loading the full weights, the two loads that avoid it (--model-load meta, rank0) are
// re-estimated over every phase before they are offered, and the answer says what each leaves
// (e.g. offload all's pinned optimizer state still runs the host out in step 0). Returns "" when
// the load is not what decides the verdict; else the sentence that replaces the load phase's hint
// and the advice line.
std::string CheckedLoadAdvice(const sim::JobPhases& phases, const sim::MemoryEstimate& est,
                              const model::ModelSpec& spec, const profiles::ClusterSpec& cluster,
                              const model::Plan& plan, const sim::MemoryOptions& opt) {
  if (phases.fits || phases.phases.empty() || opt.model_load != sim::ModelLoad::kEveryRank) return "";
  const sim::PhaseMemory& d = phases.phases[static_cast<size_t>(phases.deciding)];
  if (d.phase != sim::JobPhase::kLoad || d.host_fits) return "";
  std::string out;
  for (const auto& [load, name] : {std::pair{sim::ModelLoad::kMeta, "--model-load meta (meta-device init, sharded load)"},
                                   std::pair{sim::ModelLoad::kRank0, "--model-load rank0 (cpu_ram_efficient_loading)"}}) {
    sim::MemoryOptions o = opt;
    o.model_load = load;
    const sim::JobPhases alt = sim::EstimateJobPhases(est.program, est.report, spec, cluster, plan, o);
    out += out.empty() ? "" : "; ";
    out += name;
    if (alt.fits) {
      out += " fits in every phase";
      continue;
    }
    const sim::PhaseMemory& x = alt.phases[static_cast<size_t>(alt.deciding)];
    const std::string figure =
        !x.fits ? FormatBytes(x.required) + " > " + FormatBytes(alt.capacity) + " on the GPU"
                : FormatBytes(x.host_total) + " per " + alt.host_scope + " > " + FormatBytes(alt.host_limit) +
                      " of host RAM";
    out += x.phase == sim::JobPhase::kLoad
               ? ": the load still needs " + figure
               : ": loads, then runs out in " + std::string(sim::ToString(x.phase)) + ": " + figure;
  }
  return out;
}
}  // namespace

void PrintPhases(const sim::JobPhases& p, std::ostream& out) {
  PrintPhaseTable(p, PhaseVerdict(p), out);
}

namespace {
void PrintPhaseTable(const sim::JobPhases& p, const std::string& verdict, std::ostream& out) {
  out << "\nJob phases (GPU per rank; " << (p.host_scope == "node" ? "host per node" : "host RAM per host")
      << ", pinned + pageable)\n";
  out << "  phase            allocated    required  GPU      host (pinned)           peak moment\n";
  for (const auto& ph : p.phases) {
    out << "  " << std::left << std::setw(15) << sim::ToString(ph.phase) << std::right << std::setw(11)
        << FormatBytes(ph.allocated_peak) << std::setw(12) << FormatBytes(ph.required) << "  "
        << std::left << std::setw(7) << (ph.fits ? "fits" : "OOM") << std::right << std::setw(11)
        << FormatBytes(ph.host_total) << " (" << std::setw(9) << FormatBytes(ph.host_pinned) << ")"
        << (ph.host_fits ? "  " : "! ") << ph.moment << "\n";
    std::string top;
    for (const auto& [k, b] : ph.top) top += (top.empty() ? "" : ", ") + k + " " + FormatBytes(b);
    out << "      top: " << top << "; reserved " << FormatBytes(ph.reserved) << ", nvidia-smi "
        << FormatBytes(ph.nvidia_smi) << "\n";
  }
  out << "  verdict: " << verdict << "\n";
}
}  // namespace

void AddEstimateCommand(CLI::App* app, EstimateArgs* a) {
  CLI::App* sub = app->add_subcommand("estimate", "Per-GPU and per-host memory of a training job");
  AddJobFlags(sub, a);
  sub->add_option("--role-plan", a->role_plans,
                  "Plan JSON of another role on the same GPUs (repeatable; RL: reference, rollout)")
      ->check(CLI::ExistingFile);
  sub->add_option("--reward-model", a->reward_model,
                  "The model of the --from config's FSDP reward model (verl reward_model.model.path "
                  "with use_reward_loop false), as --model takes it: a preset, a Hugging Face id "
                  "of one, or a config.json; default: that path when it resolves");
  sub->add_flag("--offload-between-roles", a->offload_between_roles,
                "Idle roles offload params and optimizer state to the host (verl param_offload, "
                "ROLL offload)");
  sub->add_flag(
      "--roles-in-one-process", a->roles_in_one_process,
      "All roles share one process per GPU (verl's fused worker); default: one process per role");
  sub->add_option("--lengths", a->lengths,
                  "mean:N, the data's mean sequence length (prompt + response), or uniform:MIN-MAX "
                  "(as run's --lengths): the typical "
                  "packed micro-batch is also judged (verl use_remove_padding, token budgets)");
  sub->add_option("--plot", a->plot,
                  "Draw memory over the steps (stacked by category, reserved, capacity, the peak) "
                  "and per job phase to FILE.svg or FILE.html (self-contained)");
  sub->add_option("--memory-snapshot", a->memory_snapshot,
                  "Write the predicted caching-allocator history to FILE.pickle in the format of "
                  "torch.cuda.memory._snapshot() (open it in pytorch.org/memory_viz)");
}

namespace {

// The model each --from role runs: the job's, or the one the config names for it (verl's reward
// model, ImportedRole::model_named), resolved as --model is, or --reward-model when given.
// Resolution warnings go to `warnings`.
std::vector<model::ModelSpec> RoleModels(const EstimateArgs& a, const Job& job,
                                         std::vector<std::string>* warnings) {
  std::vector<model::ModelSpec> specs;
  for (const auto& role : job.from.roles) {
    if (role.model_named.empty()) {
      specs.push_back(job.spec);
    } else if (!a.reward_model.empty()) {
      specs.push_back(model::ResolveModelArg(a.reward_model, warnings, "--reward-model"));
    } else {
      specs.push_back(model::ResolveModelArg(role.model_named, warnings, role.model_named_where,
                                             "--reward-model"));
    }
  }
  return specs;
}

// The roles of --from and --role-plan next to the main plan, estimated on the same cluster, the
// --from roles on `role_specs` (RoleModels).
sim::ColocationReport ColocatedRoles(const EstimateArgs& a, const Job& job,
                                     const std::vector<model::ModelSpec>& role_specs,
                                     const sim::MemoryReport& main) {
  std::vector<sim::ColocatedRole> roles;
  auto role_of = [](std::string name, sim::MemoryReport report, std::optional<bool> offloaded) {
    sim::ColocatedRole r;
    r.name = std::move(name);
    r.report = std::move(report);
    r.offloaded_when_idle = offloaded;
    return r;
  };
  std::string main_name = std::string(model::ToString(job.plan.role)) + " (" +
                          (a.plan.plan_file.empty() ? std::string("flags") : a.plan.plan_file) +
                          ")";
  if (!job.from.roles.empty() || !job.from.engines.empty()) main_name = "actor";
  roles.push_back(role_of(main_name, main, job.from.offloaded_when_idle));
  // The roles the --from config runs beside it (verl: critic, reference policy), each on the
  // model it trains (the critic's has a value head).
  for (size_t i = 0; i < job.from.roles.size(); ++i) {
    const configs::ImportedRole& role = job.from.roles[i];
    model::ModelSpec spec = role_specs[i];
    spec.value_head = role.value_head;
    ThrowIfProblems(JobProblems(spec, job.cluster, role.plan, PlanSource(a.plan) + " (" + role.name + ")"));
    const std::string own_model = role.model_named.empty() ? "" : ", " + role_specs[i].name;
    roles.push_back(role_of(role.name + " (" + model::ToString(role.plan.role) + own_model + ")",
                            sim::EstimateMemory(spec, job.cluster, role.plan, job.options.memory),
                            role.offloaded_when_idle));
    if (role.shares_actor_states) roles.back().states_of = 0;  // the actor's FSDP module
  }
  for (const auto& file : a.role_plans) {
    model::Plan p = model::ReadPlanFile(file);
    ThrowIfProblems(JobProblems(job.spec, job.cluster, p, file));
    roles.push_back(role_of(std::string(model::ToString(p.role)) + " (" + file + ")",
                            sim::EstimateMemory(job.spec, job.cluster, p, job.options.memory),
                            std::nullopt));
  }
  for (const auto& e : job.from.engines) {  // verl's rollout and reward engines on the same GPUs
    roles.push_back(sim::RolloutEngineRole(e.role, e.name, e.gpu_memory_utilization, e.free_cache_engine,
                                           e.enforce_eager, job.cluster.gpu.usable_memory,
                                           job.options.memory.constants));
  }
  sim::ColocationOptions o;
  o.offload_between_roles = a.offload_between_roles;
  o.separate_processes = !a.roles_in_one_process && !job.from.roles_in_one_process;
  return sim::CoLocate(roles, o, job.options.memory.constants);
}

void PrintColocation(const sim::ColocationReport& c, std::ostream& out) {
  out << "\nCo-located roles (per GPU)\n";
  out << "  role                                  alone      idle residue   while it runs\n";
  for (const auto& r : c.roles) {
    out << "  " << std::left << std::setw(36) << r.name << std::right << std::setw(11)
        << FormatBytes(r.own_required) << std::setw(15) << FormatBytes(r.idle_total)
        << std::setw(16) << FormatBytes(r.colocated_required) << "\n";
  }
  out << "  peak " << FormatBytes(c.peak) << " while " << c.peak_role
      << " runs: " << (c.fits ? "FITS" : "DOES NOT FIT") << " in " << FormatBytes(c.capacity)
      << "\n";
  out << "  judged on: " << JudgedOnSentence(c) << "\n";
}

nlohmann::ordered_json ColocationJson(const sim::ColocationReport& c) {
  nlohmann::ordered_json roles = nlohmann::ordered_json::array();
  for (const auto& r : c.roles) {
    nlohmann::ordered_json residue = nlohmann::ordered_json::object();
    for (const auto& [k, b] : r.idle_residue) residue[k] = b.count();
    roles.push_back({{"role", r.name},
                     {"required_bytes", r.own_required.count()},
                     {"idle_residue_bytes", r.idle_total.count()},
                     {"idle_residue", residue},
                     {"colocated_required_bytes", r.colocated_required.count()}});
  }
  return {{"roles", roles},           {"peak_bytes", c.peak.count()},
          {"peak_role", c.peak_role}, {"capacity_bytes", c.capacity.count()},
          {"fits", c.fits},           {"judged_on", JudgedOnSentence(c)}};
}

// The answer in the first lines (issue #49 item 3): fits or not, the deciding figure, and when it
// does not fit the first what-if change that does (each what-if row is its own estimate).
std::string FirstScreen(bool fits, const std::string& verdict, const sim::JobPhases& phases,
                        const model::Plan& plan, const std::vector<planner::Alternative>& alts) {
  std::ostringstream o;
  std::string label = fits ? "FITS" : "DOES NOT FIT";
  if (fits && !phases.phases.empty()) {
    const sim::PhaseMemory& d = phases.phases[static_cast<size_t>(phases.deciding)];
    if (IsMarginal(d.headroom, phases.capacity)) label = "FITS, MARGINALLY";
  }
  o << "=> " << label << ": " << verdict << "\n";
  if (!fits) {
    for (const planner::Alternative& x : alts) {
      if (!x.fits() || (x.offload == plan.offload && x.checkpointing == plan.checkpointing)) continue;
      o << "=> fits with --offload " << model::ToString(x.offload) << " --checkpointing "
        << model::ToString(x.checkpointing) << ": " << FormatBytes(x.gpu_required) << " per GPU, "
        << FormatBytes(x.host_peak_per_node) << " of host RAM per " << phases.host_scope << "\n";
      break;
    }
  }
  return o.str();
}

}  // namespace

void RunEstimate(const EstimateArgs& a, std::ostream& out, std::ostream& err) {
  Job job = ResolveJob(a);
  const std::vector<model::ModelSpec> role_specs = RoleModels(a, job, &job.warnings);
  if (!a.reward_model.empty() &&
      std::none_of(job.from.roles.begin(), job.from.roles.end(),
                   [](const configs::ImportedRole& r) { return !r.model_named.empty(); })) {
    throw InputError("--reward-model " + a.reward_model +
                     ": expected a --from verl config with reward_model.enable and "
                     "use_reward_loop false (the FSDP reward model on the actor's GPUs), got " +
                     (a.plan.from_files.empty() ? std::string("no --from") : "none in " + PlanSource(a.plan)));
  }
  const auto& spec = job.spec;
  const auto& cluster = job.cluster;
  const auto& plan = job.plan;
  const sim::MemoryOptions& opt = job.options.memory;
  if (!a.plot.empty()) sim::CheckPlotName(a.plot, "--plot");
  if (!a.memory_snapshot.empty()) sim::CheckSnapshotName(a.memory_snapshot, "--memory-snapshot");
  // The per-op timeline (an OpName string per op: millions for an MoE with a unit per expert)
  // only when it is printed.
  sim::MemoryEstimate est = sim::EstimateMemoryWithProgram(spec, cluster, plan, opt, a.timeline);
  const sim::MemoryReport& r = est.report;
  sim::JobPhases phases = sim::EstimateJobPhases(est.program, r, spec, cluster, plan, opt);
  const std::string load_check = CheckedLoadAdvice(phases, est, spec, cluster, plan, opt);
  if (!load_check.empty()) phases.phases[static_cast<size_t>(phases.deciding)].hint = load_check;
  if (!a.plot.empty()) {
    sim::WriteMemoryPlot(a.plot, "--plot", est.program, r, &phases,
                         "shardtune estimate: " + spec.name + " on " + cluster.name);
    WriteLine(err, "wrote ", a.plot);
  }
  if (!a.memory_snapshot.empty()) {
    sim::WriteMemorySnapshot(a.memory_snapshot, "--memory-snapshot", est.program, r,
                             "shardtune estimate: " + spec.name + " on " + cluster.name);
    WriteLine(err, "wrote ", a.memory_snapshot);
  }
  auto alts = planner::CompareOffloadAndCheckpointing(spec, cluster, plan, opt);
  // Only worth a walk when the loss path holds the peak (the only advice that quotes it).
  planner::FusedLossAlternative fused;
  if (r.peak_at.region == sim::StepRegion::kHead) fused = planner::CompareFusedLoss(spec, cluster, plan, opt);
  const auto& warnings = job.warnings;
  // The advice, its load suggestion as re-estimating it showed.
  // The other suggested changes, re-estimated before they are printed (issue #49 item 7).
  const planner::ChangeChecker check = [&](planner::AdvisedChange change) {
    return planner::CheckAdvisedChange(spec, cluster, plan, opt, change);
  };
  const std::vector<std::string> advice = planner::AdviseOnMemory(plan, r, alts, fused, load_check, check);
  const int64_t mean_len = ParseLengths(a.lengths, plan);
  planner::TokenCapacity capacity =
      planner::LargestFittingMicroBatchTokens(spec, cluster, plan, opt, mean_len);
  SampleVerlRows(a, job, &capacity);
  sim::FeatureSavings savings;
  if (sim::UsesFeatures(plan)) savings = sim::CompareWithFullFinetune(spec, cluster, plan, opt, r);
  sim::ColocationReport colocated;
  const bool colocating =
      !a.role_plans.empty() || !job.from.roles.empty() || !job.from.engines.empty();
  if (colocating) colocated = ColocatedRoles(a, job, role_specs, r);
  // One verdict: the job fits when every phase of this role fits and, with co-located roles,
  // the GPU holds each role beside the others' idle residue.
  bool fits = phases.fits && (!colocating || colocated.fits);
  std::string verdict = PhaseVerdict(phases);
  if (colocating && !colocated.fits) {
    verdict = (phases.fits ? "fits alone in every phase, but runs out beside the co-located "
                             "roles: "
                           : verdict + "; beside the co-located roles too: ") +
              FormatBytes(colocated.peak) + " > " + FormatBytes(colocated.capacity) + " while " +
              colocated.peak_role + " runs";
  }
  // Variable-length micro-batches (verl's use_remove_padding with a fixed number of sequences):
  // a micro-batch holds the data's tokens, not the config's. The step above is judged at the
  // worst the config admits (every sequence at the maximum length); the answer also says up to
  // which mean length the job fits, and with --lengths judges it at the data's typical
  // micro-batch, co-located roles included.
  const bool fits_worst_case = fits;
  const bool variable = capacity.evaluated && plan.packed_seq_len <= 0 && plan.micro_batch > 1;
  // Only when the lengths are what breaks it: a role that fits alone with every sequence at the
  // maximum (its largest fitting micro-batch holds more) but not beside the co-located roles or
  // in another phase keeps that verdict (the sentence would read "average more than" a mean
  // above the maximum).
  const bool length_bound =
      capacity.max_tokens > 0 && capacity.max_tokens / plan.micro_batch < capacity.longest_sequence;
  if (variable && !fits && length_bound) {
    std::ostringstream o;
    const int64_t mean_cap = capacity.max_tokens / plan.micro_batch;
    Bytes worst_bytes = r.required;
    if (colocating) worst_bytes = std::max(worst_bytes, colocated.peak);
    const std::string worst = "a micro-batch's " + std::to_string(plan.micro_batch) +
                              " sequences average more than " + std::to_string(mean_cap) +
                              " tokens (all at the " + std::to_string(capacity.longest_sequence) +
                              "-token maximum: " + FormatBytes(worst_bytes) + " > " +
                              FormatBytes(phases.capacity) + ")";
    const std::string cap = "cap micro-batches at " + std::to_string(capacity.max_tokens) +
                            " tokens (verl: use_dynamic_bsz with ppo_max_token_len_per_gpu <= " +
                            std::to_string(capacity.max_tokens / std::max(1, plan.cp)) + ")";
    bool typical_fits = false;
    std::string typical_text;
    if (capacity.typical_tokens > 0 && capacity.typical_fits) {
      const model::Plan t =
          planner::PackedRowPlan(plan, capacity.typical_tokens, capacity.longest_sequence);
      sim::MemoryEstimate te = sim::EstimateMemoryWithProgram(spec, cluster, t, opt, false);
      sim::JobPhases tp = sim::EstimateJobPhases(te.program, te.report, spec, cluster, t, opt);
      typical_fits = tp.fits;
      if (typical_fits && colocating) {
        sim::ColocationReport tc = ColocatedRoles(a, job, role_specs, te.report);
        typical_fits = tc.fits;
        typical_text = "beside the co-located roles " + FormatBytes(tc.peak) + " while " + tc.peak_role + " runs";
      } else {
        typical_text = FormatBytes(capacity.typical_required) + " required";
      }
    }
    if (typical_fits) {
      o << "fits at the given lengths (the typical micro-batch, " << capacity.typical_tokens
        << " tokens: " << typical_text << "); runs out when " << worst << ": " << cap
        << " to be safe";
      fits = true;
    } else {
      o << "runs out when " << worst << "; fits below that: give --lengths mean:N (the data's "
           "mean prompt + response tokens) to judge at your data, or "
        << cap;
    }
    verdict = o.str();
  }
  if (!a.json) {
    for (const auto& w : warnings) WriteLine(err, "warning: ", w);
    PrintTable(spec, cluster, plan, r, alts, capacity, a.timeline, job.seq_len_note,
               job.model_from, FirstScreen(fits, verdict, phases, plan, alts), a.explain, advice, out);
    PrintFeatureSavings(savings, r, out);
    if (colocating) PrintColocation(colocated, out);
    PrintPhaseTable(phases, verdict, out);
    return;
  }
  nlohmann::ordered_json j = JobHeaderJson(job, "shardtune.estimate");
  nlohmann::ordered_json mem = sim::MemoryReportToJson(r, a.timeline, JudgedOnSentence(r));
  for (auto it = mem.begin(); it != mem.end(); ++it) j[it.key()] = it.value();
  // The step fits only if it also fits beside the co-located roles' idle residue.
  if (colocating && !colocated.fits) j["fits"] = false;
  nlohmann::ordered_json alt = nlohmann::ordered_json::array();
  for (const auto& x : alts) {
    alt.push_back({{"offload", model::ToString(x.offload)},
                   {"checkpointing", model::ToString(x.checkpointing)},
                   {"gpu_required_bytes", x.gpu_required.count()}, {"gpu_fits", x.gpu_fits},
                   {"host_peak_bytes_per_node", x.host_peak_per_node.count()},
                   {"host_fits", x.host_fits}, {"fits", x.fits()}});
  }
  if (sim::UsesFeatures(plan)) j["savings_vs_full_finetune"] = sim::FeatureSavingsToJson(savings);
  if (colocating) j["colocation"] = ColocationJson(colocated);
  j["phases"] = sim::JobPhasesToJson(phases);
  j["alternatives"] = alt;
  if (capacity.evaluated) {
    j["micro_batch_token_capacity"] = {{"plan_tokens", capacity.plan_tokens},
                                       {"typical_tokens", capacity.typical_tokens},
                                       {"typical_fits", capacity.typical_fits},
                                       {"typical_required_bytes", capacity.typical_required.count()},
                                       {"longest_sequence", capacity.longest_sequence},
                                       {"max_tokens", capacity.max_tokens},
                                       {"required_bytes_at_max", capacity.required_at_max.count()},
                                       {"summary", CapacityLine(plan, capacity)}};
    if (capacity.sampled_largest_row > 0) {
      j["micro_batch_token_capacity"]["verl_rows_sampled"] = {
          {"lengths", capacity.sampled_lengths},
          {"steps", capacity.sampled_steps},
          {"budget_tokens", capacity.sampled_budget},
          {"largest_row_tokens", capacity.sampled_largest_row},
          {"fits", capacity.sampled_largest_row <= capacity.max_tokens}};
    }
  }
  if (fused.evaluated) {
    j["fused_loss_alternative"] = {{"loss_kernel", "fused_linear"},
                                   {"peak_allocated_bytes", fused.peak_allocated.count()},
                                   {"required_bytes", fused.required.count()},
                                   {"fits", fused.fits},
                                   {"peak_phase", fused.peak_phase}};
  }
  j["advice"] = advice;
  // The job's verdict, as the text's last line says it (the report's own "fits" above is this
  // role's step alone).
  j["verdict"] = {{"fits", fits}, {"text", verdict}};
  if (variable) j["verdict"]["fits_worst_case"] = fits_worst_case;
  j["warnings"] = warnings;
  out << j.dump(2) << "\n";
}

}  // namespace shardtune::cli
