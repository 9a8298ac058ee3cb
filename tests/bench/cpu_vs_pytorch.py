#!/usr/bin/python3
"""shardtune's own FSDP runtime on CPU ranks (Gloo) against PyTorch DDP and PyTorch FSDP on the
same Llama-layout model, the same initial weights and the same tokens: step time and per-step
loss. A benchmark, not a test: it prints a table and exits 0 whatever the numbers are.

    /usr/bin/python3 tests/bench/cpu_vs_pytorch.py [--shardtune build/cli/shardtune] \
        [--model tiny-llama] [--nproc 2] [--threads 1] [--steps 8] [--seq-len 128] \
        [--global-batch 8] [--micro-batch 1] [--lr 1e-3] [--lr-schedule cosine] \
        [--warmup-steps STEPS/10] [--weight-decay 0.01] [--max-grad-norm 1] [--seed 0] \
        [--compare-steps N] [--no-sync]

Configs, all fp32 on `--nproc` CPU ranks x `--threads` intra-op threads, one after the other:
  shardtune no_shard    `shardtune run --strategy no_shard`   (ours, DDP-like: all-reduce)
  shardtune full_shard  `shardtune run --strategy full_shard` (ours, ZeRO-3)
  pytorch DDP (gloo)    torch.nn.parallel.DistributedDataParallel
  pytorch FSDP *        torch.distributed.fsdp.FullyShardedDataParallel, FULL_SHARD and NO_SHARD,
                        one FSDP unit per decoder layer (transformer_auto_wrap_policy) + the root.
                        Debian's torch 1.13 cannot run it: the import fails on Python 3.11
                        (torch/distributed/_shard/sharded_tensor/metadata.py has a dataclass field
                        with a mutable default), and past that 1.13's FSDP takes a CUDA compute
                        device (_get_compute_device: torch.cuda.current_device()) whatever the
                        module's device. The script then prints one line with the exception.
The PyTorch ranks are started with torch.multiprocessing.spawn (Debian's torchrun fails on
Python 3.11); MASTER_ADDR/MASTER_PORT are set in each rank. Each rank runs torch.set_num_threads
(--threads) and inherits OMP/OPENBLAS/MKL/BLIS_NUM_THREADS = --threads, as shardtune's ranks
size LibTorch's pool and the BLAS's own (a pthread OpenBLAS otherwise starts one thread per core
in every rank).

Same weights: `shardtune run --nproc 1 --global-batch 1 --steps 1 --lr 1e-300 --weight-decay 0
--warmup-steps 0 --lr-schedule constant --max-grad-norm 0 --export-full-state-dict` writes
OUT/model.safetensors, the fp32 full parameters of seed --seed under Hugging Face names
(executor/train/full_state_dict.cc), as initialized. `--lr 0` would be the obvious choice but
run_validate.cc rejects it ("--lr: expected a number > 0"); 1e-300 moves nothing: AdamW
(executor/fsdp/optimizer.cc) multiplies by 1 - lr*wd = 1 (wd 0) and adds -lr/bc1 * m/denom, whose
magnitude at step 1 is lr * |g| / (|g| + eps) <= 1e-300, far below half the smallest fp32
subnormal (7e-46), so every fp32 weight rounds back to itself (the scalar -1e-299 even becomes
-0.0 in fp32); the constant schedule with no warmup keeps lr at 1e-300 and clipping only touches
gradients. Initialization is per parameter on the full tensor (flat_param.cc), so the file does
not depend on the world size. (Checked 2026-11-25: the files after 1 and 3 such steps, and after
1 step on 2 full_shard ranks, are byte-identical.) The script parses the file in plain Python
(8-byte little-endian header length, JSON header, raw little-endian fp32), checks that its
names and shapes are exactly those of the PyTorch model (HF module names) and that every norm
weight is still 1.0 (init value), and loads it into every PyTorch rank. It also runs the
PyTorch forward on the export step's sequence and prints its loss next to shardtune's (the
"init check" line): that validates weights, data and forward before any training.

Same data: a deterministic pseudo-text file (written to a temp dir) passed as `--data`; tokens
are bytes (vocab >= 256). As executor/train/data.cc: sequence i is the S + 1 bytes from
(i * S) mod (size - S), inputs [0, S), labels [1, S]. As executor/train/trainer.cc (Trainer::Batch):
step t (1-based), micro-batch m, data-parallel rank r, row j reads global sequence
(t - 1) * global_batch + m * world * B + r * B + j (B = --micro-batch). The PyTorch ranks read
exactly those, so the per-step losses are comparable; each is the mean over the global batch
(shardtune: OUT/measurements.json "steps"[i]["loss"], the micro-batch means averaged over
micro-batches and ranks; PyTorch: the same, all-reduced over gloo).

Same hyper-parameters, passed to shardtune explicitly and replicated in PyTorch:
  AdamW lr --lr (1e-3), betas (0.9, 0.999), eps 1e-8 (torch defaults, hard-wired in
    executor/fsdp/optimizer.h), weight decay --weight-decay (0.01) on every parameter (one group);
    torch.optim.AdamW(foreach=False), the single-tensor formula shardtune copies.
  Clipping: global L2 norm, clip coefficient min(1, max/(norm + 1e-6)) (--max-grad-norm 1;
    0 disables), torch's clip_grad_norm_ / FSDP's clip_grad_norm_.
  LR schedule: executor/train/lr_schedule.cc reimplemented (linear warmup lr*step/warmup, then cosine
    or WSD to 0.1*lr, or constant), --warmup-steps defaults to shardtune's steps/10.
  Gradient accumulation: global_batch / (micro_batch x ranks) micro-batches, loss / accum,
    gradients averaged over ranks. By default every config reduces gradients after every
    micro-batch (shardtune's default; DDP and FSDP then run without no_sync()); --no-sync
    passes --no-sync to shardtune and wraps all but the last micro-batch in no_sync() for DDP
    and FSDP, so all configs always move the same gradient bytes. (The old
    ddp_vs_shardtune.py gave DDP no_sync() but not shardtune: 1 all-reduce per step against
    one per micro-batch.) Only the summation order changes the losses.
  shardtune also gets --precision fp32 (its default is bf16), --attention eager (the PyTorch side
    is eager; a LibTorch < 2.0 build is eager anyway), --no-trace and --no-checkpoints.
The PyTorch model matches executor/nn/transformer.cc: LlamaRMSNorm in fp32 with the spec's norm_eps,
rotary with the spec's rope_theta and rotate_half (an HF config's rms_norm_eps / rope_theta; the
defaults 1e-5 and 10000; rope_scaling is refused here, plain RoPE only), repeat_kv GQA,
scores * (1/sqrt(D)), causal mask, fp32 softmax, SwiGLU, optional q/k/v/o/MLP biases, qk_norm,
tied embeddings. Layer-norm, GELU, learned-position (GPT-2/NeoX) and MoE models are refused.

Step time: every config's per-step wall time on rank 0 (all micro-batches, the loss all-reduce,
clipping and the optimizer step; shardtune's "steps"[i]["time_s"]), median (and min..max) over
the steps after the first (one-time costs excluded), ratio = config / DDP. The loss columns: the
last step's loss and max |loss - shardtune no_shard's| over the first --compare-steps steps
(default all). Then the per-step losses and gradient norms (before clipping) of every config.
Only fp32 summation order differs (bucketed all-reduce vs per-unit reduce, matmul splits), so
the losses agree to ~1e-7. The PyTorch gradient norm reads ~1e-6 relative lower than
shardtune's: torch sums the squares in fp32 (torch.norm per tensor), shardtune in fp64
(FsdpRuntime::ClipGradNorm); the fp64 norm of the PyTorch gradients equals shardtune's.
The header names the BLAS library that libtorch
resolved in this process (from /proc/self/maps after a matmul); Debian's python3-torch and a
shardtune built on Debian's libtorch-dev load the same libtorch_cpu (the script says whether
shardtune-exec does). On a shared or loaded machine the times are noise-dominated.
Needs Debian's python3-torch (`apt-get install python3-torch`, torch 1.13 with Gloo) and a built
shardtune (build/cli/shardtune and shardtune-exec).

Measured on the 2-core development VM (2026-11-25, defaults: tiny-llama, 2 ranks x 1 thread,
global batch 8 x 128, 8 steps, OpenBLAS 0.3.21 openmp through Debian's libtorch 1.13, not idle):
DDP 0.268 s/step, shardtune no_shard 0.327 s (1.22x), full_shard 0.381 s (1.42x); losses equal
to 1.2e-7 (DDP) and bit for bit (full_shard vs no_shard) over the 8 steps, init check |diff| 0.
With --no-sync (--steps 3): no_shard 0.21 s, full_shard 0.35 s, DDP 0.26 s: shardtune's
per-micro-batch gradient all-reduce costs ~0.1 s/step here, DDP's (bucketed, overlapped with
backward) almost nothing. FSDP: not runnable on torch 1.13 (see above).
"""
import argparse
import collections
import functools
import json
import math
import os
import random
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

