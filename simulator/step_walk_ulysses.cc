// Walker: a block's compute split around its Ulysses all-to-alls (plan.cp > 1). verl's
// _ulysses_flash_attention_forward (verl/models/transformers/monkey_patch.py) calls
// gather_seq_scatter_heads on q, k, v, runs flash attention, then gather_heads_scatter_seq on the
// output, each a blocking dist.all_to_all (verl/utils/ulysses.py all_to_all_tensor, async_op
// False): attention cannot start before its inputs arrive and o_proj cannot start before the
// output is back, so the all-to-alls sit on the critical path with no overlap inside the layer
// (DeepSpeed-Ulysses, Jacobs et al. 2023, section 3.1, likewise). They run on their own stream
// so traces show them apart; FSDP's all-gathers and reduce-scatters still overlap them.
#include <algorithm>

#include "model/errors.h"
#include "model/expert_parallel.h"
#include "model/module_tree.h"
#include "simulator/step_walk_rules.h"

namespace shardtune::sim::internal {
namespace {

struct BlockFlops {
  double pre = 0;   // q, k, v projections: 2·H·(q_dim + 2·kv_dim) per token
  double post = 0;  // o_proj and the MLP: the rest of the block's matmuls
  double attn = 0;  // 4·S·q_dim per token (scores and values, full S: each rank has heads / cp)
};

BlockFlops Split(const model::ModelSpec& spec, int64_t seq_len, int block) {
  BlockFlops f;
  double h = static_cast<double>(spec.hidden);
  f.attn = model::AttentionForwardFlopsPerToken(spec, seq_len).count();
  double mm = model::BlockForwardFlopsPerToken(spec, seq_len, block).count() - f.attn;
  f.pre = std::min(mm, 2.0 * h * static_cast<double>(spec.q_dim() + 2 * spec.kv_dim()));
  f.post = mm - f.pre;
  return f;
}

// The routed experts' forward FLOPs per token of an MoE block: 2 x top_k x the expert's
// matrices (gate, up, down: 3 H x F; GPT-OSS's gate_up 2F and down F likewise; 2 without a gate).
double RoutedExpertFlopsPerToken(const model::ModelSpec& spec) {
  const auto& m = spec.moe;
  double fe = static_cast<double>(m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : spec.ffn_hidden);
  double mats = m.gpt_oss_experts || spec.mlp == model::MlpKind::kSwiGlu ? 3.0 : 2.0;
  return 2.0 * m.top_k * mats * static_cast<double>(spec.hidden) * fe;
}

}  // namespace

bool Walker::SplitBlock(int block) const {
  if (block < nv_) return false;  // the vision tower runs whole on every rank of a cp group
  return p_.cp > 1 || (p_.ep > 1 && s_.spec->MoeLayer(block - nv_));
}

// torchtitan's MoE under expert parallelism (models/common/token_dispatcher.py
// AllToAllTokenDispatcher): everything before the routed experts (attention, o_proj, router,
// the local reorder; the shared experts are counted here too), then dispatch: the token counts'
// all_to_all_single, read on the host with .tolist() (the host waits for the GPU), and the
// tokens' all_to_all_single; the local experts; combine: the all-to-all back; then the score
// product and scatter_add (their memory traffic is booked with the first piece). Backward runs
// the inverse all-to-alls in reverse order (all_to_all_single_autograd), no host sync.
namespace {
void AppendExpertForward(const model::ExpertAllToAll& ea, double rest_flops, double expert_flops,
                         UlyssesPieces* v) {
  // rest_flops joins the last piece so far, which has no all-to-all after it yet.
  if (v->empty()) v->push_back({});
  UlyssesPiece& last = v->v[v->n - 1];
  SHARDTUNE_CHECK(last.all_to_all_bytes == 0) << "the dispatch follows a piece without an all-to-all";
  last.matmul_flops += rest_flops;
  last.all_to_all_bytes = ea.dispatch_bytes + ea.count_bytes;
  last.all_to_all_calls = 2;
  last.group = kExpertParallelGroup;
  last.host_sync = true;
  UlyssesPiece experts;
  experts.matmul_flops = expert_flops;
  experts.all_to_all_bytes = ea.combine_bytes;
  experts.all_to_all_calls = 1;
  experts.group = kExpertParallelGroup;
  v->push_back(experts);
  v->push_back({});  // score product and scatter_add wait for the combine
}
}  // namespace

UlyssesPieces Walker::UlyssesForwardPieces(int block, double elem_bytes,
                                           int16_t host_kernels) const {
  const int layer = block - nv_;  // a text layer (SplitBlock)
  BlockFlops f = Split(*s_.spec, s_.plan->AttentionSeqLen(s_.seq_len), layer);
  const bool ep = p_.ep > 1 && s_.spec->MoeLayer(layer);
  const double expert = ep ? std::min(f.post, RoutedExpertFlopsPerToken(*s_.spec)) : 0.0;
  UlyssesPieces v;
  if (p_.cp > 1) {
    // Norm, projections and rope, then q, k, v out (3 calls); the memory-bound traffic is kept
    // with the first piece (an approximation: it only moves time between pieces of one chain).
    v.push_back({f.pre * tokens_, 0, elem_bytes, host_kernels,
                 a2a_.q_bytes + a2a_.k_bytes + a2a_.v_bytes, 3});
    v.push_back({0, f.attn * tokens_, 0, 0, a2a_.out_bytes, 1});  // flash attention, output back
    v.push_back({(f.post - expert) * tokens_, 0, 0, 0, 0, 0});    // o_proj and the MLP
  } else {
    v.push_back({(f.pre + f.post - expert) * tokens_, f.attn * tokens_, elem_bytes, host_kernels, 0, 0});
  }
  if (ep) AppendExpertForward(ExpertA2a(), 0.0, expert * tokens_, &v);
  return v;
}

UlyssesPieces Walker::UlyssesBackwardPieces(int block, bool recompute, double elem_bytes,
                                            int16_t host_kernels) const {
  const int layer = block - nv_;  // a text layer (SplitBlock)
  BlockFlops f = Split(*s_.spec, s_.plan->AttentionSeqLen(s_.seq_len), layer);
  int64_t qkv = a2a_.q_bytes + a2a_.k_bytes + a2a_.v_bytes;
  const bool ep = p_.ep > 1 && s_.spec->MoeLayer(layer);
  const double expert = ep ? std::min(f.post, RoutedExpertFlopsPerToken(*s_.spec)) : 0.0;
  UlyssesPieces v;
  if (recompute) {
    // Full checkpointing reruns the block's forward first, its all-to-alls included.
    if (p_.cp > 1) {
      v.push_back({f.pre * tokens_, 0, elem_bytes, host_kernels, qkv, 3});
      v.push_back({0, f.attn * tokens_, 0, 0, a2a_.out_bytes, 1});
      // Under expert parallelism the rest of the forward precedes the dispatch; otherwise its
      // recomputation is booked with o_proj and the MLP's backward below.
      if (ep) v.push_back({(f.post - expert) * tokens_, 0, 0, 0, 0, 0});
    } else {
      v.push_back({(f.pre + f.post - expert) * tokens_, f.attn * tokens_, elem_bytes, host_kernels, 0, 0});
    }
    if (ep) AppendExpertForward(ExpertA2a(), 0.0, expert * tokens_, &v);
    elem_bytes = 0;
    host_kernels = 0;
  }
  if (ep) {
    // The combine's gradient goes back to the experts' ranks, the experts' backward, then the
    // dispatch's gradient comes home.
    const model::ExpertAllToAll ea = ExpertA2a();
    v.push_back({0, 0, elem_bytes, host_kernels, ea.combine_bytes, 1, kExpertParallelGroup, false});
    v.push_back({kMatmulBackwardRatio * expert * tokens_, 0, 0, 0, ea.dispatch_bytes, 1,
                 kExpertParallelGroup, false});
    elem_bytes = 0;
    host_kernels = 0;
  }
  double post = (kMatmulBackwardRatio + (recompute && p_.cp > 1 && !ep ? 1.0 : 0.0)) *
                (f.post - expert) * tokens_;
  double attn_bwd = kAttentionBackwardRatio * f.attn * tokens_;
  double pre = kMatmulBackwardRatio * f.pre * tokens_;
  if (p_.cp > 1) {
    // o_proj and MLP backward, then the output's gradient goes to the head split (1 call);
    // flash attention backward, then dq, dk, dv go back to the sequence split (3 calls).
    v.push_back({post, 0, elem_bytes, host_kernels, a2a_.out_bytes, 1});
    v.push_back({0, attn_bwd, 0, 0, qkv, 3});
    v.push_back({pre, 0, 0, 0, 0, 0});
  } else {
    v.push_back({post + pre, attn_bwd, elem_bytes, host_kernels, 0, 0});
  }
  return v;
}

int32_t Walker::UlyssesChain(const UlyssesPieces& pieces) {
  SHARDTUNE_CHECK(!pieces.empty()) << "empty Ulysses chain";
  const OpKind kind = Cur().kind;
  const int32_t seg = Cur().segment;
  int32_t compute = static_cast<int32_t>(prog_->ops.size()) - 1;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const UlyssesPiece& pc = pieces[i];
    if (i > 0) {
      int32_t wait = static_cast<int32_t>(prog_->ops.size()) - 1;  // the all-to-all before it
      compute = Begin(kind, Stream::kDefault, -1, seg);
      Dep(wait);
    }
    ProgramOp& op = prog_->ops[static_cast<size_t>(compute)];
    op.matmul_flops = pc.matmul_flops;
    op.attention_flops = pc.attention_flops;
    op.memory_bytes = pc.memory_bytes;
    op.host_kernels = pc.host_kernels;
    if (pc.all_to_all_bytes <= 0) continue;
    Begin(OpKind::kAllToAll, Stream::kAllToAll, -1, seg);
    Dep(compute);
    Cur().collective = profiles::Collective::kAllToAll;
    Cur().comm_bytes = pc.all_to_all_bytes;
    Cur().group = pc.group;
    Cur().host_sync = pc.host_sync;
    Cur().calls = pc.all_to_all_calls;
    Cur().host_kernels = pc.all_to_all_calls;  // one NCCL launch per dist.all_to_all
  }
  return compute;
}

}  // namespace shardtune::sim::internal
