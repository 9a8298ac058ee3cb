// Op-by-op recipes of what autograd saves in one block and in the loss path, for HF transformers
// (modeling_llama.py, modeling_gpt2.py, modeling_mixtral.py, loss/loss_utils.py) and torchtitan
// (models/llama3/model/model.py). Each recipe records ops on an AutogradLedger; byte sizes are per
// token, e = bytes of the compute dtype.
#include "model/activations.h"

#include <algorithm>

#include "model/autograd_ledger.h"
#include "model/context_parallel.h"

namespace shardtune::model {
namespace {

constexpr double kFp32 = 4;

struct Ctx {
  AutogradLedger g;
  double e;  // bytes per element of the compute dtype
  const ModelSpec& spec;
  const ActivationOptions& opt;
};

int Linear(Ctx& c, int x, double out_features, const std::string& name) {
  // nn.Linear / Conv1D (addmm): saves its input (and the weight, a parameter).
  int y = c.g.Tensor(name + " output", c.e * out_features);
  c.g.Op(name, {x}, y, {x});
  c.g.MarkComputeBound();
  // Its backward allocates dW [out, in] (addmm_backward: mat1.t() @ grad).
  c.g.SetParamElements(out_features * c.g.BytesPerToken(x) / c.e);
  return y;
}

// HF LlamaRMSNorm.forward: x.to(fp32); pow(2).mean; x * rsqrt(var + eps); weight * x.to(dtype).
// pow and mul save the fp32 copy, rsqrt saves its [.., 1] output, the weight mul saves x_hat.
// torchtitan (nn.RMSNorm -> fused F.rms_norm in torch >= 2.8) saves the input and rstd only.
int RmsNorm(Ctx& c, int x, double dim, const std::string& name) {
  if (c.opt.modeling == Modeling::kTorchtitan) {
    int rstd = c.g.Tensor(name + " rstd (fp32)", kFp32);
    int y = c.g.Tensor(name + " output", c.e * dim);
    c.g.Op(name + " fused rms_norm", {x}, rstd, {});
    c.g.Op(name + " apply", {x, rstd}, y, {x, rstd});
    c.g.SetParamElements(dim);
    return y;
  }
  int x32 = x;
  if (c.e != kFp32) {
    x32 = c.g.Tensor(name + " fp32 copy of input", kFp32 * dim);
    c.g.Op(name + " to(float32)", {x}, x32, {});
  }
  int sq = c.g.Tensor(name + " x^2 (fp32)", kFp32 * dim);
  c.g.Op(name + " pow", {x32}, sq, {x32});
  int var = c.g.Tensor(name + " variance", kFp32);
  c.g.Op(name + " mean", {sq}, var, {});
  int rs = c.g.Tensor(name + " rsqrt", kFp32);
  c.g.Op(name + " rsqrt", {var}, rs, {rs});
  int n32 = c.g.Tensor(name + " normalized (fp32)", kFp32 * dim);
  c.g.Op(name + " mul", {x32, rs}, n32, {x32, rs});
  int nb = n32;
  if (c.e != kFp32) {
    nb = c.g.Tensor(name + " normalized", c.e * dim);
    c.g.Op(name + " to(dtype)", {n32}, nb, {});
  }
  int y = c.g.Tensor(name + " output", c.e * dim);
  c.g.Op(name + " weight mul", {nb}, y, {nb});
  c.g.SetParamElements(dim);
  return y;
}

// torch.nn.functional.layer_norm (native kernel): saves input, mean and rstd (fp32 per row).
int LayerNorm(Ctx& c, int x, double dim, const std::string& name) {
  int stats = c.g.Tensor(name + " mean+rstd (fp32)", 2 * kFp32);
  int y = c.g.Tensor(name + " output", c.e * dim);
  c.g.Op(name + " stats", {x}, stats, {});
  c.g.Op(name, {x, stats}, y, {x, stats});
  c.g.SetParamElements(2 * dim);  // weight and bias
  return y;
}

int Norm(Ctx& c, int x, double dim, const std::string& name) {
  return c.spec.norm == NormKind::kRmsNorm ? RmsNorm(c, x, dim, name) : LayerNorm(c, x, dim, name);
}

// Rotary embedding. HF apply_rotary_pos_emb: (q * cos) + (rotate_half(q) * sin). cos/sin come
// from the no-grad rotary module, so each mul saves only cos or sin (autograd saves `self` of a
// mul only when `other` needs a gradient: tools/autograd/derivatives.yaml, mul.Tensor), which
// are shared by all layers [S, d] tensors, negligible: rope keeps nothing per token. torchtitan
// apply_rotary_emb: view_as_complex(x.float()) * freqs_cis saves freqs_cis only, likewise.
// Measured on an H100 (tests/data/validation/fsdp2_h100_measured.json): HF Llama saves
// 20H + 4H_kv + 8I bytes per token per layer in bf16 with SDPA, no rope term.
int Rope(Ctx& c, int x, double dim, const std::string& name) {
  int y = c.g.Tensor(name + " after rope", c.e * dim);
  if (c.opt.modeling == Modeling::kTorchtitan) {
    int xc = c.g.Tensor(name + " fp32 complex copy", kFp32 * dim);
    c.g.Op(name + " float()", {x}, xc, {});
    c.g.Op(name + " complex mul", {xc}, y, {});
    return y;
  }
  int xcos = c.g.Tensor(name + " * cos", c.e * dim);
  c.g.Op(name + " mul cos", {x}, xcos, {});
  int rot = c.g.Tensor(name + " rotate_half", c.e * dim);
  c.g.Op(name + " rotate_half (cat)", {x}, rot, {});
  int rsin = c.g.Tensor(name + " rotate_half * sin", c.e * dim);
  c.g.Op(name + " mul sin", {rot}, rsin, {});
  c.g.Op(name + " add", {xcos, rsin}, y, {});
  return y;
}

// Attention core. SDPA flash/efficient kernels save q, k, v, the output (in [B, S, a, d] memory,
// so the transpose+contiguous before o_proj is free) and the fp32 logsumexp [B, a, S]; the
// backward allocates an fp32 dq accumulator (flash_api.cpp mha_bwd dq_accum) and, with GQA,
// expanded dk/dv. Eager (HF eager_attention_forward): matmul, softmax in fp32 then cast, matmul.
// `kv_heads`: KV heads as the kernel sees them (repeated for Ulysses when cp > num_kv_heads).
int AttentionCore(Ctx& c, int q, int k, int v, int kv_heads, const std::string& name) {
  const ModelSpec& s = c.spec;
  double qd = static_cast<double>(s.q_dim());
  int out = c.g.Tensor(name + " output", c.e * qd);
  if (c.opt.attention == Attention::kSdpa) {
    int lse = c.g.Tensor(name + " logsumexp (fp32)", kFp32 * s.num_heads);
    double ws = kFp32 * qd + (kv_heads != s.num_heads ? 2 * c.e * qd : 0.0);
    c.g.Op(name + " flash forward (lse)", {q, k, v}, lse, {});
    c.g.MarkComputeBound();
    c.g.Op(name + " sdpa", {q, k, v, lse}, out, {q, k, v, lse, out}, ws);
    c.g.MarkComputeBound();
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
  int sc = c.g.Tensor(name + " scores q@k^T", c.e * scores);
  c.g.Op(name + " matmul qk", {q, kr}, sc, {q, kr});
  c.g.MarkComputeBound();
  int sm = c.g.Tensor(name + " scaled+masked scores", c.e * scores);
  c.g.Op(name + " scale+mask", {sc}, sm, {});
  int p32 = c.g.Tensor(name + " softmax (fp32)", kFp32 * scores);
  c.g.Op(name + " softmax", {sm}, p32, {p32});
  int p = c.g.Tensor(name + " probs", c.e * scores);
  c.g.Op(name + " probs to(dtype)", {p32}, p, {});
  int o = c.g.Tensor(name + " probs@v", c.e * qd);
  c.g.Op(name + " matmul pv", {p, vr}, o, {p, vr});
  c.g.MarkComputeBound();
  c.g.Op(name + " transpose.contiguous", {o}, out, {});
  return out;
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

int AttentionSublayer(Ctx& c, int x) {
  const ModelSpec& s = c.spec;
  double qd = static_cast<double>(s.q_dim()), kvd = static_cast<double>(s.kv_dim());
  int q = Linear(c, x, qd, "attn.q_proj");
  int k = Linear(c, x, kvd, "attn.k_proj");
  int v = Linear(c, x, kvd, "attn.v_proj");
  if (s.qk_norm) {  // Qwen3: RMSNorm over head_dim on q and k before rope
    q = RmsNorm(c, q, qd, "attn.q_norm");
    k = RmsNorm(c, k, kvd, "attn.k_norm");
  }
  if (s.positions == PositionKind::kRotary) {
    q = Rope(c, q, qd, "attn.q");
    k = Rope(c, k, kvd, "attn.k");
  }
  if (c.opt.cp <= 1) {
    int o = AttentionCore(c, q, k, v, s.num_kv_heads, "attn.core");
    return Linear(c, o, static_cast<double>(s.hidden), "attn.o_proj");
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
  return Linear(c, o, static_cast<double>(s.hidden), "attn.o_proj");
}

int DenseMlp(Ctx& c, int x, double ffn, double mult, const std::string& name) {
  double h = static_cast<double>(c.spec.hidden);
  if (c.spec.mlp == MlpKind::kGelu) {
    // F.gelu saves its input. (HF GPT-2's python gelu_new saves more; not modelled.)
    int up = Linear(c, x, ffn * mult, name + ".up");
    int act = c.g.Tensor(name + ".gelu output", c.e * ffn * mult);
    c.g.Op(name + ".gelu", {up}, act, {up});
    return Linear(c, act, h * mult, name + ".down");
  }
  // HF LlamaMLP / torchtitan FeedForward: down(silu(gate(x)) * up(x)).
  int gate = Linear(c, x, ffn * mult, name + ".gate_proj");
  int up = Linear(c, x, ffn * mult, name + ".up_proj");
  int act = c.g.Tensor(name + ".silu output", c.e * ffn * mult);
  c.g.Op(name + ".silu", {gate}, act, {gate});
  int prod = c.g.Tensor(name + ".silu*up", c.e * ffn * mult);
  c.g.Op(name + ".mul", {act, up}, prod, {act, up});
  return Linear(c, prod, h * mult, name + ".down_proj");
}

// HF MixtralSparseMoeBlock: router logits, softmax in fp32, top-k; each routed copy of a token
// is gathered (hidden_states[top_x]), run through its expert, scaled by its routing weight and
// index_add_-ed back. Per token that is top_k expert passes. Shared experts are dense MLPs.
int Moe(Ctx& c, int x) {
  const MoeSpec& m = c.spec.moe;
  double h = static_cast<double>(c.spec.hidden), k = m.top_k;
  double fe = static_cast<double>(m.expert_ffn_hidden > 0 ? m.expert_ffn_hidden : c.spec.ffn_hidden);
  int logits = Linear(c, x, m.num_experts, "moe.router");
  int probs = c.g.Tensor("moe.router softmax (fp32)", kFp32 * m.num_experts);
  c.g.Op("moe.softmax", {logits}, probs, {probs});
  int gathered = c.g.Tensor("moe.gathered tokens (x top_k)", c.e * h * k);
  c.g.Op("moe.gather", {x, probs}, gathered, {});
  int expert_out = DenseMlp(c, gathered, fe, k, "moe.experts");
  int weighted = c.g.Tensor("moe.weighted expert output", c.e * h * k);
  c.g.Op("moe.scale by routing weight", {expert_out, probs}, weighted, {expert_out, probs});
  int out = c.g.Tensor("moe.combined output", c.e * h);
  c.g.Op("moe.index_add", {weighted}, out, {});
  if (m.num_shared_experts > 0) {
    double fs = m.shared_expert_ffn_hidden > 0 ? static_cast<double>(m.shared_expert_ffn_hidden) : fe;
    int shared = DenseMlp(c, x, fs * m.num_shared_experts, 1.0, "moe.shared_expert");
    int sum = c.g.Tensor("moe.output", c.e * h);
    c.g.Op("moe.add shared", {out, shared}, sum, {});
    out = sum;
  }
  return out;
}

int Mlp(Ctx& c, int x) {
  if (c.spec.moe.enabled()) return Moe(c, x);
  return DenseMlp(c, x, static_cast<double>(c.spec.ffn_hidden), 1.0, "mlp");
}

int Add(Ctx& c, int a, int b, const std::string& name) {
  int y = c.g.Tensor(name, c.e * static_cast<double>(c.spec.hidden));
  c.g.Op(name, {a, b}, y, {});
  return y;
}

}  // namespace

ActivationOptions ActivationOptionsFor(const Plan& plan, int64_t seq_len) {
  ActivationOptions o;
  o.dtype = plan.param_dtype;
  o.attention = plan.attention;
  o.modeling = plan.modeling;
  o.loss_fp32_upcast = plan.loss_fp32_upcast;
  o.keep_logits = plan.keep_logits;
  o.seq_len = seq_len;
  o.cp = plan.cp;
  return o;
}

double ResidualPerToken(const ModelSpec& spec, const ActivationOptions& opt) {
  return static_cast<double>(BytesPerElement(opt.dtype)) * static_cast<double>(spec.hidden);
}

BlockActivations ComputeBlockActivations(const ModelSpec& spec, const ActivationOptions& opt) {
  Ctx c{AutogradLedger(), static_cast<double>(BytesPerElement(opt.dtype)), spec, opt};
  double h = static_cast<double>(spec.hidden);
  int x = c.g.Tensor("block input", c.e * h);
  int out;
  if (spec.parallel_residual) {  // GPT-NeoX: x + attn(ln1(x)) + mlp(ln2(x))
    int a = AttentionSublayer(c, Norm(c, x, h, "input_layernorm"));
    int m = Mlp(c, Norm(c, x, h, "post_attention_layernorm"));
    out = Add(c, Add(c, x, a, "residual add (attn)"), m, "residual add (mlp)");
  } else {
    int a = AttentionSublayer(c, Norm(c, x, h, "input_layernorm"));
    int h1 = Add(c, x, a, "residual add (attn)");
    int m = Mlp(c, Norm(c, h1, h, "post_attention_layernorm"));
    out = Add(c, h1, m, "residual add (mlp)");
  }
  BlockActivations b;
  b.full = c.g.Run(x, out);
  b.checkpoint_input_per_token = c.e * h;
  // Selective (torchtitan's op-level SAC save list): keep the outputs of matmuls and of the
  // attention kernel, recompute norms, rope and elementwise ops. Approximated as the saved
  // tensors whose producer is a projection or the attention core, plus the block input.
  double sel = c.e * h;
  for (const auto& t : b.full.saved) {
    const std::string& n = t.name;
    bool matmul = n.find("_proj output") != std::string::npos ||
                  n.find(".up output") != std::string::npos ||
                  n.find("router output") != std::string::npos;
    bool attn = n.find("attn.core") != std::string::npos;
    // Ulysses: tensors that came through an all-to-all are kept rather than recomputed (a
    // recompute would rerun the collective; torchtitan's SAC save list keeps collective outputs).
    attn = attn || n.find("attn.ulysses") != std::string::npos;
    if (matmul || attn) sel += t.bytes_per_token;
  }
  b.selective_per_token = std::min(sel, b.full.saved_per_token);
  return b;
}

ActivationLedger ComputeHeadActivations(const ModelSpec& spec, const ActivationOptions& opt) {
  Ctx c{AutogradLedger(), static_cast<double>(BytesPerElement(opt.dtype)), spec, opt};
  double h = static_cast<double>(spec.hidden), v = static_cast<double>(spec.vocab_size);
  int x = c.g.Tensor("final norm input", c.e * h);
  int normed = Norm(c, x, h, "final norm");
  int logits = Linear(c, normed, v, "lm_head");
  c.g.HoldThroughForward(logits);
  if (opt.keep_logits) c.g.HoldByCaller(logits);
  int l32 = logits;
  if (opt.loss_fp32_upcast && c.e != kFp32) {
    // HF ForCausalLMLoss: logits = logits.float(); torchtitan: cross_entropy(pred.float(), ...).
    l32 = c.g.Tensor("logits.float()", kFp32 * v);
    c.g.Op("upcast logits", {logits}, l32, {});
  }
  // F.cross_entropy = log_softmax (saves its output) + nll_loss (saves only targets).
  double ls_bytes = (l32 == logits ? c.e : kFp32) * v;
  int ls = c.g.Tensor("log_softmax output", ls_bytes);
  c.g.Op("log_softmax", {l32}, ls, {ls});
  int loss = c.g.Tensor("loss", 0.0);
  c.g.Op("nll_loss", {ls}, loss, {});
  ActivationLedger led = c.g.Run(x, loss);
  for (auto& t : led.saved) {
    if (t.name == "lm_head output" && opt.keep_logits) t.name = "logits held by the caller";
  }
  return led;
}

}  // namespace shardtune::model
