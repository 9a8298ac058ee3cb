#!/usr/bin/env python3
"""Measures what verl's fused log-prob head (use_fused_kernels, fused_kernel_options.impl_backend
torch) allocates, to check the recipe shardtune estimates it with (model/activations.cc
VerlFusedTorchHead, LossKernel::kVerlFusedTorch; the step walk adds the chunk transients in
simulator/step_walk_backward.cc).

It runs verl's own FusedLinearForPPOFunction (verl/utils/experimental/torch_functional.py), read
from a verl checkout (--verl-file PATH, or `import verl` when installed); nothing of verl is
copied here. From a bare mirror:
    git --git-dir=/work/.mirror/volcengine+verl/repo show \
        HEAD:verl/utils/experimental/torch_functional.py > /tmp/verl_torch_functional.py
    python3 tests/bench/verl_fused_memory.py --verl-file /tmp/verl_torch_functional.py

Prints, for the log-prob gradient alone and with the entropy's gradient (entropy_coeff != 0), the
peak above the start of forward, what forward leaves, and the peak above the start of backward,
each beside what shardtune's recipe predicts for the same shapes:
  forward   chunk rows x 16 V (fp32 logits, probs, log_probs, one temporary) + outputs 2 x T x e
  backward  zeros_like(hidden) T H e + zeros_like(weight) V H e + the incoming gradients
            + max(rows x 20 V (28 V with the entropy),
                  rows x (14 V (18 V) + e H) + V H e)   [the chunk's weight GEMM]
            + from the second chunk on, the chunk before's dW and dhidden (V H e + rows H e),
              which the loop's `h, v = ...` keeps bound until the next call returns
On CUDA it reads torch.cuda.max_memory_allocated; on CPU it replays the profiler's allocation
events (profile_memory=True).
"""
import argparse
import importlib.util
import sys

import torch


def load_function(path):
    if path:
        spec = importlib.util.spec_from_file_location("verl_torch_functional", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.FusedLinearForPPOFunction
    try:
        from verl.utils.experimental.torch_functional import FusedLinearForPPOFunction
    except ImportError as e:
        sys.exit(f"verl is not importable here ({e}); pass --verl-file PATH to verl's "
                 "verl/utils/experimental/torch_functional.py")
    return FusedLinearForPPOFunction


def measure(run_forward, device):
    """(forward peak above start, held after forward, backward peak above its start) in bytes."""
    if device == "cuda":
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss = run_forward()
        torch.cuda.synchronize()
        fwd_peak = torch.cuda.max_memory_allocated() - start
        held = torch.cuda.memory_allocated() - start
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        return fwd_peak, held, torch.cuda.max_memory_allocated() - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = run_forward()
        with torch.profiler.record_function("shardtune.backward_starts"):
            loss.backward()
    events = list(prof.profiler.kineto_results.events())
    mem = sorted([(e.start_us(), e.nbytes()) for e in events if e.name() == "[memory]"],
                 key=lambda x: x[0])
    mark = [e.start_us() for e in events if e.name() == "shardtune.backward_starts"][0]
    live, fwd_peak, at_mark, bwd_peak = 0, 0, None, None
    for t, nbytes in mem:
        if t >= mark and at_mark is None:
            at_mark = live
            bwd_peak = live
        live += nbytes
        if at_mark is None:
            fwd_peak = max(fwd_peak, live)
        else:
            bwd_peak = max(bwd_peak, live)
    return fwd_peak, at_mark, bwd_peak - at_mark


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verl-file", default="", help="verl/utils/experimental/torch_functional.py")
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=1536, help="3 chunks of 512")
    a = ap.parse_args()
    fn = load_function(a.verl_file)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16
    e = 2
    V, H, T = a.vocab, a.hidden, a.tokens
    rows = min(512, T)  # FusedLinearForPPO's default chunk_size
    torch.manual_seed(0)
    w = torch.randn(V, H, device=device, dtype=dtype, requires_grad=True)
    hidden = torch.randn(T, H, device=device, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, V, (T,), device=device)

    print(f"torch {torch.__version__} on {device}; V={V} H={H} T={T}, chunks of {rows} rows")
    print("variant          forward peak (pred)      held (pred)        backward peak (pred)   MB")
    mb = 1e6
    for entropy in (False, True):
        def run_forward():
            log_probs, ent = fn.apply(hidden, w, labels, 1.0, 512)
            loss = log_probs.float().sum()
            if entropy:
                loss = loss - 0.01 * ent.float().sum()
            return loss

        fwd, held, bwd = measure(run_forward, device)
        w.grad = None
        hidden.grad = None
        # shardtune's recipe (model/activations.cc VerlFusedTorchHead), same shapes.
        outputs = 2 * T * e
        pred_fwd = rows * 16 * V + outputs
        kept = 5 * 4 if entropy else 4 * 4
        chunk = max(rows * ((7 if entropy else 5) * 4), rows * (kept + 2 * e)) * V
        at_dw = rows * ((kept - 4 + e) * V + e * H) + V * H * e
        incoming = 2 * T * e  # the outputs' gradients (log_probs.float() backward: bf16)
        # From the second chunk on, the loop's `h, v` of the chunk before are still bound.
        carry = V * H * e + rows * H * e if T > rows else 0
        pred_bwd = T * H * e + V * H * e + incoming + carry + max(chunk, at_dw)
        name = "with entropy" if entropy else "log-probs only"
        print(f"{name:15s} {fwd / mb:9.2f} ({pred_fwd / mb:8.2f})  {held / mb:7.2f} "
              f"({outputs / mb:6.2f})   {bwd / mb:9.2f} ({pred_bwd / mb:8.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