NORM_EPS = 1e-5  # model/model_spec.cc kDefaultNormEps: a spec's norm_eps 0 means this
ROPE_THETA = 10000.0  # model/model_spec.cc kDefaultRopeTheta: a spec's rope_theta 0 means this
MIN_LR_RATIO, WSD_DECAY_FRACTION = 0.1, 0.2  # executor/train/lr_schedule.h LrOptions

# ------------------------------------------------------------------------------------- model


class RMSNorm(nn.Module):  # LlamaRMSNorm; executor/nn/transformer.cc RmsNormPiece
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        var = x32.pow(2).mean(-1, keepdim=True)
        return self.weight * (x32 * torch.rsqrt(var + self.eps)).to(x.dtype)


def rotary(x, theta):  # [B, heads, S, D]; Transformer::Rotary (offset 0: no cp), plain RoPE
    S, D = x.shape[2], x.shape[3]
    inv = torch.pow(theta, torch.arange(0, D, 2, dtype=torch.float32) / float(D)).reciprocal()
    freqs = torch.outer(torch.arange(0, S, dtype=torch.float32), inv)  # [S, D/2]
    emb = torch.cat([freqs, freqs], -1)  # [S, D]
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : D // 2], x[..., D // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class Attention(nn.Module):
    def __init__(self, s):
        super().__init__()
        H, a, kv, D = s["hidden"], s["num_heads"], s["num_kv_heads"], s["head_dim"]
        self.a, self.kv, self.D = a, kv, D
        self.q_proj = nn.Linear(H, a * D, bias=s["qkv_bias"])
        self.k_proj = nn.Linear(H, kv * D, bias=s["qkv_bias"])
        self.v_proj = nn.Linear(H, kv * D, bias=s["qkv_bias"])
        self.o_proj = nn.Linear(a * D, H, bias=s["attn_out_bias"])
        if s["qk_norm"]:
            self.q_norm, self.k_norm = RMSNorm(D, s["norm_eps"]), RMSNorm(D, s["norm_eps"])
        self.qk_norm = s["qk_norm"]
        self.theta = s["rope_theta"]

    def forward(self, x):  # Transformer::Attention + Core (eager)
        B, S, _ = x.shape
        a, kv, D = self.a, self.kv, self.D
        q = self.q_proj(x).view(B, S, a, D)
        k = self.k_proj(x).view(B, S, kv, D)
        v = self.v_proj(x)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = rotary(q.transpose(1, 2), self.theta), rotary(k.transpose(1, 2), self.theta)
        v = v.reshape(B, S, kv, D).transpose(1, 2)
        if kv != a:  # repeat_kv
            k = k.unsqueeze(2).expand(B, kv, a // kv, S, D).reshape(B, a, S, D)
            v = v.unsqueeze(2).expand(B, kv, a // kv, S, D).reshape(B, a, S, D)
        scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, -1, dtype=torch.float32).to(q.dtype)
        o = torch.matmul(probs, v).transpose(1, 2).reshape(B, S, a * D)
        return self.o_proj(o)


class Mlp(nn.Module):
    def __init__(self, s):
        super().__init__()
        H, Fh, b = s["hidden"], s["ffn_hidden"], s["mlp_bias"]
        self.gate_proj = nn.Linear(H, Fh, bias=b)
        self.up_proj = nn.Linear(H, Fh, bias=b)
        self.down_proj = nn.Linear(Fh, H, bias=b)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.input_layernorm = RMSNorm(s["hidden"], s["norm_eps"])
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s["hidden"], s["norm_eps"])
        self.mlp = Mlp(s)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


