#!/usr/bin/python3
"""Step time of shardtune's own FSDP runtime (NO_SHARD and FULL_SHARD) against PyTorch DDP on
Gloo, on the same Llama-layout model, batch, sequence length, thread count and world size, on
this CPU. A benchmark, not a test: it prints a table and step-time ratios (ours / DDP).

    /usr/bin/python3 tests/executor/bench/ddp_vs_shardtune.py --shardtune build/cli/shardtune \
        [--model tiny-llama] [--nproc 2] [--steps 8] [--seq-len 128] [--global-batch 8] [--threads 1]

The PyTorch side rebuilds the preset's shape from `shardtune models --json` with torch.nn:
RMSNorm in fp32, rotary (rotate_half), GQA by repeat_kv, SwiGLU, eager causal attention, fp32,
AdamW + clip_grad_norm_(1.0), gradient accumulation under DDP's no_sync(). Both sides report
the mean step time over the steps after the first (one-time costs excluded).
Needs Debian's python3-torch (1.13, with Gloo). On a shared or loaded machine the ratios are
noise-dominated; run it on an idle one.
Measured on the 2-core development VM (2026-11-22, tiny-llama, 2 ranks x 1 thread, global batch
4 x 128 tokens): DDP 1.75 s/step, shardtune NO_SHARD 1.77 s (1.01x), FULL_SHARD 1.57 s (0.90x).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotary(x, theta=10000.0):  # x: [B, heads, S, D]
    S, D = x.shape[2], x.shape[3]
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    freqs = torch.outer(torch.arange(S, dtype=torch.float32), inv)
    emb = torch.cat([freqs, freqs], -1)
    x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    return x * emb.cos() + torch.cat([-x2, x1], -1) * emb.sin()


class Block(nn.Module):
    def __init__(self, s):
        super().__init__()
        H, a, kv, D, Fh = s["hidden"], s["num_heads"], s["num_kv_heads"], s["head_dim"], s["ffn_hidden"]
        self.a, self.kv, self.D = a, kv, D
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(H), RMSNorm(H)
        self.q_proj = nn.Linear(H, a * D, bias=False)
        self.k_proj = nn.Linear(H, kv * D, bias=False)
        self.v_proj = nn.Linear(H, kv * D, bias=False)
        self.o_proj = nn.Linear(a * D, H, bias=False)
        self.gate_proj = nn.Linear(H, Fh, bias=False)
        self.up_proj = nn.Linear(H, Fh, bias=False)
        self.down_proj = nn.Linear(Fh, H, bias=False)

    def attention(self, x):
        B, S, _ = x.shape
        q = rotary(self.q_proj(x).view(B, S, self.a, self.D).transpose(1, 2))
        k = rotary(self.k_proj(x).view(B, S, self.kv, self.D).transpose(1, 2))
        v = self.v_proj(x).view(B, S, self.kv, self.D).transpose(1, 2)
        rep = self.a // self.kv
        k = k[:, :, None].expand(B, self.kv, rep, S, self.D).reshape(B, self.a, S, self.D)
        v = v[:, :, None].expand(B, self.kv, rep, S, self.D).reshape(B, self.a, S, self.D)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.D)
        mask = torch.ones(S, S, dtype=torch.bool).triu(1)
        p = torch.softmax(scores.masked_fill(mask, float("-inf")), -1, dtype=torch.float32).to(q.dtype)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, S, self.a * self.D))

    def forward(self, x):
        h = x + self.attention(self.input_layernorm(x))
        y = self.post_attention_layernorm(h)
        return h + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Model(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.embed_tokens = nn.Embedding(s["vocab_size"], s["hidden"])
        self.layers = nn.ModuleList(Block(s) for _ in range(s["num_layers"]))
        self.norm = RMSNorm(s["hidden"])
        self.lm_head = nn.Linear(s["hidden"], s["vocab_size"], bias=False)

    def forward(self, tokens, labels):
        x = self.embed_tokens(tokens)
        for b in self.layers:
            x = b(x)
        logits = self.lm_head(self.norm(x)).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.reshape(-1))


def ddp_rank(rank, world, port, spec, a, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(Model(spec))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accum = a.global_batch // world
    gen = torch.Generator().manual_seed(rank)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        for m in range(accum):
            tokens = torch.randint(spec["vocab_size"], (1, a.seq_len + 1), generator=gen)
            ctx = model.no_sync() if m + 1 < accum else torch.enable_grad()
            with ctx:
                (model(tokens[:, :-1], tokens[:, 1:]) / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    if rank == 0:
        with open(out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(spec, a):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        mp.spawn(ddp_rank, args=(a.nproc, free_port(), spec, a, f.name), nprocs=a.nproc, join=True)
        times = json.load(open(f.name))
    return statistics.mean(times[1:] if len(times) > 1 else times)


def run_ours(strategy, a):
    with tempfile.TemporaryDirectory() as out:
        cmd = [a.shardtune, "run", "--model", a.model, "--strategy", strategy, "--precision", "fp32",
               "--steps", str(a.steps), "--seq-len", str(a.seq_len), "--global-batch", str(a.global_batch),
               "--nproc", str(a.nproc), "--threads", str(a.threads), "--no-trace", "--out", out,
               "--lr-schedule", "constant", "--warmup-steps", "0"]
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"shardtune run failed ({r.returncode}): {r.stderr}")
        m = json.load(open(os.path.join(out, "measurements.json")))
        return m["summary"]["mean_step_time_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shardtune", required=True)
    p.add_argument("--model", default="tiny-llama")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    models = json.loads(subprocess.run([a.shardtune, "models", "--json"], check=True,
                                       capture_output=True, text=True).stdout)
    spec = next(m["spec"] for m in models if m["name"] == a.model)
    print(f"# {a.model}, {a.nproc} ranks x {a.threads} thread(s), global batch {a.global_batch} x "
          f"{a.seq_len} tokens, fp32, AdamW, {a.steps} steps (mean of steps 2..{a.steps}); "
          f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    ddp = run_ddp(spec, a)
    print(f"{'config':<28}{'step_time_s':>12}{'ratio_vs_ddp':>14}")
    print(f"{'pytorch DDP (gloo)':<28}{ddp:>12.4f}{1.0:>14.2f}")
    for strategy in ("no_shard", "full_shard"):
        t = run_ours(strategy, a)
        print(f"{'shardtune ' + strategy:<28}{t:>12.4f}{t / ddp:>14.2f}")


if __name__ == "__main__":
    sys.exit(main())
