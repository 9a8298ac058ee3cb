// The transformer's head and loss (transformer.h): the LM head with HF's fp32 cross-entropy,
// the fused linear cross-entropy (--loss-kernel fused_linear), and the MoE auxiliary loss.
#include "executor/nn/transformer.h"

#include <ATen/ATen.h>

#include "executor/comm/communicator.h"
#include "executor/nn/fused_loss.h"
#include "executor/nn/transformer_pieces.h"

namespace shardtune::exec {

using internal::Get;

at::Tensor Transformer::HeadLoss(const ParamTable& p, const at::Tensor& x,
                                 const at::Tensor& labels) const {
  at::Tensor loss = options_.fused_loss ? FusedCrossEntropy(p, x, labels) : CrossEntropy(p, x, labels);
  if (cp_ == nullptr && !router_logits_.empty()) {
    // MixtralForCausalLM.forward: loss += router_aux_loss_coef * aux_loss.to(loss.device).
    at::Tensor aux = LoadBalancingLoss(router_logits_, spec_.moe.num_experts, spec_.moe.top_k);
    router_logits_.clear();
    loss = loss + spec_.moe.router_aux_loss_coef * aux.to(loss.scalar_type());
  }
  return loss;
}

// Materialised logits, upcast to fp32, F.cross_entropy: the micro-batch's mean without cp.
at::Tensor Transformer::CrossEntropy(const ParamTable& p, const at::Tensor& x,
                                     const at::Tensor& labels) const {
  at::Tensor logits = spec_.tied_embeddings  // [B, S, V]; LoRA may target lm_head
                          ? at::linear(x, Get(p, "model.embed_tokens.weight"))
                          : Proj(p, "lm_head", x, /*bias=*/false, /*conv1d=*/false);
  if (spec_.final_logit_softcap > 0) {  // Gemma 2: tanh(logits / cap) * cap, before the upcast
    logits = at::tanh(logits / spec_.final_logit_softcap) * spec_.final_logit_softcap;
  }
  if (logits.scalar_type() != at::kFloat) logits = logits.to(at::kFloat);  // [B, S, V] fp32
  if (cp_ == nullptr) {
    return at::cross_entropy_loss(logits.view({-1, spec_.vocab_size}), labels.reshape({-1}));
  }
  // This rank's share of the micro-batch's mean: every token of the cp group counts once, and
  // every cp rank holds S / cp of them (no ignored labels: the count is B x S_local x cp).
  at::Tensor sum = at::cross_entropy_loss(logits.view({-1, spec_.vocab_size}), labels.reshape({-1}),
                                          {}, at::Reduction::Sum);
  return sum / static_cast<double>(labels.numel() * cp_->size());
}

// The same loss through fused_loss.h: the mean over counted labels without cp (F.cross_entropy's
// mean), this rank's share with cp (as above). Plan::Problems refuses an adapter on lm_head with
// the fused loss (it multiplies by the base weight only).
at::Tensor Transformer::FusedCrossEntropy(const ParamTable& p, const at::Tensor& x,
                                          const at::Tensor& labels) const {
  const at::Tensor& w = Get(p, spec_.tied_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  at::Tensor flat = x.reshape({-1, spec_.hidden});
  at::Tensor lab = labels.reshape({-1});
  at::Tensor scale =
      cp_ == nullptr
          ? at::reciprocal(lab.ne(-100).sum().to(at::kFloat))
          : at::full({}, 1.0 / static_cast<double>(labels.numel() * cp_->size()),
                     x.options().dtype(at::kFloat));
  return FusedLinearCrossEntropy(flat, w, lab, scale, spec_.final_logit_softcap);
}

}  // namespace shardtune::exec
