#!/usr/bin/env python3
"""Measures what verl's actor log-prob path allocates around the logits, in units of one bf16
[T, V] tensor (2·V·T bytes), to check the recipe shardtune estimates it with
(model/activations.cc VerlFlashCeHead, LossKernel::kVerlFlashCe).

verl/workers/actor/dp_actor.py _forward_micro_batch (use_remove_padding, volcengine/verl@b178a3c):
    logits_rmpad = output.logits.squeeze(0)          # a view of the lm_head output
    logits_rmpad.div_(temperature)                    # in place on the view: CopySlices
    log_probs = logprobs_from_logits(logits_rmpad, labels, inplace_backward=True)
logprobs_from_logits takes flash-attn's Triton cross_entropy_loss
(flash_attn/ops/triton/cross_entropy.py CrossEntropyLoss): forward saves (logits, lse, labels) and
allocates losses, lse, z_losses [T] fp32; backward writes d logits into the logits buffer when
inplace_backward. On a machine without flash-attn (this script's CPU run) that function is
emulated below with the same saves and the same in-place backward; the autograd machinery around
it (the squeeze view, div_ on it, AsStridedBackward0 and CopySlices) is torch's own.

Usage: python3 tests/bench/verl_logprob_memory.py [--vocab V --hidden H --tokens T]
The padded branch (use_remove_padding false; VerlPaddedCeHead, LossKernel::kVerlPaddedCe):
    logits = output.logits; logits.div_(temperature)       # the base itself, in place
    logits = logits[:, -response_length - 1 : -1, :]        # a view
    log_probs = logprobs_from_logits(logits, responses)     # reshape(-1, V) copies the view
is the last variant, with f = response / S of the T tokens' logits copied.

Prints, per variant, the bytes held from forward to backward and the backward's peak above what
was live when backward started, both / (2·V·T). On CUDA it reads torch.cuda.max_memory_allocated;
on CPU it replays the profiler's allocation events (profile_memory=True).
"""
import argparse
import sys

import torch


def flash_ce():
    """flash-attn's Triton cross_entropy_loss (verl's path) when it imports, else None."""
    try:
        from flash_attn.ops.triton.cross_entropy import cross_entropy_loss
    except Exception:  # not installed, or no Triton/CUDA here
        return None

    def ce(logits, labels):
        losses, _ = cross_entropy_loss(logits, labels, inplace_backward=True)
        return losses

    return ce


class EmulatedFlashCe(torch.autograd.Function):
    """flash-attn CrossEntropyLoss's memory behaviour: saves logits and lse; backward writes
    (softmax - onehot) * dloss into the logits buffer in place."""

    @staticmethod
    def forward(ctx, logits, labels):
        lse = torch.logsumexp(logits.float(), dim=-1)  # the kernel keeps this in registers
        losses = lse - logits.gather(-1, labels.unsqueeze(-1)).squeeze(-1).float()
        ctx.save_for_backward(logits, lse, labels)
        return losses

    @staticmethod
    def backward(ctx, dlosses):
        logits, lse, labels = ctx.saved_tensors
        # Row by row, as the Triton kernel does, so no [T, V] fp32 scratch exists.
        for i in range(logits.shape[0]):
            p = torch.exp(logits[i].float() - lse[i])
            p[labels[i]] -= 1.0
            logits[i].copy_((p * dlosses[i]).to(logits.dtype))
        return logits, None


def run_variant(make_loss, device):
    torch.manual_seed(0)
    if device == "cuda":
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        loss = make_loss()
        held = torch.cuda.memory_allocated() - start  # what forward leaves for backward
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        return held, torch.cuda.max_memory_allocated() - before
    from torch.profiler import profile, ProfilerActivity

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = make_loss()
        with torch.profiler.record_function("shardtune.backward_starts"):
            loss.backward()
    events = [e for e in prof.profiler.kineto_results.events()]
    mem = sorted(
        [(e.start_us(), e.nbytes()) for e in events if e.name() == "[memory]"], key=lambda x: x[0]
    )
    mark = [e.start_us() for e in events if e.name() == "shardtune.backward_starts"][0]
    live, at_mark, peak_after = 0, None, None
    for t, nbytes in mem:
        if t >= mark and at_mark is None:
            at_mark = live
            peak_after = live
        live += nbytes
        if at_mark is not None:
            peak_after = max(peak_after, live)
    return at_mark, peak_after - at_mark


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, default=4, help="padded path: sequences (T = batch x S)")
    ap.add_argument("--response", type=int, default=32, help="padded path: response positions")
    a = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16
    V, H, T = a.vocab, a.hidden, a.tokens
    unit = 2 * V * T
    w = torch.randn(V, H, device=device, dtype=dtype, requires_grad=True)
    hidden = torch.randn(1, T, H, device=device, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, V, (T,), device=device)
    real = flash_ce() if device == "cuda" else None
    loss_fn = real if real is not None else EmulatedFlashCe.apply

    def verl_rmpad():  # dp_actor.py: squeeze view, div_ on the view, CE in place
        logits = torch.nn.functional.linear(hidden, w)
        logits_rmpad = logits.squeeze(0)
        logits_rmpad.div_(1.0)
        return (-loss_fn(logits_rmpad, labels)).sum()

    def div_on_base():  # for comparison: div_ before the view (no CopySlices)
        logits = torch.nn.functional.linear(hidden, w)
        logits.div_(1.0)
        return (-loss_fn(logits.squeeze(0), labels)).sum()

    B = a.batch
    S = T // B
    R = a.response
    assert B * S == T and 0 < R < S, "--tokens must be a multiple of --batch, 0 < --response < S"
    hidden_padded = hidden.detach().reshape(B, S, H).requires_grad_(True)
    responses = torch.randint(0, V, (B * R,), device=device)

    def verl_padded():  # dp_actor.py without rmpad: div_ on the base, slice, reshape's copy, CE
        logits = torch.nn.functional.linear(hidden_padded, w)
        logits.div_(1.0)
        logits = logits[:, -R - 1 : -1, :]
        return (-loss_fn(logits.reshape(-1, V), responses)).sum()

    def no_div():
        logits = torch.nn.functional.linear(hidden, w)
        return (-loss_fn(logits.squeeze(0), labels)).sum()

    print(f"torch {torch.__version__} on {device}; V={V} H={H} T={T}; unit 2VT = {unit} bytes; "
          f"loss: {'flash-attn cross_entropy_loss' if real is not None else 'emulated flash-attn'}")
    print("variant                           held/2VT   backward peak above start/2VT")
    for name, fn in [
        ("verl rmpad (view div_, CE in place)", verl_rmpad),
        ("div_ on the base, CE in place", div_on_base),
        ("no div, CE in place", no_div),
        (f"verl padded (f = {R}/{S})", verl_padded),
    ]:
        held, bwd = run_variant(fn, device)
        w.grad = None
        hidden.grad = None
        hidden_padded.grad = None
        print(f"{name:34s} {held / unit:8.2f}   {bwd / unit:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
