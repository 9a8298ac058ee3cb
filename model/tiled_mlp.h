// Tiled MLP (ROLL apply_tiled_mlp / tiled_num_shards, roll/third_party/fsdp2/tiled_mlp.py; the
// same TiledMLP as verl/models/transformers/tiled_mlp.py and Bekman et al. 2025, "Arctic Long
// Sequence Training", TiledMLP): the MLP runs over the sequence in `shards` tiles of S / shards
// tokens inside an autograd Function whose forward runs under no_grad and saves only the MLP input;
// backward recomputes each tile's forward with grad enabled and backpropagates it.
#pragma once

#include "model/activations.h"
#include "model/model_spec.h"
#include "model/units.h"

namespace shardtune::model {

// A block's activations with a tiled MLP. Derived by running the same autograd ledger on the
// spec with the MLP's inner sizes divided by `shards` (one tile's [B, S/n, F] intermediates hold
// the bytes of [B, S, F/n]), keeping the full ledger's parameter-gradient fractions (the weights
// are whole), and dropping the MLP's intermediates from what is saved for backward (TiledMLP saves
// x, which the post-attention norm's output already is). REQUIRES: shards >= 1.
//
// `moe_capacity_factor` C (MoE only; 1.0: the balanced load HF's dropless routers aim for, each
// expert top_k x T / E of the T tokens) sizes each routed expert's tokens at C x top_k x T / E, as
// an expert buffer of capacity C does (Fedus et al. 2022, "Switch Transformers", section 2.1:
// expert capacity = tokens per batch / experts x capacity factor; Lepikhin et al. 2021, GShard).
// It scales the routed experts' [tokens, F_e] intermediates, modelled as F_e x C wide; the
// [tokens, H] gathered copies are not scaled. With shards 1 and C 1 this is
// ComputeBlockActivations. `t`: the block's trainability (ComputeBlockActivations).
// REQUIRES: shards >= 1, moe_capacity_factor > 0.
BlockActivations TiledMlpBlockActivations(const ModelSpec& spec, const ActivationOptions& opt,
                                          int shards, double moe_capacity_factor = 1.0,
                                          const Trainability& t = {});

// Forward matmul FLOPs per token of one block's MLP (routed top_k + shared experts for MoE):
// 2 x matmul weights (Narayanan et al. 2021, eq. 3). TiledMLP's backward re-runs this forward.
// `layer`: which block (a dense prefix's MLP differs from the MoE blocks').
Flops MlpForwardFlopsPerToken(const ModelSpec& spec, int layer);

}  // namespace shardtune::model
