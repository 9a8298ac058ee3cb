// Internal to model/activations*.cc: the context op recipes share, and the recipes of the block's
// projections, norms and attention sublayer (activation_recipes.cc), which activations.cc's block
// and head assembly call. Not a public API.
#pragma once

#include <set>
#include <string>

#include "model/activations.h"
#include "model/autograd_ledger.h"

namespace shardtune::model::recipes {

constexpr double kFp32 = 4;

// One sub-graph being recorded: its ledger, the compute dtype's bytes (e), the model, the
// options and which parameters train.
struct Ctx {
  AutogradLedger g;
  double e;  // bytes per element of the compute dtype
  const ModelSpec& spec;
  const ActivationOptions& opt;
  const Trainability& t;
  std::set<std::string> lora_done;  // projections whose adapters are recorded
};

// HF module names (model/module_tree.cc Block): GPT-2 fuses q, k, v in attn.c_attn.
bool Gpt2(const Ctx& c);
// nn.Linear / Conv1D of module `module` (HF name, relative to the block, or the head's full name)
// on `x`, with its LoRA adapter when the trainability gives it one; returns the output tensor.
// `copies`: routed copies per token (MoE experts: top_k).
int Linear(Ctx& c, int x, double out_features, const std::string& name, const std::string& module,
           double copies = 1);
// A cast between fp32 and the compute dtype (x.float(), x.to(dtype)): a new tensor `tensor` of
// `bytes` per token made by op `op`, or `x` itself when the compute dtype is fp32 (Tensor.to
// returns self when the dtype already matches). Saves nothing.
int CastUnlessFp32(Ctx& c, int x, double bytes, const std::string& tensor, const std::string& op);
// Module `m`'s weight requires grad.
bool WeightTrains(const Ctx& c, const std::string& m);
// Some parameter of module `m` (weight or bias; any name under "m.") requires grad.
bool AnyTrains(const Ctx& c, const std::string& m);
// RMSNorm or LayerNorm as the spec says.
int Norm(Ctx& c, int x, double dim, const std::string& name, const std::string& module);
// q, k, v projections, (qk norm,) rope, attention (Ulysses all-to-alls when cp > 1), o_proj.
int AttentionSublayer(Ctx& c, int x);

}  // namespace shardtune::model::recipes
