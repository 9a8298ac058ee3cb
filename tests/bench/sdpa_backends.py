#!/usr/bin/env python3
"""torch's SDPA forced to each backend (default, FlashAttention-2, cuDNN, memory-efficient) at
torchtitan's Llama-3-8B shape (B 2, 32 heads, 8 KV heads, head_dim 128, causal), forward and
backward, at each sequence length given (default 8192). With more than one length each line
starts with "S <length> ". Run by the GPU session scripts (gpu_session.sh, gpu_sdpa_session.sh).

Usage: sdpa_backends.py [SEQ_LEN ...]"""
import contextlib, sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
B, H, KV, D = 2, 32, 8, 128
seq_lens = [int(s) for s in sys.argv[1:]] or [8192]
for S in seq_lens:
    label = f"S {S} " if len(seq_lens) > 1 else ""
    q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, KV, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(B, KV, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
    flops = 4 * S * S * H * D / 2 * B  # causal forward
    def timed(fn, n=10):
        for _ in range(3): fn()
        torch.cuda.synchronize(); s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        for _ in range(n): fn()
        e.record(); torch.cuda.synchronize(); return s.elapsed_time(e) / n / 1e3
    for name, be in [("default", None), ("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                     ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
        try:
            ctx = sdpa_kernel([be]) if be is not None else contextlib.nullcontext()
            with ctx:
                def forward_only():
                    with torch.no_grad():
                        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                fwd = timed(forward_only)
                both = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).backward(g))
            print(f"{label}{name}: forward {fwd*1e3:.3f} ms ({flops/fwd/1e12:.0f} TFLOP/s), backward "
                  f"{(both-fwd)*1e3:.3f} ms ({2.5*flops/(both-fwd)/1e12:.0f} TFLOP/s)")
        except Exception as ex:
            print(f"{label}{name}: {type(ex).__name__}: {str(ex).splitlines()[0][:200]}")