class Decoder(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed_tokens = nn.Embedding(s["vocab_size"], s["hidden"])
        self.layers = nn.ModuleList(DecoderLayer(s) for _ in range(s["num_layers"]))
        self.norm = RMSNorm(s["hidden"], s["norm_eps"])


class LlamaForCausalLM(nn.Module):  # HF names: model.embed_tokens.weight, ..., lm_head.weight
    def __init__(self, s):
        super().__init__()
        self.model = Decoder(s)
        self.tied = s["tied_embeddings"]
        if not self.tied:
            self.lm_head = nn.Linear(s["hidden"], s["vocab_size"], bias=False)

    def forward(self, tokens, labels):  # mean cross-entropy over B x S tokens
        x = self.model.embed_tokens(tokens)
        for layer in self.model.layers:
            x = layer(x)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = F.linear(x, w).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


# -------------------------------------------------------------------------------- model spec

def load_spec(a):
    """The model spec as shardtune resolves it: a preset from `shardtune models --json`, or a
    shardtune.model JSON / HF config.json file (minimal reader, Llama-family keys only)."""
    if os.path.isfile(a.model):
        with open(a.model) as f:
            j = json.load(f)
        if j.get("schema") == "shardtune.model":
            s = dict(j)
        else:  # model/hf_config.cc ReadRotaryDecoder
            mt = j.get("model_type")
            if mt not in ("llama", "mistral", "qwen2", "qwen3"):
                sys.exit(f"--model {a.model}: model_type {mt!r} not supported by this benchmark "
                         "(llama, mistral, qwen2, qwen3)")
            s = {"num_layers": j["num_hidden_layers"], "hidden": j["hidden_size"],
                 "num_heads": j["num_attention_heads"],
                 "num_kv_heads": j.get("num_key_value_heads") or j["num_attention_heads"],
                 "head_dim": j.get("head_dim") or 0, "ffn_hidden": j["intermediate_size"],
                 "vocab_size": j["vocab_size"], "max_seq_len": j["max_position_embeddings"],
                 "tied_embeddings": j.get("tie_word_embeddings", False)}
            if mt in ("llama", "qwen3"):
                s["qkv_bias"] = s["attn_out_bias"] = j.get("attention_bias", False)
            if mt == "llama":
                s["mlp_bias"] = j.get("mlp_bias", False)
            if mt == "qwen2":
                s["qkv_bias"] = True
            if mt == "qwen3":
                s["qk_norm"] = True
            s["norm_eps"] = j.get("rms_norm_eps") or NORM_EPS
            s["rope_theta"] = j.get("rope_theta") or ROPE_THETA
            s["rope_scaling"] = j.get("rope_scaling")
        name = s.get("name", os.path.basename(a.model))
    else:
        r = subprocess.run([a.shardtune, "models", "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"{a.shardtune} models --json failed ({r.returncode}): {r.stderr.strip()}")
        found = [m for m in json.loads(r.stdout) if m["name"] == a.model]
        if not found:
            sys.exit(f"--model {a.model}: not a preset of `shardtune models` nor a file")
        s, name = dict(found[0]["spec"]), a.model
    if s.get("rope_scaling") and s["rope_scaling"].get("rope_type", s["rope_scaling"].get("type")) not in (None, "default"):
        sys.exit(f"--model {a.model}: rope_scaling {s['rope_scaling']} is not reproduced by this "
                 "benchmark's PyTorch model (plain RoPE only)")
    defaults = {"norm": "rms_norm", "norm_bias": False, "norm_eps": NORM_EPS, "rope_theta": ROPE_THETA, "mlp": "swiglu", "positions": "rotary",
                "qkv_bias": False, "attn_out_bias": False, "mlp_bias": False, "qk_norm": False,
                "parallel_residual": False, "tied_embeddings": False}
    for k, v in defaults.items():
        s.setdefault(k, v)
    if not s.get("num_kv_heads"):
        s["num_kv_heads"] = s["num_heads"]
    if not s.get("head_dim"):
        s["head_dim"] = s["hidden"] // s["num_heads"]
    unsupported = [f"{k}={s[k]}" for k in ("norm", "mlp", "positions")
                   if s[k] != defaults[k]] + [k for k in ("norm_bias", "parallel_residual")
                                               if s[k]] + (["moe"] if s.get("moe") else [])
    if unsupported:
        sys.exit(f"--model {a.model}: not a Llama layout ({', '.join(unsupported)}); this "
                 "benchmark's PyTorch model covers RMSNorm + rotary + SwiGLU decoders only")
    if s["vocab_size"] < 256:
        sys.exit(f"--model {a.model}: byte-level data needs vocab_size >= 256")
    return name, s


# ------------------------------------------------------------------------------- safetensors

def read_safetensors(path):
    """name -> fp32 tensor, in file order. 8-byte LE header length N, N bytes of JSON, then the
    raw little-endian data (offsets relative to the first byte after the header)."""
    with open(path, "rb") as f:
        blob = f.read()
    if sys.byteorder != "little":
        sys.exit("reading safetensors needs a little-endian host")
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = collections.OrderedDict()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            sys.exit(f"{path}: {name} has dtype {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        shape = list(info["shape"])
        numel = math.prod(shape)
        if end - begin != 4 * numel:
            sys.exit(f"{path}: {name}: {end - begin} bytes for shape {shape}")
        # the file is little-endian fp32, as this (x86-64 / aarch64) host; bytearray: writable
        t = torch.frombuffer(bytearray(blob[base + begin:base + end]), dtype=torch.float32)
        out[name] = t.reshape(shape).clone()
    return out


def check_and_load(model, tensors, path):
    """Loads `tensors` into `model`; names and shapes must match exactly (else exit)."""
    sd = model.state_dict()
    want = {k: list(v.shape) for k, v in sd.items()}
    got = {k: list(v.shape) for k, v in tensors.items()}
    if want != got:
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        shapes = sorted(f"{k}: file {got[k]} vs model {want[k]}"
                        for k in set(want) & set(got) if want[k] != got[k])
        raise SystemExit(f"{path} does not match the PyTorch model: missing {missing}, "
                         f"unexpected {extra}, shape mismatches {shapes}")
    model.load_state_dict(tensors, strict=True)


def check_init_norms(tensors, path):
    """Norm weights are initialized to exactly 1 (Transformer::InitParameter): any update would
    move them, so all-ones shows the lr-0 export step left the weights alone."""
    moved = [k for k, v in tensors.items() if "norm" in k and not bool((v == 1).all())]
    if moved:
        sys.exit(f"{path}: norm weights {moved[:3]} are not 1.0: not the initial weights")


# --------------------------------------------------------------------------------------- data

WORDS = ("the of and to in is that it for as with was on be by at this from or an are which "
         "shard rank gather scatter reduce gradient tensor layer model token batch step loss "
         "weight memory compute sequence attention head norm rotary optimizer update").split()


def write_pseudo_text(path, nbytes, seed):
    """Deterministic English-like bytes (ASCII, so byte tokens < 128)."""
    rng = random.Random(seed)
    parts, size = [], 0
    while size < nbytes:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14)))
        sentence = sentence[0].upper() + sentence[1:] + rng.choice([". ", ". ", "? ", ".\n"])
        parts.append(sentence)
        size += len(sentence)
    with open(path, "wb") as f:
        f.write("".join(parts).encode("ascii")[:nbytes])


class ByteData:
    """executor/train/data.cc TokenSource for a file: sequence i = S + 1 bytes from (i*S) % (size-S)."""

    def __init__(self, path, seq_len):
        with open(path, "rb") as f:
            self.bytes = f.read()
        self.S = seq_len
        if len(self.bytes) < seq_len + 1:
            sys.exit(f"{path}: {len(self.bytes)} bytes, need seq_len + 1")

    def sequence(self, index):
        start = (index * self.S) % (len(self.bytes) - self.S)
        return list(self.bytes[start:start + self.S + 1])


def micro_batch(data, step, micro, rank, world, B, global_batch):
    """executor/train/trainer.cc Trainer::Batch: step-major, then micro-batch, then dp rank."""
    first = (step - 1) * global_batch + micro * world * B + rank * B
    rows = torch.tensor([data.sequence(first + j) for j in range(B)], dtype=torch.long)  # [B,S+1]
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def learning_rate(a, step):
    """executor/train/lr_schedule.cc LearningRate (1-based step)."""
    lr, warm, total = a.lr, a.warmup_steps, a.steps
    if warm > 0 and step <= warm:
        return lr * step / warm
    if a.lr_schedule == "constant":
        return lr
    min_lr = lr * MIN_LR_RATIO
    span = max(1, total - warm)
    done = max(0, step - warm - 1)
    if a.lr_schedule == "cosine":
        p = min(1.0, done / span)
        return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))
    decay = max(1, math.ceil(WSD_DECAY_FRACTION * span))
    stable = span - decay
    if done < stable:
        return lr
    p = min(1.0, (done - stable + 1) / decay)
    return lr + (min_lr - lr) * p


