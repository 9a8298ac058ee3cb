// Ulysses context parallelism's two all-to-alls (Jacobs et al. 2023, "DeepSpeed Ulysses",
// arXiv:2309.14509, Fig. 2; verl/utils/ulysses.py gather_seq_scatter_heads and
// gather_heads_scatter_seq, its SeqAllToAll autograd Function): before attention each rank of
// the cp group trades its sequence slice of every head for the full sequence of heads / cp
// heads; after attention the inverse. Each is an autograd node whose backward is the other.
#pragma once

#include <ATen/core/Tensor.h>

namespace shardtune::exec {

class Communicator;

// [B, S / cp, h, D] (this rank's tokens, every head) -> [B, S, h / cp, D] (every token, heads
// [cp_rank x h / cp, (cp_rank + 1) x h / cp)). REQUIRES: h % cp == 0.
at::Tensor GatherSeqScatterHeads(const at::Tensor& x, Communicator& cp);
// The inverse: [B, S, h / cp, D] -> [B, S / cp, h, D].
at::Tensor GatherHeadsScatterSeq(const at::Tensor& x, Communicator& cp);

}  // namespace shardtune::exec
