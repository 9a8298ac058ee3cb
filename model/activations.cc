// Op-by-op recipes of what autograd saves in one block and in the loss path, for HF transformers
// (modeling_llama.py, modeling_gpt2.py, modeling_mixtral.py, loss/loss_utils.py) and torchtitan
// (models/llama3/model/model.py): the MLP, MoE, residual stream and loss here, the projections,
// norms and attention in activation_recipes.cc. Byte sizes are per token, e = bytes of the compute
// dtype.
#include "model/activations.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "model/activation_recipes.h"
#include "model/autograd_ledger.h"
#include "model/errors.h"
#include "model/text.h"

namespace shardtune::model {
namespace {

using recipes::Ctx;
using recipes::AttentionSublayer;
using recipes::Gpt2;
using recipes::kFp32;
using recipes::Linear;
using recipes::Norm;

// An int64 index of k entries per token (routed rows: topk's indices, an argsort, a gather of
// expert ids), made by an op that saves nothing: no gradient flows through integers.
int Int64Index(Ctx& c, double k, const std::string& tensor, const std::string& op,
               const std::vector<int>& inputs = {}) {
  int idx = c.g.Tensor(tensor, 8 * k);
  c.g.Op(op, inputs, idx, {});
  return idx;
}

// `module`: the HF module path ("mlp", "block_sparse_moe.experts.*"); `mult`: routed copies.
int DenseMlp(Ctx& c, int x, double ffn, double mult, const std::string& name,
             const std::string& module) {
  double h = static_cast<double>(c.spec.hidden);
  if (c.spec.mlp == MlpKind::kGelu) {
    // F.gelu saves its input. (HF GPT-2's python gelu_new saves more; not modelled.)
    bool gpt2 = Gpt2(c);
    int up = Linear(c, x, ffn * mult, name + ".up", module + (gpt2 ? ".c_fc" : ".up_proj"), mult);
    int act = c.g.Tensor(name + ".gelu output", c.e * ffn * mult);
    c.g.Op(name + ".gelu", {up}, act, {up});
    return Linear(c, act, h * mult, name + ".down", module + (gpt2 ? ".c_proj" : ".down_proj"),
                  mult);
  }
  // HF LlamaMLP / torchtitan FeedForward: down(silu(gate(x)) * up(x)). The product saves each
  // factor for the other's gradient. Phi3MLP: gate, up = gate_up_proj(x).chunk(2, dim=-1), two
  // views of one [2F] output (one SplitBackward0), so SiLU saving gate and the product saving up
  // keep the whole of it: the same bytes as Llama's two outputs.
  int gate, up;
  if (c.spec.fused_gate_up) {
    int gate_up = Linear(c, x, 2 * ffn * mult, name + ".gate_up_proj", module + ".gate_up_proj",
                         mult);
    std::vector<int> halves = c.g.Views(gate_up, {name + ".gate (chunk)", name + ".up (chunk)"},
                                        {c.e * ffn * mult, c.e * ffn * mult});
    gate = halves[0];
    up = halves[1];
  } else {
    gate = Linear(c, x, ffn * mult, name + ".gate_proj", module + ".gate_proj", mult);
    up = Linear(c, x, ffn * mult, name + ".up_proj", module + ".up_proj", mult);
  }
  if (c.opt.liger.swiglu && c.opt.modeling == Modeling::kHf && !c.spec.fused_gate_up && name == "mlp") {
    // LigerSwiGLUMLP: LigerSiLUMulFunction (Liger-Kernel ops/swiglu.py) saves gate and up, makes
    // silu(gate) * up in one kernel, and its backward recomputes silu and writes d gate and d up
    // into the saved tensors' own storage.
    int prod = c.g.Tensor(name + ".silu*up (Liger)", c.e * ffn * mult);
    c.g.Op(name + ".LigerSiLUMulFunction", {gate, up}, prod, {gate, up});
    c.g.MarkInPlaceBackward();
    return Linear(c, prod, h * mult, name + ".down_proj", module + ".down_proj", mult);
  }
  int act = c.g.Tensor(name + ".silu output", c.e * ffn * mult);
  c.g.Op(name + ".silu", {gate}, act, {gate});
  int prod = c.g.Tensor(name + ".silu*up", c.e * ffn * mult);
  c.g.Op(name + ".mul", {act, up}, prod, {{act, 1}, {up, 0}});
  return Linear(c, prod, h * mult, name + ".down_proj", module + ".down_proj", mult);
}

// A biased grouped GEMM of GPT-OSS's experts, per routed row: _grouped_mm(x, W) [out] saves x
// for W's gradient (`weight` elements); the bias [out] is materialised per row (gathered by
// expert id in transformers, repeat_interleave-d in torchtitan: an index_select either way,
// whose int64 row index `index` is saved for the bias's gradient, `bias` elements; the add,
// which holds the bias here, is charged with that save); the add saves nothing else.
int GroupedMmPlusBias(Ctx& c, int x, int index, double out, double weight, double bias, bool train,
                      const std::string& mm_name, const std::string& bias_name) {
  const double k = c.spec.moe.top_k;
  const std::string p = "moe.experts ";
  int mm = c.g.Tensor(p + mm_name, c.e * out * k);
  c.g.Op(p + mm_name, {x}, mm, {{x, SavedFor::kParamGrad}});
  c.g.MarkComputeBound();
  c.g.SetParam(weight, train, train);
  int b = c.g.Tensor(p + bias_name + " (rows)", c.e * out * k);
  c.g.Op(p + bias_name, {index}, b, {});
  int sum = c.g.Tensor(p + mm_name + " + bias", c.e * out * k);
  c.g.Op(p + "bias add", {mm, b, index}, sum, {{index, SavedFor::kParamGrad}});
  c.g.SetParam(bias, train, train);
  return sum;
}

// GPT-OSS's clamped gate, the same ops in both codes on gate_up ([2F] per routed row): the
// interleaved views ([..., ::2] and [..., 1::2]), the gate clamped above and the up both ways
// (clamp saves its input: the views keep gate_up whole), alpha x gate, its sigmoid (saves its
// output) and gate x sigmoid (saves both). `gate` and `up` name the halves as each code does
// (transformers: gate, up; torchtitan: x_glu, x_linear). Returns {the product, the clamped up}.
std::pair<int, int> GptOssClampedGlu(Ctx& c, int gate_up, double fe, double k, const std::string& gate,
                                     const std::string& up) {
  const std::string p = "moe.experts ";
  std::vector<int> halves = c.g.Views(gate_up, {p + gate + " ([..., ::2])", p + up + " ([..., 1::2])"},
                                      {c.e * fe * k, c.e * fe * k});
  int g = c.g.Tensor(p + gate + ".clamp(max=limit)", c.e * fe * k);
  c.g.Op(p + "clamp " + gate, {halves[0]}, g, {halves[0]});
  int u = c.g.Tensor(p + up + ".clamp(-limit, limit)", c.e * fe * k);
  c.g.Op(p + "clamp " + up, {halves[1]}, u, {halves[1]});
  int ga = c.g.Tensor(p + "alpha * " + gate, c.e * fe * k);
  c.g.Op(p + "alpha * " + gate, {g}, ga, {});
  int sig = c.g.Tensor(p + "sigmoid(alpha * " + gate + ")", c.e * fe * k);
  c.g.Op(p + "sigmoid", {ga}, sig, {sig});
  int glu = c.g.Tensor(p + gate + " * sigmoid", c.e * fe * k);
  c.g.Op(p + "glu", {g, sig}, glu, {{g, 1}, {sig, 0}});
  return {glu, u};
}

// transformers 5's default experts path: integrations/moe.py grouped_mm_experts_forward, which
// PreTrainedModel.get_correct_experts_implementation picks ("grouped_mm") whenever torch has
// _grouped_mm (2.9+); 4.x's one-hot loop with index_add_ (whose saved source would add
// [top_k x H] per token) is the "eager" fallback. On tokens x [H] and their top-k routing
// weights `w` ([k], `w_bytes` each), S = T x k rows:
//   token_idx = arange(T)[:, None].expand(-1, k).reshape(-1): int64 [k], saved by x[token_idx]
//   selected_hidden_states = x[token_idx] [k H]: a local until the function returns
//   perm = argsort(expert_ids), inv_perm = argsort(perm): int64 [k] each, saved by the gathers
//   sample_weights_g = w[perm]; selected_hidden_states_g = selected[perm], which the first
//   torch._grouped_mm saves for the weight's gradient (its derivative saves both operands)
//   `body` on the sorted rows -> out_g [k H]
//   out_g * sample_weights_g[:, None]: the promoted dtype (fp32 weights: fp32), saves both
//   [inv_perm] -> [k H], .view(T, k, H).sum(dim=1) -> [H], .to(hidden_states.dtype).
// The weighted product and its unsorted copy are locals to the return too.
int HfGroupedExperts(Ctx& c, int x, int w, double w_bytes, const std::function<int(int)>& body) {
  double h = static_cast<double>(c.spec.hidden), k = c.spec.moe.top_k;
  int token_idx = Int64Index(c, k, "moe.experts token_idx (int64)",
                             "moe.experts token_idx arange.expand.reshape");
  int selected = c.g.Tensor("moe.experts selected_hidden_states = x[token_idx]", c.e * h * k);
  c.g.Op("moe.experts gather tokens", {x, token_idx}, selected, {token_idx});
  int perm = Int64Index(c, k, "moe.experts perm = argsort(expert_ids) (int64)",
                        "moe.experts argsort");
  int inv_perm = Int64Index(c, k, "moe.experts inv_perm = argsort(perm) (int64)",
                            "moe.experts argsort(perm)", {perm});
  int w_g = c.g.Tensor("moe.experts sample_weights[perm]", w_bytes * k);
  c.g.Op("moe.experts sort weights", {w, perm}, w_g, {perm});
  int rows = c.g.Tensor("moe.experts selected_hidden_states[perm]", c.e * h * k);
  c.g.Op("moe.experts sort rows", {selected, perm}, rows, {perm});
  int out_g = body(rows);
  double promoted = std::max(w_bytes, c.e);
  int weighted = c.g.Tensor("moe.experts out_g * sample_weights_g", promoted * h * k);
  c.g.Op("moe.scale by routing weight", {out_g, w_g}, weighted, {{out_g, 1}, {w_g, 0}});
  int unsorted = c.g.Tensor("moe.experts out[inv_perm]", promoted * h * k);
  c.g.Op("moe.experts unsort", {weighted, inv_perm}, unsorted, {inv_perm});
  int summed = c.g.Tensor("moe.experts view(T, k, H).sum(1)", promoted * h);
  c.g.Op("moe.experts sum over top-k", {unsorted}, summed, {});
  if (promoted != c.e) {
    int cast = c.g.Tensor("moe.experts output to(dtype)", c.e * h);
    c.g.Op("moe.experts to(dtype)", {summed}, cast, {});
    summed = cast;
  }
  for (int local : {selected, weighted, unsorted}) c.g.KeepAliveThroughLastOp(local);
  return summed;
}

// GPT-OSS (transformers 5 modeling_gpt_oss.py). GptOssTopKRouter: logits = F.linear(x, W, b);
// topk over the logits (saves its int64 indices); softmax over the k values in the logits' dtype
// (saves its output), which are the routing weights (no scatter into [T, E] in 5.x).
// GptOssExperts (use_experts_implementation(is_transposed=True, has_bias=True)) through
// HfGroupedExperts: per sorted row gate_up = _grouped_mm(x, W) [2F] plus
// gate_up_proj_bias[expert_ids_g] (a gathered [2F] temporary; the gather saves expert_ids_g for
// the bias's gradient), then _apply_gate: gate and up strided views of gate_up,
// gate.clamp(max) and up.clamp(+-l) (clamp saves its input: the views keep gate_up),
// sigmoid(gate * alpha) saves its output, glu = gate * sigmoid saves both, (up + 1) * glu saves
// both; _grouped_mm with down_proj saves gated_output, plus down_proj_bias[expert_ids_g].
int GptOssMoe(Ctx& c, int x) {
  const MoeSpec& m = c.spec.moe;
  double h = static_cast<double>(c.spec.hidden), k = m.top_k, E = m.num_experts;
  double fe = static_cast<double>(m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : c.spec.ffn_hidden);
  bool train = AnyTrains(c, "block_sparse_moe.experts");
  int logits = Linear(c, x, E, "moe.router", "block_sparse_moe.gate");
  int idx = Int64Index(c, k, "moe.router topk indices (int64)", "moe.router topk indices");
  int top = c.g.Tensor("moe.router top-k values", c.e * k);
  c.g.Op("moe.router topk", {logits, idx}, top, {idx});
  int probs = c.g.Tensor("moe.router softmax over top-k", c.e * k);
  c.g.Op("moe.router softmax", {top}, probs, {probs});
  return HfGroupedExperts(c, x, probs, c.e, [&](int rows) {
    int ids_g = Int64Index(c, k, "moe.experts expert_ids_g (int64)",
                           "moe.experts expert_ids[perm]");
    int gate_up = GroupedMmPlusBias(c, rows, ids_g, 2 * fe, E * h * 2 * fe, E * 2 * fe, train,
                                    "_grouped_mm(x, gate_up_proj)", "gate_up_proj_bias[expert_ids_g]");
    auto [glu, up] = GptOssClampedGlu(c, gate_up, fe, k, "gate", "up");
    int up1 = c.g.Tensor("moe.experts up + 1", c.e * fe * k);
    c.g.Op("moe.experts up + 1", {up}, up1, {});
    int gated = c.g.Tensor("moe.experts (up + 1) * glu", c.e * fe * k);
    c.g.Op("moe.experts gated_output", {up1, glu}, gated, {{up1, 1}, {glu, 0}});
    int out = GroupedMmPlusBias(c, gated, ids_g, h, E * fe * h, E * h, train,
                                "_grouped_mm(gated_output, down_proj)", "down_proj_bias[expert_ids_g]");
    return out;
  });
}

// DeepseekV3TopkRouter.forward and DeepseekV3MoE.route_tokens_to_experts (transformers 5.x;
// 4.x's get_topk_indices is the same; V2: DeepSeek's MoEGate): router_logits =
// F.linear(x.type(float32), weight.type(float32)): an fp32 copy of x [H] the matmul saves for the
// weight's gradient, fp32 logits [E]; scores = sigmoid (V3) or softmax (V2), each saving its
// fp32 output [E]; the (group-limited) top-k runs under
// no_grad on [E]-wide temporaries and returns int64 indices [k]; scores.gather(1, idx) saves the
// indices; the renormalisation and * routed_scaling_factor give the fp32 weights [k]. Not per
// token, so not in the ledger: the fp32 copy of the router weight [E, H] that the matmul saves for
// its input's gradient (7.3 MB per MoE layer in V3).
int DeepseekRouter(Ctx& c, int x) {
  const MoeSpec& m = c.spec.moe;
  double h = static_cast<double>(c.spec.hidden), E = m.num_experts, k = m.top_k;
  bool train = AnyTrains(c, "block_sparse_moe.gate");
  int x32 =
      CastUnlessFp32(c, x, kFp32 * h, "moe.router input.float()", "moe.router input to(float32)");
  int logits = c.g.Tensor("moe.router logits (fp32)", kFp32 * E);
  c.g.Op("moe.router", {x32}, logits, {{x32, SavedFor::kParamGrad}});
  c.g.MarkComputeBound();
  c.g.SetParam(E * h, train, train);
  int scores = c.g.Tensor("moe.router scores (fp32)", kFp32 * E);
  c.g.Op("moe.router sigmoid / softmax", {logits}, scores, {scores});
  int idx = Int64Index(c, k, "moe.router group-limited topk indices (int64)",
                       "moe.router topk (no_grad)", {scores});
  int gathered = c.g.Tensor("moe.router scores.gather(topk)", kFp32 * k);
  c.g.Op("moe.router gather", {scores, idx}, gathered, {idx});
  int weights = c.g.Tensor("moe.router topk weights (normalised, scaled)", kFp32 * k);
  c.g.Op("moe.router normalise and scale", {gathered}, weights, {});
  return weights;
}

// torchtitan's GptOssGroupedExperts.forward (models/gpt_oss/moe.py) on the sorted rows (k per
// token): h = _grouped_mm(x, mlp1^T) [2F] saves x for the weight's gradient; b1.repeat_interleave
// (counts) materialises the bias per row [2F] (a forward temporary: its gradient is the add's
// incoming gradient itself, AddBackward0 with alpha 1 copies nothing; the index_select it is
// saves its int64 row index); h + b1 saves nothing.
// swiglu: x_glu = h[..., ::2] and x_linear = h[..., 1::2] are views; each clamp saves its input
// (the views keep h + b1 whole); alpha * x_glu saves nothing; sigmoid saves its output;
// x_glu * sigmoid saves both; torch.addcmul(out_glu, out_glu, x_linear) saves out_glu (for
// x_linear's gradient) and x_linear (for out_glu's); _grouped_mm with mlp2 saves that output
// [F]; the second bias's rows and add as the first's (ScaleBiasForward with tp 1 is .to(dtype)).
// Per routed row: H + 2F + 5F elements saved (transformers' loop saves 2H + 7F: its `+ 1` and
// the routing-weight product are separate ops).
int GptOssGroupedExperts(Ctx& c, int x, double fe, double k) {
  const MoeSpec& m = c.spec.moe;
  double h = static_cast<double>(c.spec.hidden), E = m.num_experts;
  bool train = AnyTrains(c, "block_sparse_moe.experts");
  // repeat_interleave with tensor repeats is index_select(bias, 0, repeat_interleave(repeats)):
  // each bias's own int64 row index [k].
  int i1 = Int64Index(c, k, "moe.experts mlp1_bias repeat_interleave index (int64)",
                      "moe.experts mlp1 bias repeat_interleave index");
  int gate_up = GroupedMmPlusBias(c, x, i1, 2 * fe, E * h * 2 * fe, E * 2 * fe, train,
                                  "_grouped_mm(x, mlp1)", "mlp1_bias.repeat_interleave");
  auto [out_glu, lin] = GptOssClampedGlu(c, gate_up, fe, k, "x_glu", "x_linear");
  int act = c.g.Tensor("moe.experts addcmul(out_glu, out_glu, x_linear)", c.e * fe * k);
  c.g.Op("moe.experts addcmul", {out_glu, lin}, act, {{out_glu, 1}, {lin, 0}});
  int i2 = Int64Index(c, k, "moe.experts mlp2_bias repeat_interleave index (int64)",
                      "moe.experts mlp2 bias repeat_interleave index");
  int out = GroupedMmPlusBias(c, act, i2, h, E * fe * h, E * h, train, "_grouped_mm(h, mlp2)",
                              "mlp2_bias.repeat_interleave");
  return out;
}

// `routed` [H] plus the shared expert(s) on x when the model has them (dense MLPs of the summed
// width; Qwen2-MoE's sigmoid gate is a [1]-wide product, not counted).
int SharedExpertsAdded(Ctx& c, int x, int routed, double fe) {
  const MoeSpec& m = c.spec.moe;
  if (m.num_shared_experts <= 0) return routed;
  double fs = m.shared_expert_ffn_hidden > 0 ? static_cast<double>(m.shared_expert_ffn_hidden) : fe;
  int shared = DenseMlp(c, x, fs * m.num_shared_experts, 1.0, "moe.shared_expert",
                        "block_sparse_moe.shared_expert");
  int sum = c.g.Tensor("moe.output", c.e * static_cast<double>(c.spec.hidden));
  c.g.Op("moe.add shared", {routed, shared}, sum, {});
  return sum;
}

// A dropless MoE block: the router (HF's, DeepSeek's or torchtitan's), then the routed experts
// (HF: HfGroupedExperts; torchtitan: the sorted dispatch, GroupedExperts and the combine), top_k
// expert passes per token, and the shared experts as dense MLPs.
// Expert parallelism under Hugging Face modeling: ROLL's (alibaba/ROLL@8eb27cc
// roll/distributed/strategy/fsdp2_strategy.py ExpertParallel, which mirrors torchtitan v0.2.2's,
// around transformers 5's experts module with roll/utils/fsdp_utils.py ep_experts_forward), on
// x [T, H] and the router's fp32 top-k weights `probs`. Per token (k = top_k rows each, the
// balanced load):
//   _token_dispatch: token_indices_experts_sorted = argsort(ids) (int64 [k], kept on the
//   module and saved by the combine's index_put); routed_input = x[indices // top_k] (the
//   quotient, int64 [k], saved by the gather); all_to_all_single_autograd (saves nothing);
//   _permute: vstack((x, zeros)) then x[permuted_indices] (int32 indices, saved), the
//   all-to-all's output still bound to the caller's variable until _permute returns;
//   ep_experts_forward, the for-loop path (moe_use_grouped_mm false, both examples): per local
//   expert linear(x_e, gate_up[e]).chunk(2), act(gate) * up, linear(h, down[e]): the saves of a
//   SwiGLU MLP on the permuted rows; torch.cat of the outputs and vstack with the padding rows;
//   _token_combine: _unpermute (new_empty + index_put with the saved indices), the all-to-all
//   back, routed_output_unsorted = zeros + index_put (saves the sorted indices),
//   bmm(top_scores [T, 1, k] fp32, routed_output_unsorted.to(fp32) [T, k, H]) (each saved for
//   the other's gradient: a [k, H] fp32 copy per token), .to(x.dtype), .clone().
int RollExpertParallel(Ctx& c, int x, int probs, double fe) {
  const double h = static_cast<double>(c.spec.hidden), k = c.spec.moe.top_k;
  int sorted_idx = Int64Index(c, k, "moe.ep token_indices_experts_sorted = argsort(ids) (int64)",
                              "moe.ep argsort");
  int src = Int64Index(c, k, "moe.ep token_indices_experts_sorted // top_k (int64)",
                       "moe.ep // top_k", {sorted_idx});
  int routed = c.g.Tensor("moe.ep routed_input = x[indices // top_k]", c.e * h * k);
  c.g.Op("moe.ep gather", {x, src}, routed, {src});
  int recv = c.g.Tensor("moe.ep dispatch all-to-all output", c.e * h * k);
  c.g.Op("moe.ep dispatch all_to_all_single", {routed}, recv, {});
  c.g.MarkComputeBound();  // NCCL moves these bytes (the walk's all-to-all ops), not a kernel here
  int stacked = c.g.Tensor("moe.ep _permute vstack((x, zeros))", c.e * h * k);
  c.g.Op("moe.ep _permute vstack", {recv}, stacked, {});
  int perm = c.g.Tensor("moe.ep permuted_indices (int32)", 4 * k);
  c.g.Op("moe.ep permuted_indices", {}, perm, {});
  int permuted = c.g.Tensor("moe.ep x[permuted_indices]", c.e * h * k);
  c.g.Op("moe.ep permute", {stacked, perm}, permuted, {perm});
  c.g.KeepAliveThroughLastOp(recv);
  int out = DenseMlp(c, permuted, fe, k, "moe.experts", "block_sparse_moe.experts.*");
  int padded = c.g.Tensor("moe.ep experts vstack((out, zeros))", c.e * h * k);
  c.g.Op("moe.ep experts vstack", {out}, padded, {});
  int unperm = c.g.Tensor("moe.ep _unpermute new_empty + index_put", c.e * h * k);
  c.g.Op("moe.ep unpermute", {padded, perm}, unperm, {perm});
  int back = c.g.Tensor("moe.ep combine all-to-all output", c.e * h * k);
  c.g.Op("moe.ep combine all_to_all_single", {unperm}, back, {});
  c.g.MarkComputeBound();
  int unsorted = c.g.Tensor("moe.ep routed_output_unsorted (zeros + index_put)", c.e * h * k);
  c.g.Op("moe.ep unsort", {back, sorted_idx}, unsorted, {sorted_idx});
  int weights_operand =
      CastUnlessFp32(c, unsorted, kFp32 * h * k, "moe.ep routed_output_unsorted.to(float32)",
                     "moe.ep to(float32)");
  int combined = c.g.Tensor("moe.ep bmm(top_scores, routed_output) (fp32)", kFp32 * h);
  c.g.Op("moe.ep bmm by routing weight", {probs, weights_operand}, combined,
         {{weights_operand, 0}, {probs, 1}});
  combined = CastUnlessFp32(c, combined, c.e * h, "moe.ep combined.to(dtype)", "moe.ep to(dtype)");
  int clone = c.g.Tensor("moe.ep out_experts.clone()", c.e * h);
  c.g.Op("moe.ep clone", {combined}, clone, {});
  return clone;
}

int Moe(Ctx& c, int x) {
  const bool tt = c.opt.modeling == Modeling::kTorchtitan;
  if (c.spec.moe.gpt_oss_experts && !tt) return GptOssMoe(c, x);
  const MoeSpec& m = c.spec.moe;
  double h = static_cast<double>(c.spec.hidden), k = m.top_k;
  double fe = static_cast<double>(m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : c.spec.ffn_hidden);
  // The routing weights the experts' outputs are scaled by: fp32 from every router here (a
  // bf16 expert output times an fp32 weight promotes).
  int probs;
  if (m.deepseek_router) {
    probs = DeepseekRouter(c, x);
  } else if (tt) {
    // TokenChoiceTopKRouter: `with torch.autocast(dtype=float32): scores = self.gate(x)`; the
    // autocast cast of x is what the gate's matmul saves for its weight gradient (the weight's
    // fp32 copy [E, H] is per layer, not per token), softmax in fp32 saves its output.
    int x32 = CastUnlessFp32(c, x, kFp32 * h, "moe.router input to(float32) (autocast)",
                             "moe.router autocast cast");
    int logits = c.g.Tensor("moe.router logits (fp32)", kFp32 * m.num_experts);
    c.g.Op("moe.router (fp32)", {x32}, logits, {{x32, SavedFor::kParamGrad}});
    c.g.MarkComputeBound();
    // GPT-OSS's gate has a bias [E] (models/gpt_oss/__init__.py Linear.Config(bias=True)).
    c.g.SetParam(m.num_experts * (h + (m.gpt_oss_experts ? 1 : 0)),
                 WeightTrains(c, "block_sparse_moe.gate"), AnyTrains(c, "block_sparse_moe.gate"));
    int softmax = c.g.Tensor("moe.router softmax (fp32)", kFp32 * m.num_experts);
    c.g.Op("moe.softmax", {logits}, softmax, {softmax});
    // topk (under no grad in effect: its values are dropped) picks, gather saves the int64
    // indices and returns the k scores, route_norm divides them by their sum.
    int ids = Int64Index(c, k, "moe.router top-k expert ids (int64)", "moe.router topk", {softmax});
    probs = c.g.Tensor("moe.router top-k scores (fp32)", kFp32 * k);
    c.g.Op("moe.router gather", {softmax, ids}, probs, {ids});
    if (m.norm_topk_prob || m.gpt_oss_experts) {
      // route_norm: topk_scores / (topk_scores.sum(-1, keepdim) + 1e-20). The sum and the add
      // save nothing; the division saves the denominator (for the scores' gradient) and the
      // scores (for the denominator's).
      int sum = c.g.Tensor("moe.router top-k score sum (fp32)", kFp32);
      c.g.Op("moe.router route_norm sum", {probs}, sum, {});
      int den = c.g.Tensor("moe.router route_norm denominator (fp32)", kFp32);
      c.g.Op("moe.router route_norm add eps", {sum}, den, {});
      int normed = c.g.Tensor("moe.router top-k scores / denominator (fp32)", kFp32 * k);
      c.g.Op("moe.router route_norm divide", {probs, den}, normed, {{den, 0}, {probs, 1}});
      probs = normed;
    }
    // topk_scores * route_scale (1.0 unless configured): a multiply by a scalar saves nothing.
    int scaled = c.g.Tensor("moe.router top-k scores * route_scale (fp32)", kFp32 * k);
    c.g.Op("moe.router route_scale", {probs}, scaled, {});
    probs = scaled;
  } else {
    // transformers 5's MixtralTopKRouter / Qwen2MoeTopKRouter / Qwen3MoeTopKRouter: logits =
    // F.linear(x, W); softmax in fp32 saves its fp32 output (Mixtral's softmax(logits.float())
    // makes the fp32 copy counted here; Qwen's softmax(logits, dtype=float) casts inside the
    // kernel: an [E] transient too few to matter); topk saves its int64 indices; the top-k values divided by their sum when norm_topk_prob (Mixtral always; the
    // in-place division saves the sum and the values); Qwen's .to(router_logits.dtype) casts to
    // the softmax's fp32, so the routing weights stay fp32.
    int logits = Linear(c, x, m.num_experts, "moe.router", "block_sparse_moe.gate");
    logits = CastUnlessFp32(c, logits, kFp32 * m.num_experts, "moe.router logits.float()",
                            "moe.router logits to(float32)");
    int softmax = c.g.Tensor("moe.router softmax (fp32)", kFp32 * m.num_experts);
    c.g.Op("moe.softmax", {logits}, softmax, {softmax});
    int ids = Int64Index(c, k, "moe.router topk indices (int64)", "moe.router topk indices");
    probs = c.g.Tensor("moe.router top-k values (fp32)", kFp32 * k);
    c.g.Op("moe.router topk", {softmax, ids}, probs, {ids});
    if (m.norm_topk_prob) {
      int sum = c.g.Tensor("moe.router top-k value sum (fp32)", kFp32);
      c.g.Op("moe.router top-k sum", {probs}, sum, {});
      int normed = c.g.Tensor("moe.router top-k values / sum (fp32)", kFp32 * k);
      c.g.Op("moe.router renormalise", {probs, sum}, normed, {{sum, 0}, {probs, 1}});
      probs = normed;
    }
  }
  if (!tt && c.opt.ep > 1) return SharedExpertsAdded(c, x, RollExpertParallel(c, x, probs, fe), fe);
  if (!tt) {
    int out = HfGroupedExperts(c, x, probs, kFp32, [&](int rows) {
      return DenseMlp(c, rows, fe, k, "moe.experts", "block_sparse_moe.experts.*");
    });
    return SharedExpertsAdded(c, x, out, fe);
  }
  int gathered = c.g.Tensor("moe.gathered tokens (x top_k)", c.e * h * k);
  // _local_reorder: argsort of the expert ids, x[token_indices_experts_sorted] saves the int64
  // indices (the combine's scatter_add saves an expanded view of the same tensor).
  int token_index = Int64Index(c, k, "moe.token_indices_experts_sorted (int64)", "moe.argsort");
  c.g.Op("moe.gather", {x, token_index}, gathered, {token_index});
  const bool ep = c.opt.ep > 1;
  int perm = -1;
  if (ep) {
    // AllToAllTokenDispatcher.dispatch: all_to_all_single_autograd saves nothing (its backward is
    // the inverse all-to-all); _permute's routed_input_RD[permuted_indices, :] saves the int64
    // indices, and its output is the experts' input. Rows per token of this rank: top_k (the
    // balanced load; the capacity factor scales the experts' intermediates, model/tiled_mlp.h).
    int recv = c.g.Tensor("moe.ep dispatch all-to-all output", c.e * h * k);
    c.g.Op("moe.ep dispatch all_to_all_single", {gathered}, recv, {});
    c.g.MarkComputeBound();  // NCCL moves these bytes (the walk's all-to-all ops), not a kernel here
    perm = Int64Index(c, k, "moe.ep permuted_indices (int64)", "moe.ep permuted_indices");
    int permuted = c.g.Tensor("moe.ep routed_input[permuted_indices]", c.e * h * k);
    c.g.Op("moe.ep permute", {recv, perm}, permuted, {perm});
    gathered = permuted;
  }
  int expert_out = m.gpt_oss_experts
                       ? GptOssGroupedExperts(c, gathered, fe, k)
                       : DenseMlp(c, gathered, fe, k, "moe.experts", "block_sparse_moe.experts.*");
  if (ep) {
    // combine: _unpermute (new_empty + index_put with the saved indices), then the all-to-all back.
    int unperm = c.g.Tensor("moe.ep unpermuted output", c.e * h * k);
    c.g.Op("moe.ep unpermute", {expert_out, perm}, unperm, {perm});
    int back = c.g.Tensor("moe.ep combine all-to-all output", c.e * h * k);
    c.g.Op("moe.ep combine all_to_all_single", {unperm}, back, {});
    c.g.MarkComputeBound();
    expert_out = back;
  }
  // LocalTokenDispatcher.combine: (routed_output.to(float32) * topk_scores_experts_sorted)
  // .to(dtype): the mul saves the fp32 copy (for the scores' gradient) and the sorted scores.
  expert_out = CastUnlessFp32(c, expert_out, kFp32 * h * k, "moe.expert output to(float32)",
                              "moe.combine to(float32)");
  int sorted = c.g.Tensor("moe.topk_scores_experts_sorted (fp32)", kFp32 * k);
  c.g.Op("moe.scores sort", {probs, token_index}, sorted, {});
  int weighted = c.g.Tensor("moe.weighted expert output", kFp32 * h * k);
  c.g.Op("moe.scale by routing weight", {expert_out, sorted}, weighted,
         {{expert_out, 1}, {sorted, 0}});
  weighted = CastUnlessFp32(c, weighted, c.e * h * k, "moe.weighted expert output to(dtype)",
                            "moe.weighted to(dtype)");
  int out = c.g.Tensor("moe.combined output", c.e * h);
  c.g.Op("moe.scatter_add", {weighted, token_index}, out, {{token_index}});
  return SharedExpertsAdded(c, x, out, fe);
}

// A block's MLP: ComputeBlockActivations gets the spec of the block it records, so a dense
// prefix's blocks come with ModelSpec::DenseLayerSpec (no experts).
int Mlp(Ctx& c, int x) {
  if (c.spec.moe.enabled()) return Moe(c, x);
  return DenseMlp(c, x, static_cast<double>(c.spec.ffn_hidden), 1.0, "mlp", "mlp");
}

// HF ForCausalLM with output_router_logits (modeling_mixtral.py / modeling_qwen3_moe.py):
// after the language-model loss, aux_loss = load_balancing_loss_func(outputs.router_logits,
// num_experts, top_k) and loss += router_aux_loss_coef * aux_loss. Without an attention mask it
// runs: torch.cat of the L layers' router logits [L·T, E] (held by the outputs since each layer's
// forward, until forward ends); softmax (saves its output); topk (the values are discarded, so
// its node and saved indices die at once; selected_experts [L·T, k] int64 lives on); one_hot
// [L·T, k, E] int64 and its .float() copy for mean(dim=0) (no gradient); mean of the softmax; the
// [k, E] product and sum. Per token that is 12·L·k·E bytes at the one_hot's moment (Qwen3-30B-A3B:
// 590 KB). The router logits' gradient stays for the blocks' backward (Leaf).
int RouterAuxLoss(Ctx& c, int loss) {
  const MoeSpec& m = c.spec.moe;
  double L = c.spec.num_layers, E = m.num_experts, k = m.top_k;
  int held = c.g.Leaf("router logits of every layer (outputs.router_logits)", c.e * L * E);
  c.g.HoldThroughForward(held);
  int cat = c.g.Tensor("aux loss: cat(router logits)", c.e * L * E);
  c.g.Op("aux loss: cat", {held}, cat, {});
  int probs = c.g.Tensor("aux loss: softmax(router logits)", c.e * L * E);
  c.g.Op("aux loss: softmax", {cat}, probs, {probs});
  int selected = c.g.Tensor("aux loss: topk selected_experts (int64)", 8 * L * k);
  c.g.Op("aux loss: topk", {}, selected, {});  // needs no gradient (its values are discarded)
  int mask = c.g.Tensor("aux loss: one_hot expert_mask (int64)", 8 * L * k * E);
  c.g.Op("aux loss: one_hot", {selected}, mask, {});
  int mask32 = c.g.Tensor("aux loss: expert_mask.float()", kFp32 * L * k * E);
  c.g.Op("aux loss: float", {mask}, mask32, {});
  int tokens_per_expert = c.g.Tensor("aux loss: tokens_per_expert [k, E]", 0.0);
  c.g.Op("aux loss: mean over tokens", {mask32}, tokens_per_expert, {});
  int prob_per_expert = c.g.Tensor("aux loss: router_prob_per_expert [E]", 0.0);
  c.g.Op("aux loss: mean of probs", {probs}, prob_per_expert, {});
  int aux = c.g.Tensor("aux loss", 0.0);
  c.g.Op("aux loss: sum(tokens_per_expert * router_prob_per_expert)",
         {tokens_per_expert, prob_per_expert}, aux, {});
  int total = c.g.Tensor("loss + coef * aux loss", 0.0);
  c.g.Op("loss + coef * aux loss", {loss, aux}, total, {});
  return total;
}

int Add(Ctx& c, int a, int b, const std::string& name) {
  int y = c.g.Tensor(name, c.e * static_cast<double>(c.spec.hidden));
  c.g.Op(name, {a, b}, y, {});
  return y;
}

}  // namespace

std::string Trainability::Key() const {
  if (FullFinetune()) return "full";
  std::string k = std::string(input_requires_grad ? "in+" : "in-") +
                   (all_params_train ? "all" : "some") + "/r" + std::to_string(lora_rank) +
                   "/p" + std::to_string(lora_dropout);
  for (const auto& p : trainable) k += "|" + p;
  k += "/";
  for (const auto& m : lora_modules) k += "|" + m;
  return k;
}

ActivationOptions ActivationOptionsFor(const Plan& plan, int64_t seq_len) {
  ActivationOptions o;
  o.dtype = plan.param_dtype;
  o.attention = plan.attention;
  o.modeling = plan.modeling;
  o.loss_fp32_upcast = plan.loss_fp32_upcast;
  o.keep_logits = plan.keep_logits;
  o.loss_kernel = plan.loss_kernel;
  // Eager attention's scores span one sequence: a packed row's (Plan::AttentionSeqLen), whose
  // tokens each attend within their own sequence (varlen kernels; shardtune run attends each
  // run of equal lengths as a batch of them, Transformer::SetPacking).
  o.seq_len = plan.AttentionSeqLen(seq_len);
  o.cp = plan.cp;
  o.ep = plan.ep;
  if (plan.loss_kernel == LossKernel::kVerlPaddedCe) {
    const int64_t width = plan.packed_seq_len > 0 ? plan.packed_seq_len : seq_len;
    if (plan.response_len > 0 && width > 0) {
      o.response_fraction = std::min(1.0, static_cast<double>(plan.response_len) /
                                              static_cast<double>(width));
    }
    o.entropy_from_logits = plan.entropy_from_logits;
  }
  // verl's torch fused head: the entropy's gradient adds its branch to each chunk's backward.
  if (plan.loss_kernel == LossKernel::kVerlFusedTorch) o.entropy_from_logits = plan.entropy_from_logits;
  o.padding_mask = plan.padding_mask;
  o.liger = plan.liger;
  if (plan.loss_kernel == LossKernel::kTrlLogps) {
    o.logps_rows = plan.packed_seq_len > 0 ? 1 : std::max(1, plan.micro_batch);
    o.no_grad = !plan.Trains();
  }
  return o;
}

std::vector<std::string> LigerProblems(const ModelSpec& spec, const Plan& plan, const std::string& where) {
  std::vector<std::string> out;
  if (!plan.liger.any()) return out;
  // The model types whose apply_liger_kernel_to_* patches these three modules as modelled here
  // (monkey_patch.py apply_liger_kernel_to_llama / _mistral / _qwen2 / _qwen3).
  static const std::vector<std::string> kArchitectures = {"LlamaForCausalLM", "MistralForCausalLM",
                                                           "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
  const bool family = std::find(kArchitectures.begin(), kArchitectures.end(), spec.hf_architecture) !=
                          kArchitectures.end() &&
                      !spec.moe.enabled() && spec.mlp == MlpKind::kSwiGlu && !spec.fused_gate_up &&
                      spec.norm == NormKind::kRmsNorm;
  for (const auto& [on, key] : {std::pair{plan.liger.rms_norm, "rms_norm"},
                                std::pair{plan.liger.swiglu, "swiglu"}, std::pair{plan.liger.rope, "rope"}}) {
    if (!on) continue;
    if (!family) {
      out.push_back(where + ":/liger/" + key +
                    ": expected false for " + spec.name + " (" + spec.hf_architecture +
                    "): Liger's kernels are modelled for the Llama, Mistral, Qwen2 and Qwen3 dense "
                    "decoders, got true");
    } else if (plan.modeling != Modeling::kHf) {
      out.push_back(where + ":/liger/" + key +
                    ": expected false with --modeling torchtitan (Liger patches Hugging Face's "
                    "modules), got true");
    }
  }
  return out;
}

double ResidualPerToken(const ModelSpec& spec, const ActivationOptions& opt) {
  return static_cast<double>(BytesPerElement(opt.dtype)) * static_cast<double>(spec.hidden);
}

bool TorchtitanOpSacApplies(const ModelSpec& spec, const ActivationOptions& opt,
                            const Trainability& t) {
  // An MoE block: torchtitan's MoE (models/moe/moe.py: TokenChoiceTopKRouter's softmax router,
  // GroupedExperts on the expert-sorted rows) with routed experts only and its experts local
  // (ep 1: an expert-parallel block's all-to-alls would rerun in backward, outside this rule).
  const MoeSpec& m = spec.moe;
  const bool moe_block = !m.enabled() || (opt.ep <= 1 && m.num_shared_experts == 0 && !m.gpt_oss_experts &&
                                          !m.deepseek_router && !spec.mlp_bias);
  return opt.modeling == Modeling::kTorchtitan && opt.cp <= 1 && moe_block &&
         !spec.mla.enabled() && !spec.fused_qkv && !spec.fused_gate_up &&
         spec.mlp == MlpKind::kSwiGlu && !spec.gelu_gate && t.FullFinetune();
}

namespace {
// torchtitan's per-op selective activation checkpointing (`selective_ac_option = "op"`,
// torchtitan/distributed/activation_checkpoint.py SelectiveAC; `_save_list` in
// torchtitan/parallelisms/parallelize_llama.py at the 2024-12 commit 9dec370): inside each
// checkpointed block the policy saves the outputs of the ops in its save list (aten.mm, the SDPA
// kernels, reduce_scatter, abs/max) "except every second mm": a per-block counter, fresh for each
// checkpoint call, numbers the block's aten.mm calls in forward order and the even-numbered ones
// are recomputed. torch's SAC (torch/utils/checkpoint.py _CachingTorchDispatchMode) stores every
// MUST_SAVE output whether or not backward reads it; the rest is recomputed from the block input,
// which the non-reentrant checkpoint keeps. For the dense block torchtitan's models run
// (llama3/qwen3 model.py: wq, wk, wv, then wo after attention; FeedForward w2(silu(w1(x)) *
// w3(x))) the mms are wq, wk, wv, wo, w1, w3, w2: wq, wv, w1, w2 are saved; wk, wo, w3 rerun in
// backward. A biased projection is aten.addmm, which is in neither the save list nor the count:
// recomputed. Eager attention's bmm and softmax are not in the list either: the whole attention
// core reruns in backward (BlockActivations::selective_recompute_attention) and nothing of it is
// kept. shardtune's executor applies the same rule (executor/nn/recompute.h SacTape), and both
// ask TorchtitanOpSacApplies.
//
// An MoE block (torchtitan's qwen3 and llama4 parallelize.py pass the same `_op_sac_save_list`):
// the router's gate is force-recomputed and left out of the count (activation_checkpoint.py
// `per_op_sac_force_recompute_mm_shapes_by_fqns`, default ["moe.router.gate"]: an mm of its
// weight's shape returns PREFER_RECOMPUTE before the counter moves), and the experts'
// torch._grouped_mm is not in the save list (GroupedExperts._run_experts_grouped_mm: w1, w3, w2
// in that order): so the counted mms are wq, wk, wv, wo, and the block keeps its input, wq, wv
// and SDPA's outputs; the whole MoE reruns in backward. An explicit save set may keep the
// experts' grouped outputs (w1, w3, w2: one row per routed (token, expert), top_k per token).
void TorchtitanOpSac(const ModelSpec& spec, const ActivationOptions& opt, const Trainability& t,
                     double elem_bytes, BlockActivations* b) {
  if (!TorchtitanOpSacApplies(spec, opt, t)) return;
  struct Mm {
    double in, out, rows;  // rows per token: 1, or top_k for a routed expert's grouped GEMM
  };
  const double h = static_cast<double>(spec.hidden);
  const double q = static_cast<double>(spec.q_dim()), kv = static_cast<double>(spec.kv_dim());
  const bool moe = spec.moe.enabled();
  const double f = static_cast<double>(moe && spec.moe.expert_ffn_hidden > 0 ? spec.moe.expert_ffn_hidden
                                                                              : spec.ffn_hidden);
  const double k = moe ? static_cast<double>(spec.moe.top_k) : 1.0;
  // kSacOpNames order: wq, wk, wv, wo, w1, w3, w2.
  const Mm order[kSacMatmuls] = {{h, q, 1}, {h, kv, 1}, {h, kv, 1}, {q, h, 1}, {h, f, k}, {h, f, k}, {f, h, k}};
  const std::array<bool, kSacMatmuls> uncounted = SacUncountedProjections(spec);
  b->sac_ops.clear();
  for (int i = 0; i < kSacMatmuls; ++i) {
    const Mm& m = order[i];
    b->sac_ops.push_back({elem_bytes * m.out * m.rows, 2 * m.in * m.out * m.rows, uncounted[static_cast<size_t>(i)]});
  }
  // The router's gate (H -> E, fp32 under autocast) reruns whatever the save set.
  b->sac_rerun_matmul_flops_per_token = moe ? 2 * h * static_cast<double>(spec.moe.num_experts) : 0.0;
  BlockActivations::SacOp sdpa;
  b->sac_sdpa = opt.attention == Attention::kSdpa;
  if (b->sac_sdpa) {
    // The attention kernel's outputs (output and logsumexp).
    for (const auto& s : b->full.saved) {
      if (s.name.find("attn.core") != std::string::npos) sdpa.output_per_token += s.bytes_per_token;
    }
  }
  b->sac_ops.push_back(sdpa);
  b->selective_per_token = b->SacSavedPerToken(kTorchtitanSacSave);
  b->selective_recompute_matmul_flops_per_token = b->SacRecomputeMatmulFlopsPerToken(kTorchtitanSacSave);
  b->selective_recompute_attention = b->SacRecomputeAttention(kTorchtitanSacSave);
}
}  // namespace

BlockActivations ComputeBlockActivations(const ModelSpec& spec, const ActivationOptions& opt,
                                         const Trainability& trainability) {
  Ctx c{AutogradLedger(), static_cast<double>(BytesPerElement(opt.dtype)), spec, opt,
        trainability, {}};
  double h = static_cast<double>(spec.hidden);
  std::string ln1 = Gpt2(c) ? "ln_1" : "input_layernorm";
  std::string ln2 = Gpt2(c) ? "ln_2" : "post_attention_layernorm";
  int x = c.g.Tensor("block input", c.e * h);
  int out;
  if (spec.norm_placement == NormPlacement::kPost) {
    // Olmo2DecoderLayer: h = x + post_attention_layernorm(attn(x));
    // out = h + post_feedforward_layernorm(mlp(h)). The norms read the sublayers' outputs.
    int a = Norm(c, AttentionSublayer(c, x), h, "post_attention_layernorm",
                 "post_attention_layernorm");
    int h1 = Add(c, x, a, "residual add (attn)");
    int m = Norm(c, Mlp(c, h1), h, "post_feedforward_layernorm", "post_feedforward_layernorm");
    out = Add(c, h1, m, "residual add (mlp)");
  } else if (spec.norm_placement == NormPlacement::kSandwich) {
    // Gemma2DecoderLayer / Gemma3DecoderLayer:
    // h = x + post_attention_layernorm(attn(input_layernorm(x)));
    // out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h))).
    int a = AttentionSublayer(c, Norm(c, x, h, "input_layernorm", "input_layernorm"));
    a = Norm(c, a, h, "post_attention_layernorm", "post_attention_layernorm");
    int h1 = Add(c, x, a, "residual add (attn)");
    int m = Mlp(c, Norm(c, h1, h, "pre_feedforward_layernorm", "pre_feedforward_layernorm"));
    m = Norm(c, m, h, "post_feedforward_layernorm", "post_feedforward_layernorm");
    out = Add(c, h1, m, "residual add (mlp)");
  } else if (spec.parallel_residual) {  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
    int a = AttentionSublayer(c, Norm(c, x, h, "input_layernorm", ln1));
    int m = Mlp(c, Norm(c, x, h, "post_attention_layernorm", ln2));
    out = Add(c, Add(c, x, a, "residual add (attn)"), m, "residual add (mlp)");
  } else {
    int a = AttentionSublayer(c, Norm(c, x, h, "input_layernorm", ln1));
    int h1 = Add(c, x, a, "residual add (attn)");
    int m = Mlp(c, Norm(c, h1, h, "post_attention_layernorm", ln2));
    out = Add(c, h1, m, "residual add (mlp)");
  }
  BlockActivations b;
  b.full = c.g.Run(x, out, trainability.input_requires_grad);
  b.checkpoint_input_per_token = c.e * h;
  if (spec.norm_placement == NormPlacement::kPre) {
    // A pre-norm block (Llama, Mistral, Qwen, their MoE kin; GPT-NeoX's parallel residual) is
    // what shardtune's executor checkpoints piece by piece (executor/nn/transformer.cc NormThen,
    // MlpDown): each norm and the MLP activation rerun in backward from their inputs, everything
    // else keeps what autograd saved. So the block keeps its full ledger less the norms' and the
    // activation's own tensors, plus each norm's input where nothing else saved it (fp32: the
    // pow and mul save the input itself; bf16: only its fp32 copy, which is dropped).
    auto has = [&](const std::string& name) {
      for (const auto& t : b.full.saved) {
        if (t.name == name) return true;
      }
      return false;
    };
    double kept = 0;
    for (const auto& t : b.full.saved) {
      const std::string& n = t.name;
      bool norm = n.rfind("input_layernorm ", 0) == 0 || n.rfind("post_attention_layernorm ", 0) == 0;
      bool act = EndsWith(n, ".silu output") || EndsWith(n, ".silu*up") || EndsWith(n, ".gelu output");
      if (!norm && !act) kept += t.bytes_per_token;
    }
    if (!has("block input")) kept += c.e * h;  // input_layernorm's input
    if (!spec.parallel_residual && !has("residual add (attn)")) kept += c.e * h;  // post-attention norm's
    b.selective_per_token = std::min(kept, b.full.saved_per_token);
  } else {
    // Other placements (post-norm, sandwich): torchtitan's op-level SAC save list, keep the
    // outputs of matmuls and of the attention kernel, recompute norms, rope and elementwise ops.
    // Approximated as the saved tensors whose producer is a projection or the attention core,
    // plus the block input.
    double sel = c.e * h;
    for (const auto& t : b.full.saved) {
      const std::string& n = t.name;
      // A LoRA'd projection's output is base + adapter (the module's output); lora_A's output is
      // the adapter's matmul output B saves.
      bool matmul = n.find("_proj output") != std::string::npos ||
                    n.find(".up output") != std::string::npos ||
                    n.find("router output") != std::string::npos ||
                    n.find("lora_A output") != std::string::npos;
      bool attn = n.find("attn.core") != std::string::npos;
      // Ulysses: tensors that came through an all-to-all are kept rather than recomputed (a
      // recompute would rerun the collective; torchtitan's SAC save list keeps collective outputs).
      attn = attn || n.find("attn.ulysses") != std::string::npos;
      if (matmul || attn) sel += t.bytes_per_token;
    }
    b.selective_per_token = std::min(sel, b.full.saved_per_token);
  }
  TorchtitanOpSac(spec, opt, trainability, c.e, &b);
  return b;
}

int64_t FusedLinearChunkRows(int64_t rows, int64_t vocab, int64_t hidden) {
  if (rows <= 0 || vocab <= 0 || hidden <= 0) return 0;
  const int64_t inc_factor = (vocab + hidden - 1) / hidden;
  const int64_t want = (rows + inc_factor - 1) / inc_factor;
  int64_t chunk = 1;
  while (chunk < want) chunk *= 2;  // triton.next_power_of_2
  return std::min(chunk, rows);
}

int64_t FusedChunkRows(const ActivationLedger::FusedLoss& fused, int64_t rows, int64_t vocab,
                       int64_t hidden) {
  if (fused.fixed_chunk_rows > 0) return rows <= 0 ? 0 : std::min(fused.fixed_chunk_rows, rows);
  return FusedLinearChunkRows(rows, vocab, hidden);
}

namespace {

// Gemma2ForCausalLM's final soft-capping inside the model's forward: logits = logits / cap;
// logits = torch.tanh(logits); logits = logits * cap, in the compute dtype before any loss.
// tanh saves its output for backward (derivatives.yaml "self: tanh_backward(grad, result)"); the
// divisions by a Python float save nothing. Returns the capped logits (`logits` without a cap).
int SoftcapLogits(Ctx& c, int logits) {
  if (c.spec.final_logit_softcap <= 0) return logits;
  double v_bytes = c.g.BytesPerToken(logits);
  int scaled = c.g.Tensor("logits / final_logit_softcapping", v_bytes);
  c.g.Op("softcap divide", {logits}, scaled, {});
  int th = c.g.Tensor("tanh(logits / cap)", v_bytes);
  c.g.Op("softcap tanh", {scaled}, th, {th});
  int capped = c.g.Tensor("softcapped logits", v_bytes);
  c.g.Op("softcap multiply", {th}, capped, {});
  return capped;
}

// The module whose weight the LM head multiplies by: a tied head's is model.embed_tokens
// (module_tree.cc BuildModuleTree).
std::string HeadWeightModule(const Ctx& c) { return c.spec.tied_embeddings ? "model.embed_tokens" : "lm_head"; }

// The LM head's logits [T, V] in the compute dtype, soft-capped where the model caps them.
int HeadLogits(Ctx& c, int normed) {
  return SoftcapLogits(c, Linear(c, normed, static_cast<double>(c.spec.vocab_size), "lm_head",
                                 HeadWeightModule(c)));
}

// The last recorded op is a chunked head's one node: compute-bound, owning the head weight [V, H]
// (its gradient when it trains). Returns whether it trains.
bool FusedHeadNodeParam(Ctx& c, const std::string& weight) {
  c.g.MarkComputeBound();
  const bool trains = recipes::AnyTrains(c, weight);
  c.g.SetParam(static_cast<double>(c.spec.vocab_size) * static_cast<double>(c.spec.hidden), trains, true);
  return trains;
}

// HF's MoE models add the router's auxiliary loss to the head's (modeling_*.py
// load_balancing_loss_func); torchtitan's have none.
int WithRouterAuxLoss(Ctx& c, int loss) {
  if (c.spec.moe.enabled() && c.spec.moe.router_aux_loss && c.opt.modeling == Modeling::kHf) {
    return RouterAuxLoss(c, loss);
  }
  return loss;
}

// The fused linear cross-entropy after the final norm (LossKernel::kFusedLinear; Liger-Kernel
// LigerFusedLinearCrossEntropyFunction, shardtune's executor/nn/fused_loss.cc): one autograd node
// whose forward runs, chunk by chunk, logits = x W^T, the fp32 softmax, the logits' gradient and
// both matmuls of their backward, and saves the input's gradient [T, H] (compute dtype, zeros_like
// x, a buffer no op's output) and the weight's [V, H] (fixed size: FusedLoss). Its backward only
// scales them by the incoming gradient, in place, and hands them on. The ledger records the input
// gradient as saved; the chunk loop's transients and the weight gradient, which do not scale
// with the tokens, go to `fused_loss` for the caller. The head matmul is compute-bound; the
// chunk loop's memory-bound passes over [rows, V] (fused_loss.cc, bytes per vocabulary entry)
// are added to the forward's traffic: row max 4, subtract 8, exp 8, row sum 4, scale 8 (32), and
// unless the compute dtype is fp32 the upcast (e + 4) and the cast back (4 + e); soft-capping
// adds divide, tanh, square, negate, add 1 and x cap (8 each) and x derivative (12): 60.
ActivationLedger FusedLinearHead(Ctx& c, int x, int normed) {
  const double h = static_cast<double>(c.spec.hidden), v = static_cast<double>(c.spec.vocab_size);
  const std::string weight = HeadWeightModule(c);
  int gi = c.g.Tensor("fused loss: input gradient (saved)", c.e * h);
  c.g.Op("fused loss: zeros_like(input)", {}, gi, {});
  int loss = c.g.Tensor("loss", 0.0);
  c.g.Op("fused linear cross-entropy", {normed, gi}, loss, {{gi, 0}});
  const bool trains = FusedHeadNodeParam(c, weight);
  loss = WithRouterAuxLoss(c, loss);
  ActivationLedger led = c.g.Run(x, loss, c.t.input_requires_grad);
  led.fused_loss.chunk_traffic_per_token =
      v * (32 + (c.e == kFp32 ? 0 : 2 * (c.e + kFp32)) + (c.spec.final_logit_softcap > 0 ? 60 : 0));
  led.elementwise_traffic_per_token += led.fused_loss.chunk_traffic_per_token;
  led.fused_loss.on = true;
  led.fused_loss.live_per_token = led.saved_per_token + c.e * h;
  led.fused_loss.weight_grad_bytes = trains ? c.e * v * h : 0;
  // At the upcast and at the cast back: the chunk in the compute dtype and in fp32 (fp32 compute:
  // one tensor, modified in place); soft-capping: the fp32 logits and the fp32 tanh derivative.
  const double upcast = (c.e == kFp32 ? 0 : c.e) + kFp32;
  led.fused_loss.chunk_row_bytes =
      v * std::max(upcast, c.spec.final_logit_softcap > 0 ? 2 * kFp32 : 0.0);
  return led;
}

// verl's actor log-prob path with use_remove_padding (LossKernel::kVerlFlashCe), from
// volcengine/verl@b178a3c verl/workers/actor/dp_actor.py _forward_micro_batch:
//   logits_rmpad = output.logits.squeeze(0)     # [T, V], a view of the lm_head output
//   logits_rmpad.div_(temperature)              # in place on the view
//   log_probs = logprobs_from_logits(logits_rmpad, labels, inplace_backward=True)
// and flash-attn's Triton CrossEntropyLoss (flash_attn/ops/triton/cross_entropy.py): forward
// saves (logits, lse, labels) and writes losses, lse, z_losses [T] fp32; backward writes d logits
// into the logits buffer itself (inplace_backward). So the logits in the compute dtype are the
// only [T, V] tensor forward keeps; the policy loss and the KL term are [B, response] tensors.
// In-place division of a view rebases the lm_head output's history on CopySlices (torch/csrc/
// autograd/functions/tensor.cpp CopySlices::apply_impl), and the view's gradient goes through
// AsStridedBackward0 (FunctionsManual.cpp as_strided_backward). Their backward holds, beside the
// incoming gradient: as_strided_backward's zeros of the base's storage (the gradient CopySlices
// receives), CopySlices' `result` (new_empty_strided of the base, which it returns: recorded as
// the op's input gradient), its clone of the slice and DivBackward0's grad / temperature: four
// [T, V] tensors at once, 8V bytes per token in bf16. Measured: tests/bench/
// verl_logprob_memory.py (torch 1.13 CPU, flash-attn's backward emulated with the same saves
// and in-place write) gives 3.00 x 2VT above what was live when backward started, the dlogits
// buffer among it, against 1.00 with the division done before the view and 0.26 without it.
ActivationLedger VerlFlashCeHead(Ctx& c, int x, int normed) {
  const double v = static_cast<double>(c.spec.vocab_size);
  const double logits_bytes = c.e * v;
  int logits = HeadLogits(c, normed);
  // The division writes the same storage: a tensor of no bytes of its own stands for the divided
  // view. Its backward is CopySlices': the ledger adds the base's gradient (CopySlices' result)
  // and, as workspace, the other three [T, V] tensors named above.
  int divided = c.g.Tensor("logits_rmpad.div_(temperature) (in place, same storage)", 0.0);
  c.g.Op("div_ in place through the squeeze view (CopySlices)", {logits}, divided, {},
         3 * logits_bytes);
  // flash-attn's forward: losses, lse and z_losses [T] fp32, lse saved, -losses returned; the
  // loss's gradient lands in the logits buffer (0 new bytes: `divided` has none).
  // One tensor for the saved lse and the returned log-probs.
  int out = c.g.Tensor("flash-attn cross_entropy lse and log_probs [T] fp32", 2 * kFp32);
  c.g.Op("flash-attn cross_entropy_loss (inplace_backward)", {divided}, out, {logits, out});
  return c.g.Run(x, out, c.t.input_requires_grad);
}

// verl's log-prob path without use_remove_padding (LossKernel::kVerlPaddedCe), the padded branch
// of volcengine/verl@b178a3c verl/workers/actor/dp_actor.py _forward_micro_batch:
//   logits = output.logits                       # [B, S, V], the lm_head output itself
//   logits.div_(temperature)                     # in place on a tensor that is no view
//   logits = logits[:, -response_length - 1 : -1, :]          # a view of the base
//   log_probs = logprobs_from_logits(logits, responses)       # torch_functional.py
//   if calculate_entropy: entropy = entropy_from_logits(logits)  # torch.compile'd
// logprobs_from_logits reshapes the view to [-1, V], which copies it (the slice is not
// contiguous), and runs flash-attn's cross_entropy_loss(inplace_backward=True) on the copy: it
// saves the copy and the lse and writes d logits into the copy's storage. Python's `output`
// holds the base until the function returns. Per padded token, with f = response / width and L
// the compute-dtype logits (e V bytes): forward holds L + f L. Backward: the copy's gradient is
// its own storage (f L); SliceBackward0 allocates zeros of the base (slice_backward) while it is
// live, (1 + f) L; DivBackward0 (a Python float: saves nothing) allocates grad / temperature
// while that is live, 2 L. With the entropy the view, hence the base L, is kept for backward
// too, and its compiled backward adds a [B, response, V] gradient (f L) at the top of backward
// (what Inductor saves is not verified; the eager function is refused by the importer).
ActivationLedger VerlPaddedCeHead(Ctx& c, int x, int normed) {
  const double v = static_cast<double>(c.spec.vocab_size);
  const double lb = c.e * v, f = c.opt.response_fraction;
  int logits = HeadLogits(c, normed);
  c.g.HoldThroughForward(logits);
  // In place: the same storage, a tensor of no bytes of its own; its backward's output (grad /
  // temperature, L) is the workspace beside the incoming gradient.
  int divided = c.g.Tensor("logits.div_(temperature) (in place, same storage)", 0.0);
  c.g.Op("div_ in place (DivBackward0)", {logits}, divided, {}, lb);
  // The slice (a view) and reshape's copy: backward, SliceBackward0's zeros of the base.
  int copy = c.g.Tensor("response logits reshape(-1, V) (copy)", f * lb);
  c.g.Op("response slice + reshape copy (SliceBackward0 zeros)", {divided}, copy, {}, lb);
  // flash-attn's backward writes d logits into the copy: its input gradient is that storage.
  int target = c.g.Views(copy, {"the copy, overwritten by d logits in backward"}, {0.0})[0];
  int out = c.g.Tensor("flash-attn cross_entropy lse and log_probs [B, response] fp32",
                       2 * kFp32 * f);
  std::vector<SavedFor> saved{copy, out};
  double ws = 0;
  if (c.opt.entropy_from_logits) {
    saved.push_back(logits);
    ws = f * lb;
  }
  c.g.Op("flash-attn cross_entropy_loss (inplace_backward)", {target}, out, saved, ws);
  return c.g.Run(x, out, c.t.input_requires_grad);
}

// verl's fused log-prob head, torch backend (LossKernel::kVerlFusedTorch), from volcengine/verl@
// b178a3c verl/models/transformers/dense_common.py forward_with_torch_backend and verl/utils/
// experimental/torch_functional.py FusedLinearForPPOFunction. The model returns log-probs and
// entropy [T] (hidden_states.new_zeros: the compute dtype); the autograd node saves only its input
// (the final norm's output, a view of it) and the head weight. Each 512-row chunk, under no grad
// in forward (_fused_linear_for_ppo_fwd), holds at its most the fp32 logits, probs, log_probs
// and one [c, V] fp32 temporary (logsumexp's (x - max).exp_(), then probs * logits): 16 bytes per
// vocabulary entry per row; the GEMM's output and its division by the temperature (2e) and the
// upcast beside the compute-dtype logits (e + 4) come before, smaller. Backward
// (_fused_linear_for_ppo_bwd) allocates zeros_like(hidden_states) (the input's gradient) and,
// when the weight trains, zeros_like(weight) (its gradient), then per chunk reruns the logits and
// holds fp32 logits, probs, one_hot and dlogits (16) with one more temporary at (one_hot - probs)
// x dlog and at 0 + that product: 20 per entry; the entropy's gradient (entropy_coeff != 0) adds
// log_probs (4) and the temporaries of its formula, 28 at most; the cast of dlogits to the
// compute dtype and its division by the temperature add 2e beside them. The weight's GEMM
// (dlogits.t() @ hidden, computed whether or not the weight trains) then makes a [V, H] product
// in the compute dtype while the fp32 logits, probs, one_hot (and log_probs) and the cast dlogits
// (12 + 4 + e per entry) and the chunk's dhidden [c, H] are live; it is added into the
// accumulator; the loop variables `h, v` keep the chunk's dhidden and product until the next
// chunk's call returns, so from the second chunk on they sit under its transients (measured with
// verl's own function: tests/bench/verl_fused_memory.py). Traffic per vocabulary entry (each op reads its inputs and writes its
// output once): forward division 2e, upcast e + 4 (none in fp32), softmax 8, log_softmax 8,
// logsumexp 24 (amax 4, subtract 8, exp_ 8, sum 4), probs * logits 12, sum 4; backward division
// 2e, upcast, softmax 8, zeros_like 4, subtract 12, scale 8, 0 + x 8, cast back e + 4, division
// 2e; the entropy's branch log_softmax 8, logsumexp 24, product 12, sum 4, add 8, two products
// 12 + 8, in-place add 12 (88).
ActivationLedger VerlFusedTorchHead(Ctx& c, int x, int normed) {
  const double h = static_cast<double>(c.spec.hidden), v = static_cast<double>(c.spec.vocab_size);
  const std::string weight = HeadWeightModule(c);
  const bool entropy_grad = c.opt.entropy_from_logits;
  int out = c.g.Tensor("FusedLinearForPPO log_probs and entropy [T] (compute dtype)", 2 * c.e);
  c.g.Op("FusedLinearForPPO (torch, 512-row chunks)", {normed}, out, {normed});
  c.g.MarkComputeBound();
  const bool trains = recipes::AnyTrains(c, weight);
  c.g.SetParam(v * h, trains, true);
  ActivationLedger led = c.g.Run(x, out, c.t.input_requires_grad);
  const double upcast = c.e == kFp32 ? 0 : c.e + kFp32;
  ActivationLedger::FusedLoss& f = led.fused_loss;
  f.on = true;
  f.gradients_in_forward = false;
  f.fixed_chunk_rows = kVerlFusedChunkRows;
  f.chunk_row_bytes = v * std::max({2 * c.e, upcast, 4 * kFp32});
  f.chunk_traffic_per_token = v * (2 * c.e + upcast + 64);
  led.elementwise_traffic_per_token += f.chunk_traffic_per_token;
  f.live_per_token = led.saved_per_token + 2 * c.e;
  const double kept = (entropy_grad ? 5 : 4) * kFp32;  // logits, probs, one_hot, dlogits (log_probs)
  f.backward_chunk_row_bytes =
      v * std::max({2 * c.e, upcast, (entropy_grad ? 7 : 5) * kFp32, kept + (c.e == kFp32 ? c.e : 2 * c.e)});
  f.backward_dw_row_bytes = v * (kept - kFp32 + c.e) + c.e * h;
  f.backward_dw_bytes = c.e * v * h;
  f.backward_carry_bytes = c.e * v * h;      // the loop's `v` from the chunk before
  f.backward_carry_row_bytes = c.e * h;      // and its `h`
  f.backward_traffic_per_token = v * (4 * c.e + 2 * upcast + 40 + (entropy_grad ? 88 : 0));
  SHARDTUNE_CHECK(led.backward_profile.size() >= 2) << "the fused head's node has no backward point";
  f.backward_point = led.backward_profile[1];  // [0]: before any node; [1]: the fused node
  return led;
}

// TRL's chunked NLL (LossKernel::kTrlChunkedNll), SFTTrainer's default loss_type "chunked_nll",
// from huggingface/trl@f2cd577 trl/trainer/sft_trainer.py _chunked_cross_entropy_loss and _chunk:
//   hidden = hidden_states[..., :-1, :].reshape(-1, H)   # copies the non-contiguous slice
//   order = valid.to(torch.int8).argsort(descending=True, stable=True); hidden = hidden[order]
//   for each 256-token chunk: torch.utils.checkpoint.checkpoint(_chunk, h_chunk, w, ...,
//       use_reentrant=False), where _chunk runs logits = h.float() @ w.float().t(), log_softmax,
//       nll_loss, argmax and the entropy -(log_p.exp() * log_p).sum(-1).
// Judged with every token valid (full-sequence loss; completion-only losses gather fewer). The
// gather's copy [T, H] is the checkpoints' input, kept for backward, with IndexBackward's indices
// [T] int64; the reshape's copy is freed once gathered. A chunk saves nothing in forward; there it
// holds a fp32 copy of the weight [V, H], the chunk's fp32 input, and per row the fp32 logits,
// log_p, log_p.exp() and the entropy's product (16 bytes per vocabulary entry; soft-capping adds
// the divided logits and tanh). Backward reruns the chunk (the weight's fp32 copy again, saved by
// the matmul, and log_p and exp(log_p) saved for the metrics' and the loss's nodes), then holds
// d log_p and d logits (16 per entry); at the matmul's backward d logits, log_p and exp(log_p)
// (12), the chunk's fp32 d h [c, H] and, when the head trains, the fp32 d W [V, H] beside the
// weight's fp32 copy; the cast of d W to the weight's dtype comes after the copy is released.
// The weight's gradient summed over the chunks ([V, H], the weight's dtype) and the gathered
// input's ([T, H]: each chunk's SliceBackward0 makes zeros of the whole, added into the sum) are
// live from the second chunk on. All four GEMMs (logits, again in backward, d h, d W when the
// weight trains) run in fp32. Traffic per vocabulary entry and row: forward logits 4,
// log_softmax 8, exp 8, product 12, sum 4, argmax 4 (40); backward the rerun 40, nll's gradient 4
// and log_softmax's 12; per chunk the weight's fp32 copy (e + 4 per entry of [V, H], forward and
// again backward) and, when it trains, d W's cast back (4 + e), spread over the chunk's rows.
ActivationLedger TrlChunkedNllHead(Ctx& c, int x, int normed) {
  const double h = static_cast<double>(c.spec.hidden), v = static_cast<double>(c.spec.vocab_size);
  const double rows = static_cast<double>(kTrlChunkRows);
  const std::string weight = HeadWeightModule(c);
  const bool softcap = c.spec.final_logit_softcap > 0;
  int order = c.g.Tensor("order = argsort(valid) [T] int64 (IndexBackward's indices)", 8.0);
  c.g.Op("argsort of the label mask", {}, order, {});
  int gathered = c.g.Tensor("hidden[order] (the chunks' input, kept for backward)", c.e * h);
  // The reshape's copy is the gather's input only: forward scratch beside it.
  c.g.Op("reshape copy and gather hidden[order]", {normed, order}, gathered, {order});
  c.g.SetForwardWorkspace(c.e * h);
  int loss = c.g.Tensor("loss (summed over the checkpointed chunks)", 0.0);
  c.g.Op("chunked cross-entropy (256-token chunks, non-reentrant checkpoint)", {gathered}, loss, {gathered});
  const bool trains = FusedHeadNodeParam(c, weight);
  loss = WithRouterAuxLoss(c, loss);
  ActivationLedger led = c.g.Run(x, loss, c.t.input_requires_grad);
  ActivationLedger::FusedLoss& f = led.fused_loss;
  f.on = true;
  f.gradients_in_forward = false;
  f.fp32_gemms = true;
  f.fixed_chunk_rows = kTrlChunkRows;
  const double per_entry = 4 * kFp32 + (softcap ? 2 * kFp32 : 0.0);
  f.chunk_row_bytes = v * per_entry + kFp32 * h;
  f.chunk_fixed_bytes = kFp32 * v * h;
  const double weight_cast = (c.e + kFp32) * v * h / rows;  // per token: one cast per chunk
  f.chunk_traffic_per_token = v * (40 + (softcap ? 24 : 0)) + (c.e + kFp32) * h + weight_cast;
  led.elementwise_traffic_per_token += f.chunk_traffic_per_token;
  f.live_per_token = led.saved_per_token + c.e * h;
  f.backward_fixed_bytes = kFp32 * v * h;
  f.backward_chunk_row_bytes = v * per_entry + kFp32 * h;
  f.backward_dw_row_bytes = v * 3 * kFp32 + 2 * kFp32 * h;
  f.backward_dw_bytes = trains ? kFp32 * v * h : 0;
  f.backward_carry_bytes = trains ? c.e * v * h : 0;
  f.backward_carry_per_token = c.e * h;
  f.backward_head_gemms = trains ? 3.0 : 2.0;  // the logits again, d h and (training) d W
  f.backward_traffic_per_token =
      f.chunk_traffic_per_token + v * 16 + (trains ? (kFp32 + c.e) * v * h / rows : 0.0);
  SHARDTUNE_CHECK(led.backward_profile.size() >= 2) << "the chunked head's node has no backward point";
  f.backward_point = led.backward_profile[1];
  return led;
}

// verl's fused log-prob head, Triton backend (LossKernel::kVerlFusedTriton), from volcengine/verl@
// b178a3c verl/utils/kernel/linear_cross_entropy.py LinearCrossEntropy and kernels.py:
// efficient_entropy_forward allocates log-probs and entropy [T] fp32 (returned), maximum and
// accumulate_and_entropy_b [3T] fp32 (saved with the input and the weight), and the partials
// _max, _accu, _entropy_b [T, ceil(V / 1024)] fp32, freed on return; the logits exist only in
// the kernel's tiles. efficient_entropy_backward (BackwardEnum._Split_Dlogits_N, the default)
// allocates d_hidden = empty_like(hidden) (the input's gradient) and d_weight = empty_like(weight)
// (returned even when the weight is frozen, then dropped), and _d_logits [T, 9504] in the
// compute dtype, refilled per vocabulary split; from the second split on d_hidden += matmul(...)
// makes a [T, H] temporary, and when V is no multiple of 9504 the last split copies its columns
// (.contiguous()). One tensor stands for the returned and the saved [T] fp32 vectors (20 bytes
// per token; its gradient is counted at that size, 12 bytes per token over the two [T] ones).
// Traffic: forward's epilogue reads the partials and writes the five vectors; backward writes
// d_logits once per vocabulary entry and d_hidden's additions read and write [T, H] per split.
ActivationLedger VerlFusedTritonHead(Ctx& c, int x, int normed) {
  const int64_t vocab = c.spec.vocab_size;
  const double h = static_cast<double>(c.spec.hidden), v = static_cast<double>(vocab);
  const std::string weight = HeadWeightModule(c);
  const int64_t fwd_splits = (vocab + kVerlTritonForwardSplit - 1) / kVerlTritonForwardSplit;
  const int64_t bwd_splits = (vocab + kVerlTritonBackwardSplit - 1) / kVerlTritonBackwardSplit;
  const int64_t last = vocab - (bwd_splits - 1) * kVerlTritonBackwardSplit;
  const double split_cols = static_cast<double>(std::min(vocab, kVerlTritonBackwardSplit));
  const double partials = 3 * kFp32 * static_cast<double>(fwd_splits);
  int out = c.g.Tensor("linear_cross_entropy log_probs, entropy, maximum, accumulate, entropy_b [T] fp32",
                       5 * kFp32);
  // Backward scratch beside d_hidden: _d_logits, and at once the last split's copy or the [T, H]
  // product d_hidden += adds.
  double bwd_ws = c.e * split_cols;
  double extra = 0;
  if (bwd_splits > 1) extra = c.e * h;
  if (bwd_splits > 1 && last != kVerlTritonBackwardSplit) extra = std::max(extra, c.e * static_cast<double>(last));
  bwd_ws += extra;
  c.g.Op("linear_cross_entropy (Triton, efficient_entropy_forward)", {normed}, out, {normed, out}, bwd_ws);
  c.g.MarkComputeBound();
  c.g.SetForwardWorkspace(partials);
  const bool trains = recipes::AnyTrains(c, weight);
  c.g.SetParam(v * h, trains, true);
  ActivationLedger led = c.g.Run(x, out, c.t.input_requires_grad);
  ActivationLedger::FusedLoss& f = led.fused_loss;
  f.on = true;
  f.gradients_in_forward = false;
  f.chunk_traffic_per_token = partials + 5 * kFp32;
  led.elementwise_traffic_per_token += f.chunk_traffic_per_token;
  f.live_per_token = led.saved_per_token;
  f.backward_dw_bytes = trains ? 0 : c.e * v * h;  // a trained weight's is its gradient
  f.backward_traffic_per_token = c.e * v + (bwd_splits > 1 ? 3 * c.e * h * static_cast<double>(bwd_splits - 1) : 0);
  SHARDTUNE_CHECK(led.backward_profile.size() >= 2) << "the fused head's node has no backward point";
  f.backward_point = led.backward_profile[1];
  return led;
}

// TRL's per-token log-probabilities of the labels (LossKernel::kTrlLogps), trl@f2cd577
// trl/trainer/dpo_trainer.py _compute_loss and trl/trainer/utils.py selective_log_softmax:
//   outputs = model(**model_kwargs)
//   shift_logits = outputs.logits[..., :-1, :]                  # a view
//   per_token_logps = selective_log_softmax(shift_logits, shift_labels)
// `outputs` holds the logits [rows, S, V] (compute dtype) until _compute_loss returns, after the
// reference forward and the loss: through the forward's end. In bf16/fp16 a Python loop over the
// rows (iterating a tensor unbinds it): F.log_softmax(row) [S, V] (LogSoftmaxBackward0 saves its
// result), then gather of the label (saves only the index). Backward: per row GatherBackward0's
// zeros with the gradient scattered in and _log_softmax_backward_data's output; UnbindBackward0
// stacks every row's gradient into one [rows, S, V] once the last row's is made (the ledger's
// view node: the rows' gradients live while the stacked one is allocated), and SliceBackward0
// writes that into zeros of the unshifted logits' shape. In fp32: gather, then per row
// logsumexp(row) (LogsumexpBackward0 saves its input, a row view of the logits, and its result),
// their difference: the logits are saved; logsumexp's backward makes exp(row - lse) per row.
// Under no_grad (the reference's forward) nothing is saved and each row's log-softmax is freed
// after its gather: one row's [S, V] at a time, bytes per token / rows.
ActivationLedger TrlLogpsHead(Ctx& c, int x, int normed) {
  const double v = static_cast<double>(c.spec.vocab_size);
  const double rows = static_cast<double>(std::max<int64_t>(1, c.opt.logps_rows));
  int logits = HeadLogits(c, normed);
  c.g.HoldThroughForward(logits);
  int lp = c.g.Tensor("per-token log-probs [rows, S]", c.e == kFp32 ? kFp32 : c.e);
  if (c.opt.no_grad) {
    int row = c.g.Tensor("log_softmax of one row [S, V] (no_grad: freed after its gather)", c.e * v / rows);
    c.g.Op("selective_log_softmax: log_softmax of a row", {logits}, row, {});
    c.g.Op("selective_log_softmax: gather", {row}, lp, {});
    return c.g.Run(x, lp, c.t.input_requires_grad);
  }
  std::vector<int> shifted = c.g.Views(logits, {"shift_logits (logits[..., :-1, :])"}, {c.e * v});
  std::vector<int> row_views = c.g.Views(shifted[0], {"shift_logits rows (unbind)"}, {c.e * v});
  if (c.e == kFp32) {
    int sel = c.g.Tensor("gather(logits, labels)", kFp32);
    c.g.Op("selective_log_softmax: gather", {shifted[0]}, sel, {});
    int lse = c.g.Tensor("logsumexp per row [rows, S]", kFp32);
    c.g.Op("selective_log_softmax: logsumexp per row", {row_views[0]}, lse, {row_views[0], lse}, kFp32 * v / rows);
    c.g.Op("selected - logsumexp", {sel, lse}, lp, {});
  } else {
    int ls = c.g.Tensor("log_softmax(row) outputs [rows, S, V]", c.e * v);
    c.g.Op("selective_log_softmax: log_softmax per row", {row_views[0]}, ls, {ls});
    c.g.Op("selective_log_softmax: gather", {ls}, lp, {});
  }
  // The DPO loss: masks, sums over the sequence, log-sigmoid of the margins ([rows] tensors).
  int loss = c.g.Tensor("loss", 0.0);
  c.g.Op("DPO loss over the summed log-probs", {lp}, loss, {});
  loss = WithRouterAuxLoss(c, loss);
  return c.g.Run(x, loss, c.t.input_requires_grad);
}

// A value head (ModelSpec::value_head; verl's critic, verl/workers/critic/dp_critic.py
// _forward_micro_batch): score = Linear(H, 1) on the final norm's output (dropout p 0 returns its
// input), values [T, 1] in the compute dtype, and the value loss over [B, response] tokens
// (core_algos.py compute_value_loss: clipped squared errors, a few 4-byte tensors per token, of
// which the clip's comparison saves one). No vocabulary anywhere.
ActivationLedger ValueHead(Ctx& c, int x, int normed) {
  int values = Linear(c, normed, 1, "score", "score");
  int loss = c.g.Tensor("value loss terms [T] fp32", kFp32);
  c.g.Op("value loss (clipped squared error)", {values}, loss, {values});
  return c.g.Run(x, loss, c.t.input_requires_grad);
}

}  // namespace

ActivationLedger ComputeHeadActivations(const ModelSpec& spec, const ActivationOptions& opt,
                                        const Trainability& trainability) {
  Ctx c{AutogradLedger(), static_cast<double>(BytesPerElement(opt.dtype)), spec, opt,
        trainability, {}};
  double h = static_cast<double>(spec.hidden), v = static_cast<double>(spec.vocab_size);
  int x = c.g.Tensor("final norm input", c.e * h);
  int normed = Norm(c, x, h, "final norm", "model.norm");
  if (spec.value_head) return ValueHead(c, x, normed);
  if (opt.loss_kernel == LossKernel::kFusedLinear) return FusedLinearHead(c, x, normed);
  if (opt.loss_kernel == LossKernel::kVerlFlashCe) return VerlFlashCeHead(c, x, normed);
  if (opt.loss_kernel == LossKernel::kVerlPaddedCe) return VerlPaddedCeHead(c, x, normed);
  if (opt.loss_kernel == LossKernel::kVerlFusedTorch) return VerlFusedTorchHead(c, x, normed);
  if (opt.loss_kernel == LossKernel::kVerlFusedTriton) return VerlFusedTritonHead(c, x, normed);
  if (opt.loss_kernel == LossKernel::kTrlChunkedNll) return TrlChunkedNllHead(c, x, normed);
  if (opt.loss_kernel == LossKernel::kTrlLogps) return TrlLogpsHead(c, x, normed);
  int logits = HeadLogits(c, normed);
  c.g.HoldThroughForward(logits);
  if (opt.keep_logits) c.g.HoldByCaller(logits);
  // HF ForCausalLMLoss: logits = logits.float(); torchtitan: cross_entropy(pred.float(), ...).
  int l32 = opt.loss_fp32_upcast
                ? CastUnlessFp32(c, logits, kFp32 * v, "logits.float()", "upcast logits")
                : logits;
  // F.cross_entropy = log_softmax (saves its output) + nll_loss (saves only targets).
  double ls_bytes = (l32 == logits ? c.e : kFp32) * v;
  int ls = c.g.Tensor("log_softmax output", ls_bytes);
  c.g.Op("log_softmax", {l32}, ls, {ls});
  int loss = c.g.Tensor("loss", 0.0);
  c.g.Op("nll_loss", {ls}, loss, {});
  if (spec.moe.enabled() && spec.moe.router_aux_loss && opt.modeling == Modeling::kHf) {
    loss = RouterAuxLoss(c, loss);
  }
  ActivationLedger led = c.g.Run(x, loss, trainability.input_requires_grad);
  for (auto& t : led.saved) {
    bool is_logits = t.name == "lm_head output" || t.name == "softcapped logits";
    if (is_logits && opt.keep_logits) t.name = "logits held by the caller";
  }
  return led;
}

std::array<bool, kSacMatmuls> SacUncountedProjections(const ModelSpec& spec) {
  const bool mlp = spec.mlp_bias || spec.moe.enabled();  // aten.addmm, or the experts' _grouped_mm
  return {spec.qkv_bias, spec.qkv_bias, spec.qkv_bias, spec.attn_out_bias, mlp, mlp, mlp};
}

SacSave ResolveSacSave(SacSave save, const std::array<bool, kSacMatmuls>& uncounted, bool sdpa) {
  if (save != kTorchtitanSacSave) return save & kSacAll;
  SacSave out = sdpa ? kSacSdpaBit : 0;
  int mm_count = 0;
  for (int i = 0; i < kSacMatmuls; ++i) {
    if (!uncounted[static_cast<size_t>(i)] && ++mm_count % 2 == 1) out |= SacSave{1} << i;
  }
  return out;
}

SacSave BlockActivations::SacOps(SacSave save) const {
  std::array<bool, kSacMatmuls> uncounted{};
  for (int i = 0; i < kSacMatmuls; ++i) uncounted[static_cast<size_t>(i)] = sac_ops[static_cast<size_t>(i)].uncounted;
  return ResolveSacSave(save, uncounted, sac_sdpa);
}

double BlockActivations::SacSavedPerToken(SacSave save) const {
  const SacSave ops = SacOps(save);
  double saved = checkpoint_input_per_token;  // the block input (the checkpoint's rerun needs it)
  for (int i = 0; i < kSacOps; ++i) {
    if ((ops & (SacSave{1} << i)) != 0) saved += sac_ops[static_cast<size_t>(i)].output_per_token;
  }
  return saved;
}

double BlockActivations::SacRecomputeMatmulFlopsPerToken(SacSave save) const {
  const SacSave ops = SacOps(save);
  double flops = sac_rerun_matmul_flops_per_token;
  for (int i = 0; i < kSacMatmuls; ++i) {
    if ((ops & (SacSave{1} << i)) == 0) flops += sac_ops[static_cast<size_t>(i)].recompute_matmul_flops_per_token;
  }
  return flops;
}

double BlockActivations::SacRecomputeAttention(SacSave save) const {
  return sac_sdpa && (SacOps(save) & kSacSdpaBit) != 0 ? 0.0 : 1.0;
}

std::vector<std::string> OpSacProblems(const ModelSpec& spec, const Plan& plan, const std::string& where) {
  if (!ExplicitSacSave(plan)) return {};
  const ActivationOptions o = ActivationOptionsFor(plan, plan.ResolvedSeqLen(spec.max_seq_len));
  const bool full_finetune = plan.Trains() && !plan.lora.enabled() && plan.frozen_prefixes.empty();
  if (full_finetune && plan.tiled_mlp_shards <= 1 && TorchtitanOpSacApplies(spec, o, Trainability{})) return {};
  return {where + ":/checkpointing: expected an op-level SAC save set only for a SwiGLU block with separate "
          "q/k/v and gate/up projections (dense, or an MoE of routed experts only with a softmax router and "
          "--ep 1) under --modeling torchtitan, trained in full, without Ulysses or a tiled MLP (other blocks "
          "run selective or full checkpointing), got " + CheckpointingSpecToString(plan) + " for " + spec.name};
}

}  // namespace shardtune::model