# ---------------------------------------------------------------------------------- shardtune

def shardtune_run(a, out, strategy, nproc, global_batch, steps, lr, extra=()):
    cmd = [a.shardtune, "run", "--model", a.model, "--strategy", strategy, "--precision", "fp32",
           "--attention", "eager", "--steps", str(steps), "--seq-len", str(a.seq_len),
           "--global-batch", str(global_batch), "--micro-batch", str(a.micro_batch),
           "--nproc", str(nproc), "--threads", str(a.threads), "--seed", str(a.seed),
           "--data", a.data, "--lr", repr(lr), "--no-trace", "--no-checkpoints", "--out", out,
           *extra]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"shardtune run failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    with open(os.path.join(out, "measurements.json")) as f:
        return json.load(f)


def run_ours(a, strategy):
    extra = ["--lr-schedule", a.lr_schedule, "--warmup-steps", str(a.warmup_steps),
             "--weight-decay", repr(a.weight_decay), "--max-grad-norm", repr(a.max_grad_norm)]
    if a.no_sync:
        extra.append("--no-sync")
    with tempfile.TemporaryDirectory(prefix="shardtune_bench_") as out:
        m = shardtune_run(a, out, strategy, a.nproc, a.global_batch, a.steps, a.lr, extra)
    steps = m["steps"]
    return {"times": [s["time_s"] for s in steps], "losses": [s["loss"] for s in steps],
            "grad_norms": [s["grad_norm"] for s in steps], "lrs": [s["lr"] for s in steps],
            "torch_version": m["environment"]["torch_version"]}


