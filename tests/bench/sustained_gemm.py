#!/usr/bin/env python3
"""A sustained bf16 8192^3 matmul for 30 s on the GPU: its TFLOP/s second by second, to set beside
nvidia-smi's SM clock and power (whether the burst rate a probe measures holds under sustained
load). Run by the GPU session scripts (gpu_session.sh, gpu_sdpa_session.sh)."""
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
flop = 2 * 8192 ** 3; t_end = time.time() + 30; second = 0
while time.time() < t_end:
    s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record(); n = 0
    t1 = time.time() + 1
    while time.time() < t1:
        for _ in range(20): a @ b
        n += 20
        torch.cuda.synchronize()
    e.record(); torch.cuda.synchronize()
    print(f"second {second}: {flop * n / (s.elapsed_time(e) / 1e3) / 1e12:.0f} TFLOP/s"); second += 1
