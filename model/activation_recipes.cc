// Op-by-op recipes of a block's projections (with PEFT LoRA adapters), norms and attention
// sublayer: what autograd saves for backward in HF transformers (modeling_llama.py,
// modeling_gpt2.py) and torchtitan (models/llama3/model/model.py), per token, e = bytes of the
// compute dtype. activations.cc assembles blocks and the head from them.
#include "model/activation_recipes.h"

#include <algorithm>

#include "model/context_parallel.h"

namespace shardtune::model::recipes {
namespace {

bool Has(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// PEFT LoraLayer Linear.forward (peft/tuners/lora/layer.py): result = base_layer(x); then
// result = result + lora_B(lora_A(dropout(x))) * scaling. lora_dropout 0 is nn.Identity and
// _cast_input_dtype returns x itself when its dtype is lora_A's (FSDP2 gathers the adapters in
// param_dtype like the base), so A's input is the base's input tensor. Each mm saves its input
// for its weight's gradient only; `* scaling` (a Python float, mul.Scalar) and the add save
// nothing per token. `copies`: routed copies per token (MoE experts: top_k).
//
// lora_dropout p > 0 is nn.Dropout, F.dropout -> native_dropout(x, p, train) returning the dropped
// copy and a bool mask (aten/src/ATen/native/Dropout.cpp; the fused CUDA kernel writes the mask
// as bool, 1 byte per element); derivatives.yaml "input: native_dropout_backward(grad, result1,
// ...)" saves the mask for the input's gradient only. Each adapter has its own dropout module, so
// each target projection keeps its own dropped copy (saved by its A) and mask.
int LoraAdapter(Ctx& c, int x, int base, double out, double copies, const std::string& name) {
  double r = c.t.lora_rank, in = c.g.BytesPerToken(x) / c.e / copies;
  int a_input = x;
  if (c.t.lora_dropout > 0) {
    int mask = c.g.Tensor(name + ".lora_dropout mask", 1.0 * in * copies);
    c.g.Op(name + ".lora_dropout mask (bernoulli)", {}, mask, {});  // needs no gradient
    a_input = c.g.Tensor(name + ".lora_dropout output", c.e * in * copies);
    c.g.Op(name + ".lora_dropout", {x, mask}, a_input, {{mask, 0}});
  }
  int a = c.g.Tensor(name + ".lora_A output", c.e * r * copies);
  c.g.Op(name + ".lora_A", {a_input}, a, {{a_input, SavedFor::kParamGrad}});
  c.g.MarkComputeBound();
  c.g.SetParam(r * in);
  int b = c.g.Tensor(name + ".lora_B output", c.e * out);
  c.g.Op(name + ".lora_B", {a}, b, {{a, SavedFor::kParamGrad}});
  c.g.MarkComputeBound();
  c.g.SetParam(out / copies * r);
  int scaled = c.g.Tensor(name + ".lora_B output * scaling", c.e * out);
  c.g.Op(name + ".lora scaling", {b}, scaled, {});
  int y = c.g.Tensor(name + " output", c.e * out);
  c.g.Op(name + " + lora", {base, scaled}, y, {});
  return y;
}

}  // namespace

int CastUnlessFp32(Ctx& c, int x, double bytes, const std::string& tensor, const std::string& op) {
  if (c.e == kFp32) return x;
  int y = c.g.Tensor(tensor, bytes);
  c.g.Op(op, {x}, y, {});
  return y;
}

bool WeightTrains(const Ctx& c, const std::string& m) {
  return c.t.all_params_train || Has(c.t.trainable, m + ".weight");
}

bool AnyTrains(const Ctx& c, const std::string& m) {
  if (c.t.all_params_train) return true;
  std::string prefix = m + ".";
  return std::any_of(c.t.trainable.begin(), c.t.trainable.end(), [&](const std::string& p) {
    return p.compare(0, prefix.size(), prefix) == 0;
  });
}

// nn.Linear / Conv1D (mm / addmm; F.linear folds [B, S, in] into an mm): derivatives.yaml
// "mat1: mm_mat1_backward(grad, mat2, mat1.sym_sizes(), ...)", "mat2: mm_mat2_backward(grad,
// mat1, ...)": the input is saved for the weight's gradient only (and the weight, a parameter,
// for the input's). `module`: the HF module it belongs to (model/module_tree.cc names).
int Linear(Ctx& c, int x, double out_features, const std::string& name, const std::string& module,
           double copies) {
  bool lora = Has(c.t.lora_modules, module);
  bool adapter_here = lora && c.lora_done.insert(module).second;
  // GPT-2's fused c_attn is recorded as three projections: its adapter (on the first) makes the
  // whole module's output require grad.
  bool requires_grad = AnyTrains(c, module) || (lora && !adapter_here);
  int y = c.g.Tensor(name + (adapter_here ? " base output" : " output"), c.e * out_features);
  c.g.Op(name, {x}, y, {{x, SavedFor::kParamGrad}});
  c.g.MarkComputeBound();
  // Its backward allocates dW [out, in] (addmm_backward: mat1.t() @ grad) when the weight trains.
  c.g.SetParam(out_features * c.g.BytesPerToken(x) / c.e, WeightTrains(c, module), requires_grad);
  if (adapter_here) y = LoraAdapter(c, x, y, out_features, copies, name);
  return y;
}

namespace {

// HF LlamaRMSNorm.forward: x.to(fp32); pow(2).mean; x * rsqrt(var + eps); weight * x.to(dtype).
// pow and mul save the fp32 copy, rsqrt saves its [.., 1] output, the weight mul saves x_hat
// for the weight's gradient only (mul.Tensor: "self: mul_tensor_backward(grad, other, ...)").
// torchtitan (nn.RMSNorm -> fused F.rms_norm in torch >= 2.8) saves the input and rstd only, for
// its one "input, weight" formula (whenever the node exists).
// `rows`: the rows normalised per token, each with its own variance and rsqrt (1; a per-head q or
// k norm: the heads), `dim` the elements of all of them; the parameter has dim / rows elements.
int RmsNorm(Ctx& c, int x, double dim, const std::string& name, const std::string& module,
            double rows = 1) {
  bool w = WeightTrains(c, module), any = AnyTrains(c, module);
  const double param = dim / rows;
  if (c.opt.liger.rms_norm && c.opt.modeling == Modeling::kHf &&
      (module == "input_layernorm" || module == "post_attention_layernorm" || module == "model.norm")) {
    // LigerRMSNorm (Liger-Kernel ops/rms_norm.py LigerRMSNormFunction, casting mode llama): one
    // kernel writes Y and an fp32 rstd per row; it saves X and RSTD; in_place=True writes dX into
    // dY. Only the modules _apply_liger_kernel_to_instance patches on a loaded model (the decoder
    // layers' two norms and the final norm); q_norm / k_norm instances stay Hugging Face's.
    int rstd = c.g.Tensor(name + " RSTD (fp32, Liger)", kFp32 * rows);
    c.g.Op(name + " Liger rstd", {}, rstd, {});
    int y = c.g.Tensor(name + " output (Liger)", c.e * dim);
    c.g.Op(name + " LigerRMSNormFunction", {x}, y, {x, rstd});
    c.g.MarkInPlaceBackward();
    c.g.SetParam(param, w, any);
    return y;
  }
  if (c.opt.modeling == Modeling::kTorchtitan) {
    int rstd = c.g.Tensor(name + " rstd (fp32)", kFp32 * rows);
    int y = c.g.Tensor(name + " output", c.e * dim);
    c.g.Op(name + " fused rms_norm", {x}, rstd, {});
    c.g.Op(name + " apply", {x, rstd}, y, {x, rstd});
    c.g.SetParam(param, w, any);
    return y;
  }
  int x32 = CastUnlessFp32(c, x, kFp32 * dim, name + " fp32 copy of input", name + " to(float32)");
  int sq = c.g.Tensor(name + " x^2 (fp32)", kFp32 * dim);
  c.g.Op(name + " pow", {x32}, sq, {x32});
  int var = c.g.Tensor(name + " variance", kFp32 * rows);
  c.g.Op(name + " mean", {sq}, var, {});
  // variance + eps: its own kernel (aten::add between aten::mean and aten::rsqrt in the H100
  // profiler trace of HF Llama, 2026-11-26), which saves nothing.
  int var_eps = c.g.Tensor(name + " variance + eps", kFp32 * rows);
  c.g.Op(name + " add eps", {var}, var_eps, {});
  int rs = c.g.Tensor(name + " rsqrt", kFp32 * rows);
  c.g.Op(name + " rsqrt", {var_eps}, rs, {rs});
  int n32 = c.g.Tensor(name + " normalized (fp32)", kFp32 * dim);
  c.g.Op(name + " mul", {x32, rs}, n32, {{x32, 1}, {rs, 0}});
  if (c.spec.norm_weight_fp32 || c.spec.norm_unit_offset) {
    // OLMo 2's Olmo2RMSNorm: (weight * x).to(input_dtype). The bf16 weight times the fp32 x_hat
    // promotes to fp32, and mul.Tensor saves the fp32 x_hat for the weight's gradient only.
    // Gemma's RMSNorm: (x_hat * (1.0 + weight.float())).type_as(x): the same fp32 product.
    int y32 = c.g.Tensor(name + " weight * normalized (fp32)", kFp32 * dim);
    c.g.Op(name + " weight mul (fp32)", {n32}, y32, {{n32, SavedFor::kParamGrad}});
    c.g.SetParam(param, w, any);
    return CastUnlessFp32(c, y32, c.e * dim, name + " output", name + " to(dtype)");
  }
  int nb = CastUnlessFp32(c, n32, c.e * dim, name + " normalized", name + " to(dtype)");
  int y = c.g.Tensor(name + " output", c.e * dim);
  c.g.Op(name + " weight mul", {nb}, y, {{nb, SavedFor::kParamGrad}});
  c.g.SetParam(param, w, any);
  return y;
}

// torch.nn.functional.layer_norm (native kernel): saves input, mean and rstd (fp32 per row) for
// its one "input, weight, bias: native_layer_norm_backward" formula, whenever the node exists.
int LayerNorm(Ctx& c, int x, double dim, const std::string& name, const std::string& module) {
  int stats = c.g.Tensor(name + " mean+rstd (fp32)", 2 * kFp32);
  int y = c.g.Tensor(name + " output", c.e * dim);
  c.g.Op(name + " stats", {x}, stats, {});
  c.g.Op(name, {x, stats}, y, {x, stats});
  c.g.SetParam(2 * dim, AnyTrains(c, module), AnyTrains(c, module));  // weight and bias
  return y;
}

}  // namespace

int Norm(Ctx& c, int x, double dim, const std::string& name, const std::string& module) {
  return c.spec.norm == NormKind::kRmsNorm ? RmsNorm(c, x, dim, name, module)
                                           : LayerNorm(c, x, dim, name, module);
}

namespace {

// Rotary embedding. HF apply_rotary_pos_emb: (q * cos) + (rotate_half(q) * sin). cos/sin come
// from the no-grad rotary module, so each mul saves only cos or sin (autograd saves `self` of a
// mul only when `other` needs a gradient: tools/autograd/derivatives.yaml, mul.Tensor), which
// are shared by all layers [S, d] tensors, negligible: rope keeps nothing per token. torchtitan
// apply_rotary_emb: view_as_complex(x.float()) * freqs_cis saves freqs_cis only, likewise.
// Measured on an H100 (tests/data/validation/fsdp2_h100_measured.json): HF Llama saves
// 20H + 4H_kv + 8I bytes per token per layer in bf16 with SDPA, no rope term.
// `consts` >= 0: a per-layer cos/sin tensor the muls save (M-RoPE's sections, below).
int Rope(Ctx& c, int x, double dim, const std::string& name, int consts = -1) {
  if (c.opt.liger.rope && c.opt.modeling == Modeling::kHf) {
    // liger_rotary_pos_emb (Liger-Kernel ops/rope.py LigerRopeFunction): q and k are rotated in
    // their own storage (transpose back to the projection's layout, contiguous: no copy) and
    // only cos and sin are saved; the result is a view of the input.
    return c.g.Views(x, {name + " rotated in place (Liger rope)"}, {c.e * dim})[0];
  }
  int y = c.g.Tensor(name + " after rope", c.e * dim);
  if (c.opt.modeling == Modeling::kTorchtitan) {
    int xc = c.g.Tensor(name + " fp32 complex copy", kFp32 * dim);
    c.g.Op(name + " float()", {x}, xc, {});
    c.g.Op(name + " complex mul", {xc}, y, {});
    return y;
  }
  int xcos = c.g.Tensor(name + " * cos", c.e * dim);
  c.g.Op(name + " mul cos", {x}, xcos, consts >= 0 ? std::vector<SavedFor>{consts} : std::vector<SavedFor>{});
  // rotate_half: torch.cat((-x2, x1), dim=-1) over the halves (views): a neg kernel over one
  // half, then the cat (aten::neg, aten::cat in the H100 trace); neither saves anything.
  int neg = c.g.Tensor(name + " -x2", c.e * dim / 2);
  c.g.Op(name + " rotate_half (neg)", {x}, neg, {});
  int rot = c.g.Tensor(name + " rotate_half", c.e * dim);
  c.g.Op(name + " rotate_half (cat)", {neg, x}, rot, {});
  int rsin = c.g.Tensor(name + " rotate_half * sin", c.e * dim);
  c.g.Op(name + " mul sin", {rot}, rsin, {});
  c.g.Op(name + " add", {xcos, rsin}, y, {});
  return y;
}

// Phi-3's apply_rotary_pos_emb (modeling_phi3.py): q_rot, q_pass = q[..., :rotary_dim],
// q[..., rotary_dim:] (views); torch.cat([(q_rot * cos) + (rotate_half(q_rot) * sin), q_pass]):
// the rotation of HF Rope above over rotary_dim = partial_rotary_factor x head_dim, then one more
// copy, the cat, which saves nothing (cat's backward slices the gradient).
int PartialRope(Ctx& c, int x, double dim, const std::string& name) {
  double f = c.spec.rotary_fraction;
  std::vector<int> parts =
      f < 1 ? c.g.Views(x, {name + " rotated part", name + " passed part"},
                        {c.e * dim * f, c.e * dim * (1 - f)})
            : c.g.Views(x, {name + " rotated part"}, {c.e * dim});
  int rotated = Rope(c, parts[0], dim * f, name);
  std::vector<int> cat_inputs{rotated};
  if (f < 1) cat_inputs.push_back(parts[1]);
  int y = c.g.Tensor(name + " cat(rotated, passed)", c.e * dim);
  c.g.Op(name + " cat", cat_inputs, y, {});
  return y;
}

// Attention core. SDPA flash/efficient kernels save q, k, v, the output (in [B, S, a, d] memory,
// so the transpose+contiguous before o_proj is free) and the fp32 logsumexp [B, a, S]; the
// backward allocates an fp32 dq accumulator (flash_api.cpp mha_bwd dq_accum) and, with GQA,
// expanded dk/dv. Its derivative is one formula for "query, key, value" (derivatives.yaml
// _scaled_dot_product_flash_attention), which gen_variable_type.py guard_for does not guard, so
// all five are saved whenever any of q, k, v requires grad. Eager (HF eager_attention_forward):
// matmul, softmax in fp32 then cast, matmul; each matmul saves one factor per other's gradient.
// `kv_heads`: KV heads as the kernel sees them (repeated for Ulysses when cp > num_kv_heads).
// MLA (model_spec.h MlaSpec): values and output are v_dim wide, q and k q_dim.
int AttentionKernel(Ctx& c, int q, int k, int v, int kv_heads, const std::string& name) {
  const ModelSpec& s = c.spec;
  double qd = static_cast<double>(s.q_dim()), od = static_cast<double>(s.v_dim());
  int out = c.g.Tensor(name + " output", c.e * od);
  if (c.opt.attention == Attention::kSdpa) {
    int lse = c.g.Tensor(name + " logsumexp (fp32)", kFp32 * s.num_heads);
    double ws = kFp32 * qd + (kv_heads != s.num_heads ? 2 * c.e * qd : 0.0);
    c.g.Op(name + " flash forward (lse)", {q, k, v}, lse, {});
    c.g.MarkComputeBound();
    c.g.Op(name + " sdpa", {q, k, v, lse}, out, {q, k, v, lse, out}, ws);
    c.g.MarkComputeBound();
    if (s.attention_sinks && c.opt.modeling == Modeling::kTorchtitan) {
      // torchtitan's GPT-OSS (models/gpt_oss/model.py apply_attention_sink_rescale, the
      // out_transform of its varlen / flex attention): out * sigmoid(lse - sinks).to(out.dtype).
      // The subtraction saves nothing, sigmoid saves its fp32 output [a], the product saves the
      // attention output (already saved by the kernel) and the cast scale [a]; its new [a·v]
      // output is what wo saves.
      const double a = s.num_heads;
      int diff = c.g.Tensor(name + " lse - sinks (fp32)", kFp32 * a);
      c.g.Op(name + " lse - sinks", {lse}, diff, {});
      int sig = c.g.Tensor(name + " sigmoid(lse - sinks) (fp32)", kFp32 * a);
      c.g.Op(name + " sink sigmoid", {diff}, sig, {sig});
      const std::string to_dtype = name + " sink scale to(dtype)";
      int scale = CastUnlessFp32(c, sig, c.e * a, to_dtype, to_dtype);
      int rescaled = c.g.Tensor(name + " output * sink scale", c.e * od);
      c.g.Op(name + " sink rescale", {out, scale}, rescaled, {{out, 1}, {scale, 0}});
      return rescaled;
    }
    return out;
  }
  double scores = static_cast<double>(s.num_heads) * static_cast<double>(c.opt.seq_len);
  int kr = k, vr = v;
  if (kv_heads != s.num_heads) {  // repeat_kv materialises [B, a, S, d] copies
    kr = c.g.Tensor(name + " repeat_kv(k)", c.e * qd);
    c.g.Op(name + " repeat_kv k", {k}, kr, {});
    vr = c.g.Tensor(name + " repeat_kv(v)", c.e * qd);
    c.g.Op(name + " repeat_kv v", {v}, vr, {});
  }
  if (kv_heads == s.num_heads && s.fused_qkv && s.positions == PositionKind::kRotary) {
    // A fused qkv (Phi-3's qkv_proj, the Qwen vision towers' attn.qkv) whose q and k were rotated
    // into new tensors: v is still a transposed view of the projection's output, and eager's
    // torch.matmul folds it into [B·h, S, d] with reshape, a contiguous copy, which bmm saves.
    // Nothing then keeps the fused output (SDPA and flash attention take the view itself, and
    // keep it: above).
    vr = c.g.Tensor(name + " v (matmul's contiguous copy of the qkv view)", c.e * static_cast<double>(s.v_dim()));
    c.g.Op(name + " v reshape", {v}, vr, {});
  }
  int sc = c.g.Tensor(name + " scores q@k^T", c.e * scores);
  c.g.Op(name + " matmul qk", {q, kr}, sc, {{q, 1}, {kr, 0}});
  c.g.MarkComputeBound();
  if (s.attn_logit_softcap > 0) {
    // Gemma 2's eager_attention_forward: scores / softcap, tanh (saves its output), * softcap.
    int div = c.g.Tensor(name + " scores / softcap", c.e * scores);
    c.g.Op(name + " softcap divide", {sc}, div, {});
    int th = c.g.Tensor(name + " tanh(scores / softcap)", c.e * scores);
    c.g.Op(name + " softcap tanh", {div}, th, {th});
    sc = c.g.Tensor(name + " softcapped scores", c.e * scores);
    c.g.Op(name + " softcap multiply", {th}, sc, {});
  }
  if (s.attention_sinks) {
    // GPT-OSS's eager_attention_forward: scores * scaling + causal_mask; cat([scores, sinks]) one
    // column more per row; minus its row max; softmax in the compute dtype (saves its output);
    // scores = probs[..., :-1] (a view: probs @ v keeps the whole softmax output).
    double with_sink = static_cast<double>(s.num_heads) * (static_cast<double>(c.opt.seq_len) + 1);
    int masked = c.g.Tensor(name + " scaled+masked scores", c.e * scores);
    c.g.Op(name + " scale+mask", {sc}, masked, {});
    int cat = c.g.Tensor(name + " cat(scores, sinks)", c.e * with_sink);
    c.g.Op(name + " cat sinks", {masked}, cat, {});
    int shifted = c.g.Tensor(name + " minus row max", c.e * with_sink);
    c.g.Op(name + " subtract max", {cat}, shifted, {});
    int probs = c.g.Tensor(name + " softmax (with sinks)", c.e * with_sink);
    c.g.Op(name + " softmax", {shifted}, probs, {probs});
    int kept = c.g.Views(probs, {name + " probs[..., :-1]"}, {c.e * scores})[0];
    int o = c.g.Tensor(name + " probs@v", c.e * od);
    c.g.Op(name + " matmul pv", {kept, vr}, o, {{kept, 1}, {vr, 0}});
    c.g.MarkComputeBound();
    c.g.Op(name + " transpose.contiguous", {o}, out, {});
    return out;
  }
  int sm = c.g.Tensor(name + " scaled+masked scores", c.e * scores);
  c.g.Op(name + " scale+mask", {sc}, sm, {});
  int p32 = c.g.Tensor(name + " softmax (fp32)", kFp32 * scores);
  c.g.Op(name + " softmax", {sm}, p32, {p32});
  // .to(query.dtype): a new tensor in bf16/fp16; in fp32 the softmax output itself (Tensor.to
  // returns self when the dtype already matches), so probs @ v saves the same tensor.
  int p = CastUnlessFp32(c, p32, c.e * scores, name + " probs", name + " probs to(dtype)");
  int o = c.g.Tensor(name + " probs@v", c.e * od);
  c.g.Op(name + " matmul pv", {p, vr}, o, {{p, 1}, {vr, 0}});
  c.g.MarkComputeBound();
  c.g.Op(name + " transpose.contiguous", {o}, out, {});
  return out;
}

// HF flash_attention_2 with a padding mask (Plan::padding_mask; transformers
// modeling_flash_attention_utils.py _flash_attention_forward): _upad_input gathers q, k and v to
// the real tokens (index_first_axis: copies whose autograd nodes save only the indices), the
// varlen kernel saves those copies, its output and the logsumexp, and pad_input scatters the
// output into a new zero-padded tensor (IndexPutFirstAxis: saves the indices), the one o_proj
// reads and saves. Counted at the worst case, every position a real token: the kernel's saved
// set as without a mask, plus the padded output.
int AttentionCore(Ctx& c, int q, int k, int v, int kv_heads, const std::string& name) {
  int out = AttentionKernel(c, q, k, v, kv_heads, name);
  if (!c.opt.padding_mask || c.opt.attention != Attention::kSdpa) return out;
  int padded = c.g.Tensor(name + " pad_input(output) (padding mask)", c.g.BytesPerToken(out));
  c.g.Op(name + " pad_input", {out}, padded, {});
  return padded;
}

// verl utils/ulysses.py all_to_all_tensor: tensor_split + contiguous copies (the send chunks),
// empty_like receive chunks, dist.all_to_all, torch.cat (+ contiguous) into the result. Per slice
// token each buffer is `dim` elements; the input dies after the split unless something saved it.
int UlyssesAllToAll(Ctx& c, int x, double dim, const std::string& name) {
  int send = c.g.Tensor(name + " all-to-all send chunks", c.e * dim);
  c.g.Op(name + " tensor_split.contiguous", {x}, send, {});
  int recv = c.g.Tensor(name + " all-to-all receive chunks", c.e * dim);
  c.g.Op(name + " all_to_all", {send}, recv, {});
  c.g.MarkComputeBound();  // NCCL moves these bytes on the all-to-all stream, not the compute one
  int out = c.g.Tensor(name + " after all-to-all", c.e * dim);
  c.g.Op(name + " cat", {recv}, out, {});
  return out;
}

// DeepseekV3Attention.forward (modeling_deepseek_v3.py; model_spec.h MlaSpec), per token:
// q = q_b_proj(q_a_layernorm(q_a_proj(x))) [a·qk] (each projection saves its input, the norm as
// LlamaRMSNorm); q_pass and q_rot are views of it. compressed_kv = kv_a_proj_with_mqa(x)
// [kv_lora + rope]: the latent view goes through kv_a_layernorm (its fp32 copy is a new tensor)
// into kv_b_proj [a·(nope + v)], whose output is viewed as k_pass and value_states; the rope view
// k_rot [rope] is one head's, rotated and expanded (a view) to every head. Rotation saves nothing
// per token (Rope); DeepseekV3Config's rope_interleave first reshapes q_rot and k_rot into a copy
// (apply_rotary_pos_emb_interleave: view, transpose, reshape), which saves nothing either.
// query_states = cat(q_pass, q_rot) and key_states = cat(k_pass, k_rot) are new [a·qk] tensors
// (cat saves no input). Attention keeps query and key, and value_states, a view of kv_b_proj's
// output: the whole [a·(nope + v)] stays. With SDPA the q/k and v head dims differ (192 vs 128 in
// V3), which flash attention refuses (sdp_utils.cpp check_head_dim_size_flash) and the
// memory-efficient kernel takes; both save q, k, v, output and the fp32 logsumexp. o_proj saves
// the [a·v] output.
int MlaSublayer(Ctx& c, int x) {
  const ModelSpec& s = c.spec;
  const MlaSpec& m = s.mla;
  const double a = s.num_heads, qd = static_cast<double>(s.q_dim());
  const double nope = static_cast<double>(m.qk_nope_head_dim);
  const double rope = static_cast<double>(m.qk_rope_head_dim);
  const double kvl = static_cast<double>(m.kv_lora_rank), ql = static_cast<double>(m.q_lora_rank);
  int q;
  if (m.q_lora_rank > 0) {
    int qa = Linear(c, x, ql, "attn.q_a_proj", "self_attn.q_a_proj");
    int qn = Norm(c, qa, ql, "attn.q_a_layernorm", "self_attn.q_a_layernorm");
    q = Linear(c, qn, qd, "attn.q_b_proj", "self_attn.q_b_proj");
  } else {
    q = Linear(c, x, qd, "attn.q_proj", "self_attn.q_proj");
  }
  std::vector<int> qs = c.g.Views(q, {"attn.q_pass", "attn.q_rot"}, {c.e * a * nope, c.e * a * rope});
  int ckv = Linear(c, x, kvl + rope, "attn.kv_a_proj_with_mqa", "self_attn.kv_a_proj_with_mqa");
  std::vector<int> ks = c.g.Views(ckv, {"attn.kv latent", "attn.k_rot"}, {c.e * kvl, c.e * rope});
  int latent = Norm(c, ks[0], kvl, "attn.kv_a_layernorm", "self_attn.kv_a_layernorm");
  int kvb = Linear(c, latent, a * (nope + static_cast<double>(m.v_head_dim)), "attn.kv_b_proj",
                   "self_attn.kv_b_proj");
  std::vector<int> kv = c.g.Views(kvb, {"attn.k_pass", "attn.value_states"},
                                  {c.e * a * nope, c.e * static_cast<double>(s.v_dim())});
  int q_rot = qs[1], k_rot = ks[1];
  if (c.opt.modeling == Modeling::kHf) {
    int qi = c.g.Tensor("attn.q_rot interleaved (reshape copy)", c.e * a * rope);
    c.g.Op("attn.q_rot interleave", {q_rot}, qi, {});
    int ki = c.g.Tensor("attn.k_rot interleaved (reshape copy)", c.e * rope);
    c.g.Op("attn.k_rot interleave", {k_rot}, ki, {});
    q_rot = qi;
    k_rot = ki;
  }
  q_rot = Rope(c, q_rot, a * rope, "attn.q_rot");
  k_rot = Rope(c, k_rot, rope, "attn.k_rot");
  int query = c.g.Tensor("attn.query_states cat(q_pass, q_rot)", c.e * qd);
  c.g.Op("attn.cat query", {qs[0], q_rot}, query, {});
  int key = c.g.Tensor("attn.key_states cat(k_pass, k_rot expanded)", c.e * qd);
  c.g.Op("attn.cat key", {kv[0], k_rot}, key, {});
  int o = AttentionCore(c, query, key, kv[1], s.num_heads, "attn.core");
  return Linear(c, o, static_cast<double>(s.hidden), "attn.o_proj", "self_attn.o_proj");
}

}  // namespace

bool Gpt2(const Ctx& c) { return c.spec.positions == PositionKind::kLearned; }

int AttentionSublayer(Ctx& c, int x) {
  const ModelSpec& s = c.spec;
  if (s.mla.enabled()) return MlaSublayer(c, x);
  double qd = static_cast<double>(s.q_dim()), kvd = static_cast<double>(s.kv_dim());
  bool gpt2 = Gpt2(c);
  int q, k, v;
  if (s.fused_qkv) {
    // Phi3Attention.forward: qkv = qkv_proj(x); q, k, v = qkv[..., :q], [..., q:q+kv],
    // [..., q+kv:]: three slice ops (a SliceBackward0 each) whose views share qkv's storage, so
    // SDPA saving v keeps all of qkv.
    int qkv = Linear(c, x, qd + 2 * kvd, "attn.qkv_proj", "self_attn.qkv_proj");
    q = c.g.Views(qkv, {"attn.q (slice of qkv)"}, {c.e * qd})[0];
    k = c.g.Views(qkv, {"attn.k (slice of qkv)"}, {c.e * kvd})[0];
    v = c.g.Views(qkv, {"attn.v (slice of qkv)"}, {c.e * kvd})[0];
  } else {
    q = Linear(c, x, qd, "attn.q_proj", gpt2 ? "attn.c_attn" : "self_attn.q_proj");
    k = Linear(c, x, kvd, "attn.k_proj", gpt2 ? "attn.c_attn" : "self_attn.k_proj");
    v = Linear(c, x, kvd, "attn.v_proj", gpt2 ? "attn.c_attn" : "self_attn.v_proj");
  }
  if (s.qk_norm) {
    // Qwen3: RMSNorm over head_dim on q and k before rope; OLMo 2: q_norm(q_proj(x)) over the
    // whole projection (the same bytes per token).
    // Qwen3's and Gemma 3's normalise each head: num_heads (num_kv_heads) rows per token.
    bool per_head = !s.qk_norm_full_width;
    q = RmsNorm(c, q, qd, "attn.q_norm", "self_attn.q_norm", per_head ? s.num_heads : 1);
    k = RmsNorm(c, k, kvd, "attn.k_norm", "self_attn.k_norm", per_head ? s.num_kv_heads : 1);
  }
  if (s.positions == PositionKind::kRotary && s.fused_qkv && c.opt.modeling == Modeling::kHf) {
    q = PartialRope(c, q, qd, "attn.q");
    k = PartialRope(c, k, kvd, "attn.k");
  } else if (s.positions == PositionKind::kRotary) {
    int consts = -1;
    if (!s.mrope_section.empty() && c.opt.modeling == Modeling::kHf) {
      // Qwen2/2.5-VL's apply_multimodal_rotary_pos_emb: every layer cats the model's [3, B, S, d]
      // cos and sin into its own [B, 1, S, d] sections (torch.cat: new tensors, in the compute
      // dtype), which q's and k's rotary muls save.
      consts = c.g.Tensor("attn M-RoPE cos and sin sections (per layer)",
                          2 * c.e * static_cast<double>(s.q_dim()) / s.num_heads);
      c.g.Op("attn M-RoPE sections (cat)", {}, consts, {});
    }
    q = Rope(c, q, qd, "attn.q", consts);
    k = Rope(c, k, kvd, "attn.k", consts);
  }
  if (c.opt.cp <= 1) {
    int o = AttentionCore(c, q, k, v, s.num_kv_heads, "attn.core");
    return Linear(c, o, static_cast<double>(s.hidden), "attn.o_proj",
                  gpt2 ? "attn.c_proj" : "self_attn.o_proj");
  }
  // verl _ulysses_flash_attention_forward: repeat_kv(k, v) when cp > num_kv_heads, then
  // gather_seq_scatter_heads on q, k, v; flash attention on [B, S, heads/cp, d]; then
  // gather_heads_scatter_seq on the output. The all-to-alls save nothing (their backward is the
  // inverse all-to-all), so flash saves the gathered q, k, v and its output, and o_proj saves
  // the scattered-back output: one more q-sized tensor per token than without cp.
  int rep = KvRepeat(s, c.opt.cp);
  if (rep > 1) {
    int kr = c.g.Tensor("attn.ulysses repeat_kv(k)", c.e * kvd * rep);
    c.g.Op("attn.ulysses repeat_kv k", {k}, kr, {});
    int vr = c.g.Tensor("attn.ulysses repeat_kv(v)", c.e * kvd * rep);
    c.g.Op("attn.ulysses repeat_kv v", {v}, vr, {});
    k = kr;
    v = vr;
  }
  q = UlyssesAllToAll(c, q, qd, "attn.ulysses q");
  k = UlyssesAllToAll(c, k, kvd * rep, "attn.ulysses k");
  v = UlyssesAllToAll(c, v, kvd * rep, "attn.ulysses v");
  int o = AttentionCore(c, q, k, v, s.num_kv_heads * rep, "attn.core");
  o = UlyssesAllToAll(c, o, qd, "attn.ulysses out");
  return Linear(c, o, static_cast<double>(s.hidden), "attn.o_proj",
                gpt2 ? "attn.c_proj" : "self_attn.o_proj");
}

}  // namespace shardtune::model::recipes