def export_initial_weights(a, out):
    """OUT/model.safetensors with the initial weights of --seed (lr 1e-300: see the docstring at
    the top); returns the export run's
    step-1 loss (on global sequence 0: one rank, global batch 1)."""
    m = shardtune_run(a, out, "no_shard", 1, a.micro_batch, 1, 1e-300,  # --lr 0 is refused
                      ["--weight-decay", "0", "--warmup-steps", "0", "--lr-schedule", "constant",
                       "--max-grad-norm", "0", "--export-full-state-dict"])
    return m["steps"][0]["loss"], m["environment"]


# ------------------------------------------------------------------------------ PyTorch ranks

# Found with the import worked around (dataclass default patched): FSDP 1.13 still cannot run.
FSDP_WHY = ("(past the import, torch 1.13's FSDP is CUDA-only: FullyShardedDataParallel."
            "_get_compute_device calls torch.cuda.current_device() for a CPU module)")


def import_fsdp():
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy  # noqa: F401
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy  # noqa: F401
    return FullyShardedDataParallel, ShardingStrategy, transformer_auto_wrap_policy


def torch_rank(rank, world, port, kind, spec, a, result_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=a.timeout))
    try:
        model = LlamaForCausalLM(spec)
        check_and_load(model, read_safetensors(a.weights), a.weights)
        if kind == "ddp":
            model = nn.parallel.DistributedDataParallel(model)
        else:
            FSDP, Strategy, wrap_policy = import_fsdp()
            policy = functools.partial(wrap_policy, transformer_layer_cls={DecoderLayer})
            # device_id cpu: newer torch takes it as the compute device (CPU FSDP over gloo)
            model = FSDP(model, sharding_strategy=getattr(Strategy, kind.split(":")[1]),
                         auto_wrap_policy=policy, device_id=torch.device("cpu"))
        params = list(model.parameters())
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=a.weight_decay, foreach=False)
        data = ByteData(a.data, a.seq_len)
        B = a.micro_batch
        accum = a.global_batch // (B * world)
        use_no_sync = a.no_sync
        times, losses, norms, lrs = [], [], [], []
        for step in range(1, a.steps + 1):
            t0 = time.perf_counter()
            loss_sum = torch.zeros((), dtype=torch.float64)
            for m in range(accum):
                tokens, labels = micro_batch(data, step, m, rank, world, B, a.global_batch)
                ctx = model.no_sync() if use_no_sync and m + 1 < accum else torch.enable_grad()
                with ctx:
                    loss = model(tokens, labels)
                    (loss / accum).backward()
                loss_sum += loss.detach().double()
            total = (loss_sum / accum).reshape(1)
            dist.all_reduce(total)
            # max norm 0 (no clipping): a huge max norm gives coefficient 1, the L2 norm reported
            max_norm = a.max_grad_norm if a.max_grad_norm > 0 else 1e30
            if kind == "ddp":
                norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            else:
                norm = model.clip_grad_norm_(max_norm)
            lr = learning_rate(a, step)
            for g in opt.param_groups:
                g["lr"] = lr
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - t0)
            losses.append(total.item() / world)
            norms.append(float(norm))
            lrs.append(lr)
        result = {"times": times, "losses": losses, "grad_norms": norms, "lrs": lrs}
    except Exception as e:  # FSDP on torch 1.13 lands here
        result = {"error": f"{type(e).__name__}: {e}".strip().replace("\n", " "),
                  "traceback": traceback.format_exc()}
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(result, f)
    # a failed rank leaves without touching the group: its peers may be inside a collective
    if "error" in result:
        os._exit(1)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# BLAS pools sized like shardtune's ranks (run.cc: at::set_num_threads + SetBlasThreads): a
