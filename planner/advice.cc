// Advice rules over a MemoryReport. Thresholds are presentation choices (when a sentence is
// worth printing), not model constants.
#include "planner/advice.h"
#include "model/text.h"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace shardtune::planner {
namespace {


Bytes At(const sim::MemoryReport& r, const std::string& cat) {
  for (const auto& kv : r.peak_breakdown) {
    if (kv.first == cat) return kv.second;
  }
  return Bytes();
}

const char* Name(model::Offload o) { return model::ToString(o); }

// What re-estimating a suggested change showed, as the sentence's end: "" when it was not
// re-estimated, nullopt when it was and does not lower the required memory (the suggestion goes).
std::optional<std::string> Checked(const ChangeChecker& check, AdvisedChange change,
                                   const sim::MemoryReport& r) {
  if (!check) return "";
  const CheckedChange c = check(change);
  if (!c.evaluated) return "";
  if (!(c.required < r.required)) return std::nullopt;
  return " Re-estimated with " + c.flags + ": " + model::GiBText(c.required) + " required" +
         (c.fits ? ", which fits." : r.fits ? "." : ", which still does not fit.");
}

}  // namespace

std::vector<std::string> AdviseOnMemory(const model::Plan& plan, const sim::MemoryReport& r,
                                        const std::vector<Alternative>& alts,
                                        const FusedLossAlternative& fused,
                                        const std::string& checked_load,
                                        const ChangeChecker& check) {
  std::vector<std::string> out;
  if (!r.fits) {
    const Alternative* best = nullptr;
    for (const auto& a : alts) {  // offload-major order: the first that fits is the cheapest
      if (a.fits()) { best = &a; break; }
    }
    if (best) {
      out.push_back("Does not fit by " + model::GiBText(r.required - r.capacity) + ". The first choice that fits is offload " +
                    Name(best->offload) + " with checkpointing " + model::ToString(best->checkpointing) +
                    ": " + model::GiBText(best->gpu_required) + " per GPU and " + model::GiBText(best->host_peak_per_node) +
                    " of host RAM per node.");
    } else {
      const Alternative* gpu_ok = nullptr;
      for (const auto& a : alts) {
        if (a.gpu_fits && (!gpu_ok || a.host_peak_per_node < gpu_ok->host_peak_per_node)) gpu_ok = &a;
      }
      if (gpu_ok) {
        out.push_back("Only offload " + std::string(Name(gpu_ok->offload)) + " with checkpointing " +
                      model::ToString(gpu_ok->checkpointing) + " fits the GPUs (" +
                      model::GiBText(gpu_ok->gpu_required) + " of " + model::GiBText(gpu_ok->gpu_capacity) +
                      "), and it needs " + model::GiBText(gpu_ok->host_peak_per_node) + " of host RAM per node "
                      "against " + model::GiBText(gpu_ok->host_capacity_per_node) + " here: offloaded fp32 "
                      "params, grads and optimizer state take 16 bytes per parameter of the node's shards.");
      } else {
        out.push_back(
            r.trainable_parameters == r.parameters
                ? "No offload or checkpointing choice fits the GPUs: add GPUs (the fp32 model "
                  "states alone are 16 bytes per parameter over the shard group)."
                : "No offload or checkpointing choice fits the GPUs: add GPUs (the model "
                  "states are 16 bytes per trainable and 4 per frozen parameter over the "
                  "shard group).");
      }
    }
  }
  Bytes loss = At(r, "logits and loss");
  Bytes working = At(r, "activation working set (temporaries, gradients)");
  bool loss_peak = r.peak_at.region == sim::StepRegion::kHead;
  if (loss_peak && plan.loss_kernel == model::LossKernel::kVerlFlashCe) {
    // model/activations.cc VerlFlashCeHead: CopySlices' backward of the in-place division.
    out.push_back(
        "The peak is in the log-prob head's backward: verl divides the logits by the temperature "
        "in place through a view, so autograd's CopySlices holds four [tokens, vocabulary] " +
        std::string(model::ToString(plan.param_dtype)) + " tensors at once (" +
        model::GiBText(working + loss) +
        " with the layer's gradients). They scale with the tokens of a micro-batch: fewer "
        "sequences per micro-batch (ppo_micro_batch_size_per_gpu) or a smaller token budget "
        "(use_dynamic_bsz with ppo_max_token_len_per_gpu) shrinks them, and verl's "
        "use_fused_kernels never materialises them (--loss-kernel verl_fused_torch or "
        "verl_fused_triton estimates it).");
  } else if (loss_peak && plan.loss_kernel == model::LossKernel::kVerlPaddedCe) {
    // model/activations.cc VerlPaddedCeHead: the padded lm_head output and its backward.
    out.push_back(
        "The peak is in the log-prob head's backward: without use_remove_padding verl computes "
        "the logits of every padded position (micro-batch x (prompt + response)) and their "
        "gradient, two such [tokens, vocabulary] " + std::string(model::ToString(plan.param_dtype)) +
        " tensors at once (" + model::GiBText(working + loss) +
        " with the layer's gradients), of which only the response slice is used. "
        "use_remove_padding: true computes them for the real tokens only; fewer sequences per "
        "micro-batch (ppo_micro_batch_size_per_gpu) also shrinks them.");
  } else if (loss_peak && model::IsVerlFusedHead(plan.loss_kernel)) {
    // model/activations.cc VerlFusedTorchHead / VerlFusedTritonHead: no [T, V] tensor; what
    // remains is the weight's gradient and the kernels' fixed-size buffers.
    const bool torch = plan.loss_kernel == model::LossKernel::kVerlFusedTorch;
    out.push_back(
        "The peak is in verl's fused log-prob head's backward (" + model::GiBText(working + loss) +
        " with the layer's gradients): " +
        (torch ? "each 512-token chunk reruns its fp32 logits, and its [vocabulary, hidden] weight "
                 "product sits beside the accumulated gradient and the chunk before's, which "
                 "do not shrink with the micro-batch; fused_kernel_options.impl_backend triton "
                 "writes the gradient in place of the products."
               : "the [tokens, 9504] d-logits buffer and the input's gradient scale with the "
                 "tokens of a micro-batch: fewer tokens per micro-batch (ppo_micro_batch_size_per_gpu "
                 "or ppo_max_token_len_per_gpu) shrink them."));
  } else if (loss_peak) {
    std::string s = "The peak is in the loss backward: the fp32 log-softmax and its gradients hold " +
                    model::GiBText(working + loss) + " (12 bytes per vocabulary entry per token). ";
    if (fused.evaluated && fused.peak_allocated < r.peak_allocated) {
      s += "The fused linear cross-entropy (--loss-kernel fused_linear: Liger-Kernel's, or "
           "shardtune run's), which holds one chunk of logits at a time, lowers the peak to " +
           model::GiBText(fused.peak_allocated) + " (at " + fused.peak_phase + "; " +
           model::GiBText(fused.required) + " required" +
           (fused.fits == r.fits ? std::string(")")
            : fused.fits         ? std::string(", which fits)")
                                 : std::string(", which still does not fit)")) +
           "; a smaller micro-batch also shrinks it.";
    } else {
      s += "A chunked or fused linear cross-entropy, or a smaller micro-batch, removes most of it.";
    }
    out.push_back(s);
  }
  Bytes acts = At(r, "activations saved for backward") + At(r, "vision tower activations");
  // Ulysses cp divides every per-token term by cp (each rank holds S/cp tokens): worth saying
  // when activations or the loss path make up most of a peak that does not fit.
  Bytes per_token = acts + loss + working;
  if (!r.fits && plan.cp == 1 && per_token.count() > r.peak_allocated.count() / 2) {
    if (auto checked = Checked(check, AdvisedChange::kCp, r)) {
      out.push_back(
          "Activations and the loss path are " + model::GiBText(per_token) + " of the " +
          model::GiBText(r.peak_allocated) +
          " peak and scale with the tokens a rank holds: "
          "Ulysses context parallelism (--cp N, a divisor of the attention heads) gives each "
          "rank S/N tokens of a sequence, dividing them by N, for 4 all-to-alls per layer "
          "per pass (`shardtune tune` searches N)." + *checked);
    }
  }
  if (plan.checkpointing == model::Checkpointing::kNone &&
      acts.count() > r.peak_allocated.count() / 3) {
    if (auto checked = Checked(check, AdvisedChange::kCheckpointing, r)) {
      out.push_back("Saved activations are " + model::GiBText(acts) + " of the " + model::GiBText(r.peak_allocated) +
                    " peak; --checkpointing full keeps only each block's input." + *checked);
    }
  }
  // verl's activation offload: what every block but the last two saved leaves the GPU, for pinned
  // host RAM and host-link copies beside the compute. After checkpointing (which the line above
  // suggests first: it costs no host RAM), and only where it was re-estimated and lowers the
  // requirement, with its host figure.
  if (!r.fits && plan.activation_offload == model::ActivationOffload::kNone &&
      plan.checkpointing != model::Checkpointing::kNone && check &&
      acts.count() > r.peak_allocated.count() / 4) {
    const CheckedChange c = check(AdvisedChange::kActivationOffload);
    if (c.evaluated && c.required < r.required) {
      out.push_back("Saved activations are " + model::GiBText(acts) + " of the " + model::GiBText(r.peak_allocated) +
                    " peak; --activation-offload verl_async (verl's enable_activation_offload) keeps two blocks' "
                    "on the GPU and copies the others to pinned host RAM, block by block beside the compute. "
                    "Re-estimated with it: " +
                    model::GiBText(c.required) + " required" +
                    (c.fits ? ", which fits" : ", which still does not fit") + "; host RAM " +
                    model::GiBText(c.host_peak_per_node) + " per node" +
                    (c.host_fits ? "." : ", more than it has."));
    }
  }
  if (!r.units.empty()) {
    std::vector<int64_t> sizes;
    for (const auto& u : r.units) sizes.push_back(u.gathered_bytes.count());
    std::sort(sizes.begin(), sizes.end());
    int64_t median = sizes[sizes.size() / 2];
    for (const auto& u : r.units) {
      int span = u.last_segment - u.first_segment;
      if (u.name != "root" && u.gathered_bytes.count() > 4 * std::max<int64_t>(median, 1) && span > 1) {
        if (auto checked = Checked(check, AdvisedChange::kWrap, r)) {
          out.push_back("Unit " + u.name + " holds " + model::GiBText(u.gathered_bytes) + " gathered across " +
                        std::to_string(span + 1) + " forward segments: the wrap policy left many "
                        "submodules to one parent. --wrap block keeps one block gathered at a time." +
                        *checked);
        }
        break;
      }
    }
  }
  if (r.steady_peak > r.step0_peak && r.steady_peak.count() > r.step0_peak.count() * 21 / 20) {
    out.push_back("Step 1 peaks " + model::GiBText(r.steady_peak - r.step0_peak) + " higher than step 0: the "
                  "optimizer state created by the first step() is live through every later "
                  "forward and backward. A run that survives step 0 can still fail at step 1.");
  }
  // Frozen parameters (LoRA's base, --freeze, an inference role) keep their shards in the dtype
  // they were loaded in (Plan::frozen_dtype, default the master dtype) though no optimizer
  // updates them; PEFT and RL reference workers usually load them in bf16.
  if (r.trainable_parameters < r.parameters && plan.FrozenDtype() == model::DType::kFp32 &&
      plan.offload == model::Offload::kNone) {
    double frozen = 0;
    for (const auto& u : r.units) {
      if (u.parameters > 0) {
        frozen += static_cast<double>(u.shard_bytes.count()) *
                  static_cast<double>(u.parameters - u.trainable) /
                  static_cast<double>(u.parameters);
      }
    }
    if (frozen > static_cast<double>(r.peak_allocated.count()) / 10) {
      if (auto checked = Checked(check, AdvisedChange::kFrozenDtype, r)) {
        out.push_back(
            "Frozen parameters keep " + model::GiBText(Bytes::Of(static_cast<int64_t>(frozen))) +
            " of fp32 shards per rank that no optimizer updates: loading the frozen weights in "
            "bf16 (--frozen-dtype bf16, from_pretrained(torch_dtype=torch.bfloat16)) halves "
            "that." + *checked);
      }
    }
  }
  if (plan.no_sync && r.shard_group > 1) {
    out.push_back("--no-sync keeps fp32 unsharded gradients of the whole model between micro-batches; "
                  "with sharding that costs 4 bytes per parameter on every rank.");
  }
  if (!r.host.fits && r.host.peak_at_model_load) {
    out.push_back("Host RAM runs out while loading: every rank holds a full copy of the weights. " +
                  (checked_load.empty()
                       ? std::string("--model-load rank0 (cpu_ram_efficient_loading) or meta "
                                     "(meta-device init and a sharded checkpoint) avoids it.")
                       : checked_load + "."));
  }
  return out;
}

}  // namespace shardtune::planner