# pthread OpenBLAS keeps its own pool, one thread per core, that torch.set_num_threads does not
# size. Read when the library loads, so set in the environment the spawned ranks inherit.
BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS")


def run_torch(a, spec, kind):
    with tempfile.TemporaryDirectory(prefix="torch_bench_") as d:
        path = os.path.join(d, "rank0.json")
        err = None
        saved = {k: os.environ.get(k) for k in BLAS_THREAD_VARS}
        os.environ.update({k: str(a.threads) for k in BLAS_THREAD_VARS})
        try:
            mp.spawn(torch_rank, args=(a.nproc, free_port(), kind, spec, a, path),
                     nprocs=a.nproc, join=True)
        except Exception as e:
            err = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)  # rank 0's result or its exception
        return {"error": err or "no result written by rank 0"}


# ------------------------------------------------------------------------------------- header

def blas_library():
    """The BLAS shared object libtorch resolved in this process (after a matmul)."""
    x = torch.ones(64, 64)
    _ = x @ x
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and re.search(r"blas|mkl|blis|atlas", os.path.basename(fields[5])):
                lib = os.path.realpath(fields[5])
                if lib not in libs:
                    libs.append(lib)
    if not libs:
        libblas = "/lib/x86_64-linux-gnu/libblas.so.3"
        return os.path.realpath(libblas) + " (from the libblas.so.3 link)" \
            if os.path.exists(libblas) else "unknown"
    names = []
    for lib in libs:
        kind = ("OpenBLAS" if "openblas" in lib else "MKL" if "mkl" in lib else
                "BLIS" if "blis" in lib else "ATLAS" if "atlas" in lib else
                "reference BLAS" if "/blas/" in lib else "")
        names.append(f"{lib} ({kind})" if kind else lib)
    return ", ".join(names)


def loaded_libtorch():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libtorch_cpu" in line:
                return os.path.realpath(line.split()[-1])
    return None


def exec_libtorch(shardtune):
    exe = os.path.join(os.path.dirname(shardtune), "shardtune-exec")
    try:
        out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    except OSError:
        return None
    m = re.search(r"libtorch_cpu\S*\s+=>\s+(\S+)", out)
    return os.path.realpath(m.group(1)) if m else None


# --------------------------------------------------------------------------------------- main

def median_after_first(times):
    return statistics.median(times[1:] if len(times) > 1 else times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shardtune", default="build/cli/shardtune")
    p.add_argument("--model", default="tiny-llama", help="preset, shardtune.model or HF config")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-schedule", choices=("cosine", "wsd", "constant"), default="cosine")
    p.add_argument("--warmup-steps", type=int, default=None, help="default: steps / 10")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--no-sync", action="store_true",
                   help="reduce gradients once per step: shardtune --no-sync, DDP/FSDP no_sync()")
    p.add_argument("--compare-steps", type=int, default=0, help="0: all steps")
    p.add_argument("--timeout", type=int, default=300, help="gloo timeout of the PyTorch ranks")
    a = p.parse_args()
    if a.warmup_steps is None:
        a.warmup_steps = a.steps // 10  # executor/train/trainer.cc
    if not os.path.exists(a.shardtune):
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", a.shardtune)
        if os.path.exists(here):
            a.shardtune = os.path.normpath(here)
    a.shardtune = os.path.abspath(a.shardtune)
    if a.global_batch % (a.micro_batch * a.nproc) != 0:
        sys.exit("--global-batch must be a multiple of --micro-batch x --nproc")
    compare = min(a.steps, a.compare_steps) if a.compare_steps > 0 else a.steps
    model_name, spec = load_spec(a)
    torch.set_num_threads(a.threads)

    with tempfile.TemporaryDirectory(prefix="cpu_vs_pytorch_") as tmp:
        a.data = os.path.join(tmp, "data.txt")
        nbytes = max(1 << 16, a.steps * a.global_batch * a.seq_len + a.seq_len + 1)  # no wrap
        write_pseudo_text(a.data, nbytes, a.seed)
        export_dir = os.path.join(tmp, "init")
        os.mkdir(export_dir)
        export_loss, st_env = export_initial_weights(a, export_dir)
        a.weights = os.path.join(export_dir, "model.safetensors")
        tensors = read_safetensors(a.weights)
        check_init_norms(tensors, a.weights)
        ref = LlamaForCausalLM(spec)
        check_and_load(ref, tensors, a.weights)
        with torch.no_grad():
            tok, lab = micro_batch(ByteData(a.data, a.seq_len), 1, 0, 0, 1, a.micro_batch,
                                   a.micro_batch)
            torch_init_loss = ref(tok, lab).item()
        n_params = sum(v.numel() for v in tensors.values())
        del ref, tensors

        blas = blas_library()
        ours_lib, py_lib = exec_libtorch(a.shardtune), loaded_libtorch()
        same = ("same libtorch_cpu as shardtune-exec" if ours_lib and ours_lib == py_lib else
                f"shardtune-exec links {ours_lib or 'an unknown libtorch'}, python {py_lib}")
        accum = a.global_batch // (a.micro_batch * a.nproc)
        print(f"# {model_name} ({n_params / 1e6:.2f}M params), {a.nproc} ranks x {a.threads} "
              f"thread(s), global batch {a.global_batch} x {a.seq_len} tokens (micro-batch "
              f"{a.micro_batch}, {accum} micro-batches/rank), fp32, {a.steps} steps; "
              f"{time.strftime('%Y-%m-%d')}")
        print(f"# torch {torch.__version__} (python), BLAS: {blas}; {same}")
        if st_env.get("blas"):
            print(f"# shardtune (LibTorch {st_env.get('torch_version')}) reports BLAS: "
                  f"{st_env['blas']}")
        sync = "once per step (--no-sync)" if a.no_sync else "every micro-batch"
        print(f"# AdamW lr {a.lr:g} {a.lr_schedule}, warmup {a.warmup_steps}, weight decay "
              f"{a.weight_decay:g}, clip {a.max_grad_norm:g}; seed {a.seed}; gradients reduced "
              f"{sync}")
        print(f"# init check (global sequence 0, initial weights): shardtune loss "
              f"{export_loss:.6f}, PyTorch {torch_init_loss:.6f}, |diff| "
              f"{abs(export_loss - torch_init_loss):.2e}")
        sys.stdout.flush()

        results, notes = collections.OrderedDict(), []
        for strategy in ("no_shard", "full_shard"):
            results[f"shardtune {strategy}"] = run_ours(a, strategy)
        results["pytorch DDP (gloo)"] = run_torch(a, spec, "ddp")
        fsdp_configs = ["pytorch FSDP FULL_SHARD", "pytorch FSDP NO_SHARD"]
        try:
            import_fsdp()
            import_error = None
        except Exception as e:
            import_error = f"{type(e).__name__}: {e}".strip().replace("\n", " ")
        if import_error:
            extra = f" {FSDP_WHY}" if torch.__version__.startswith("1.") else ""
            notes.append(f"pytorch FSDP: import failed on torch {torch.__version__} / Python "
                         f"{sys.version.split()[0]}: {import_error}{extra}")
        else:
            for name, kind in zip(fsdp_configs, ("fsdp:FULL_SHARD", "fsdp:NO_SHARD")):
                r = run_torch(a, spec, kind)
                if "error" in r:
                    notes.append(f"{name}: failed on CPU/gloo, torch {torch.__version__}: "
                                 f"{r['error']}")
                else:
                    results[name] = r
        ddp = results["pytorch DDP (gloo)"]
        if "error" in ddp:
            notes.append(f"pytorch DDP (gloo): failed: {ddp['error']}")

    ours_lrs = results["shardtune no_shard"]["lrs"]
    for name, r in results.items():  # the replicated LR schedule must be shardtune's
        if "error" not in r and any(abs(x - y) > 1e-12 * max(abs(y), 1e-30)
                                    for x, y in zip(r["lrs"], ours_lrs)):
            notes.append(f"{name}: LR schedule differs from shardtune's: {r['lrs']} vs {ours_lrs}")
    base = results["shardtune no_shard"]["losses"][:compare]
    ddp_t = median_after_first(ddp["times"]) if "error" not in ddp else None
    print(f"{'config':<26}{'median_step_s':>14}{'min..max_s':>14}{'ratio_vs_ddp':>14}"
          f"{'final_loss':>12}{'max|dloss|':>12}")
    for name, r in results.items():
        if "error" in r:
            continue
        t = median_after_first(r["times"])
        tail = r["times"][1:] or r["times"]
        spread = f"{min(tail):.3f}..{max(tail):.3f}"
        ratio = f"{t / ddp_t:.2f}" if ddp_t else "n/a"
        diff = max(abs(x - y) for x, y in zip(r["losses"][:compare], base))
        dcol = "-" if name == "shardtune no_shard" else f"{diff:.2e}"
        print(f"{name:<26}{t:>14.4f}{spread:>14}{ratio:>14}{r['losses'][-1]:>12.6f}{dcol:>12}")
    for n in notes:
        print(f"# {n}")
    print(f"# max|dloss|: over steps 1..{compare}, against shardtune no_shard. Per-step loss "
          "(grad norm before clipping):")
    ok = [(name, r) for name, r in results.items() if "error" not in r]
    print("step" + "".join(f"{name.replace('pytorch ', ''):>28}" for name, _ in ok))
    for i in range(a.steps):
        print(f"{i + 1:>4}" + "".join(f"{r['losses'][i]:>16.6f} ({r['grad_norms'][i]:8.5f})"
                                      for _, r in ok))
    return 0


if __name__ == "__main__":
    sys.exit(main())
