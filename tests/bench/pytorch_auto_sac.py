#!/usr/bin/env python3
"""Reference (not a test): PyTorch's automatic selective activation checkpointing (auto-SAC)
policy, reimplemented in pure Python (standard library only) for a stack of identical
transformer blocks, next to the exact optimum over per-block save sets.

What is reimplemented, and from where
-------------------------------------
Every citation below is "file:line" in the blob versions listed here, which are the versions
that were read (the public code index's copies of pytorch/pytorch; line numbers were counted on
copies whose character counts matched the stored blobs exactly):

  [EST]  torch/distributed/_tools/sac_estimator.py  @ blob commit f49dea00a0621e0d74f886c23716c4e448f8e843
  [ILP]  torch/distributed/_tools/sac_ilp.py        @ blob commit f4dbd7cb8263123ba59e0a3971da81c7e08db09a
         (an older blob, 01e1011dab46b733a1c37e2ca639c967d38a5116, had FSDP terms p_i / max_p,
         `max_m + 3 * max_p <= memory_budget` and big-M = root fw runtime; the newer one above
         dropped them and uses M = 10**2. We follow the newer one.)
  [UTL]  torch/distributed/_tools/ilp_utils.py      @ blob commit 05f814fecfca7d2a17f28cbe7e1cb2d8d4c13230
  [AUTO] torch/distributed/_tools/auto_sac.py       @ blob commit 364a504dbf5d5862675b1cedc0cc121626f14141
         (the caller that turns sac_milp's discard ratios into per-op policies; this version
         references attributes -- `SACGreedyOrderMeta.random_inplace_ops`, a 7-argument
         `aggregate_stats` -- that the [EST]/[UTL] versions above do not have, so it comes from a
         development line of the same feature. Cited by function name only.)
  [PWLF] cjekel/piecewise_linear_fit_py pwlf/pwlf.py @ 07249ff1c2a5bf1d1428efac660e6c8f28848079
         (pwlf 2.6.0), the package [EST] calls for the piecewise-linear fit.

Pipeline in PyTorch (what each function here mirrors)
-----------------------------------------------------
1. SACEstimator records, per non-leaf module, every aten op of its forward: output bytes
   (CUDA storages rounded up to 512 B, [EST]:40-42, 450-453; view-like ops get 0 bytes,
   [EST]:464-465), runtime in ms (roofline or benchmark), view-like / random / in-place flags.
   The module's last non-view non-inplace op gets memory 0 (it is the block output, kept
   anyway), [EST]:356-369 (`_get_sac_stats`).
2. `_get_greedy_order_meta` ([EST]:494-577): view-like ops -> `recomputed_ops` (always
   recomputed, [EST]:529-530); random ops (if force_store_random) and in-place groups whose head
   is itself in-place -> `stored_ops` (always saved, [EST]:526-541); every other op (in-place
   groups and the random group as one unit) is a recompute candidate ([EST]:543-557), scored by
   MSPS = memory / runtime ("memory savings per second"; runtime 0 -> sys.float_info.max,
   [EST]:571), and sorted by MSPS DESCENDING ([EST]:574: `sort(key=msps, reverse=True)`; the
   comment above it says "increasing", the code sorts decreasing). Ties keep the iteration order
   of the Python set of op indices (ascending index for small ints in CPython) -- sort is stable.
3. `_get_sac_tradeoff_pwlf_stats` ([EST]:579-705), called with its default n_segments=2 by
   `pwlf_sac_tradeoff_curve()` which `aggregate_stats` calls without arguments ([UTL]:119):
   cumulative curve (discarded/sac_memory + delta, recompute/sac_runtime) with delta = 1e-2
   ([EST]:616), starting from the always-recomputed ops ([EST]:600-621), then each candidate in
   MSPS order ([EST]:624-629), then the always-stored ops ([EST]:630-642). It is an OrderedDict
   keyed by the x value, so equal x values overwrite. Then x is shifted right / y left
   (x = x_[:-1], y = y_[1:], [EST]:645-648: each x is paired with the recompute fraction *after*
   the next candidate -- an upper bound), n_segments = max(min(len(x) - 2, n_segments), 1)
   ([EST]:651) and `pwlf.PiecewiseLinFit(x, y).fit(n_segments)` ([EST]:649-652); slopes,
   intercepts, fit_breaks from `calc_slopes()` ([EST]:691-696).
4. `sac_milp` ([ILP]:35-217): see `pytorch_sac_ilp` below for the formulation.
5. For each AC'd module, budget = 1 - discard_ratio and either
   `get_optimal_checkpointing_policy_per_module` ([ILP]:225-295, a 0/1 knapsack) or
   `get_greedy_checkpointing_policy_per_module` ([AUTO], the default `SACAlgorithm.GREEDY` of
   `get_auto_sac_policies`) turns it into a save/recompute decision per op.

How our block maps onto SACEstimator's view of a module
-------------------------------------------------------
* Each of our `ops` (matmuls, sdpa) is one SACStats op: memory = output_bytes, runtime =
  recompute_s (converted to ms as SACStats stores ms). None is view-like, random (no dropout;
  [EST]:466-469 makes flash sdpa non-random when dropout_p == 0) or in-place.
* The memory-bound "other" ops (norms, silu, mul, RoPE, residual adds) are one pseudo-op
  "elementwise" with memory = other_saved_bytes and runtime = elementwise_recompute_s. In the
  real estimator they are separate aten ops with large MSPS (little time per byte), so they head
  the greedy order ("recompute first"). Our cost model says a checkpointed block ALWAYS
  recomputes them, so by default (other_mode="always_recompute") the pseudo-op is put where
  SACEstimator puts ops it always recomputes: `recomputed_ops` (the view-like class). That is
  consistent across all three uses: it is the first point of the curve ([EST]:600-621), it is
  forced to RECOMPUTE in the per-module knapsack ([ILP]:265-267) and it is pre-discarded by the
  greedy policy ([AUTO]). other_mode="candidate" instead treats it as an ordinary candidate
  (sorted by its MSPS; the knapsack may then *save* it, which our C++ cost model cannot express;
  the actual bytes/seconds reported still follow from the chosen decisions).
  Aggregating those ops into one pseudo-op gives the curve one point where the real estimator
  would have one per op (same end points, fewer intermediate points).
* Views (reshape/transpose): 0 bytes, ~0 s, always recomputed -> contribute nothing; omitted.
* The block's last op (final residual add) is the block output, not in our lists; the estimator
  zeroes its memory ([EST]:369), so nothing of ours is zeroed.
* The 512-byte rounding of [EST]:451 is not applied (our byte counts come from the planner).
* sac_memory (ACM) = sum(op bytes) + other_saved_bytes; sac_runtime (ACT) = sum(op times) +
  elementwise time. Everything listed is saved when the block is not checkpointed, so IA
  (`act_fw_per_module`, autograd-saved bytes) = ACM and the (ACM - IA) terms of sac_milp vanish.

Usage:
  python3 tests/bench/pytorch_auto_sac.py                      # self-test, Llama-3-8B-like block
  python3 tests/bench/pytorch_auto_sac.py block.json [GiB ...]  # a block printed by the C++ tool
"""
from __future__ import annotations

import itertools
import json
import math
import sys
from collections import OrderedDict

# ----------------------------------------------------------------------------------------------
# Constants taken from the sources
# ----------------------------------------------------------------------------------------------
DELTA = 1e-2                 # [EST]:616  delta added to every x of the trade-off curve
DEFAULT_N_SEGMENTS = 2       # [EST]:583 default, used via pwlf_sac_tradeoff_curve() ([UTL]:119)
MEM_MULTIPLIER = 2 ** 30     # [ILP]:66   memory in the MILP is in GiB
BIG_M_MS = 10.0 ** 2         # [ILP]:65   big-M (ms) of the rct linearisation
RATIO_DECIMALS = 4           # [ILP]:213  round(r[i].varValue, 4) in ac_decisions
TIME_DECIMALS = 2            # [ILP]:214  round(value(prob.objective), 2)
OTHER_NAME = "elementwise"   # our pseudo-op for the memory-bound ops


# ----------------------------------------------------------------------------------------------
# Block -> SACStats-like record and greedy order ([EST] _get_sac_stats / _get_greedy_order_meta)
# ----------------------------------------------------------------------------------------------
def _validate_block(block):
    for key in ("blocks", "block_input_bytes", "ops", "other_saved_bytes",
                "elementwise_recompute_s"):
        if key not in block:
            raise ValueError(f"block description lacks '{key}'")
    if int(block["blocks"]) < 1:
        raise ValueError("blocks must be >= 1")
    for op in block["ops"]:
        if op["output_bytes"] < 0 or op["recompute_s"] < 0:
            raise ValueError(f"negative size/time in op {op!r}")


def sac_stats(block, other_mode="always_recompute"):
    """The SACStats-like record of one block (see the module docstring for the mapping).

    Returns a dict with func_names, runtimes (ms, as SACStats.runtimes), memory (bytes),
    view_like_ops (indices always recomputed: the "other" pseudo-op in the default mode),
    rand_ops, inplace_ops, force_store_random -- the fields [EST] SACStats (lines 131-154) has.
    Index i < len(ops) is ops[i] (forward order); the pseudo-op is last.
    """
    if other_mode not in ("always_recompute", "candidate"):
        raise ValueError("other_mode must be 'always_recompute' or 'candidate'")
    _validate_block(block)
    ops = block["ops"]
    names = [op["name"] for op in ops] + [OTHER_NAME]
    runtimes = [float(op["recompute_s"]) * 1e3 for op in ops] + \
        [float(block["elementwise_recompute_s"]) * 1e3]
    memory = [int(op["output_bytes"]) for op in ops] + [int(block["other_saved_bytes"])]
    return {
        "func_names": names,
        "runtimes": runtimes,
        "memory": memory,
        "view_like_ops": [len(ops)] if other_mode == "always_recompute" else [],
        "rand_ops": [],
        "inplace_ops": [],
        "force_store_random": False,
    }


def greedy_order_meta(stats):
    """[EST] `_get_greedy_order_meta` (lines 494-577) for a module without random or in-place ops.

    recomputed_ops = view-like ops (Case 2, [EST]:529-530); stored_ops = {} (Cases 1/3a/3b need
    random or in-place ops); candidates = all other ops ([EST]:551-557), each with
    MSPS = memory / runtime (sys.float_info.max if runtime == 0, [EST]:571), sorted by MSPS
    descending ([EST]:574). Iterating the candidate indices in ascending order reproduces the
    iteration order of CPython's set of small ints, i.e. the tie order of the stable sort.
    """
    if stats["rand_ops"] or stats["inplace_ops"]:
        raise NotImplementedError("random / in-place ops are not part of our block model")
    n = len(stats["memory"])
    recomputed = set(stats["view_like_ops"])
    stored = set()
    candidates = sorted(set(range(n)) - recomputed - stored)
    msps_meta = []
    for idx in candidates:
        mem, rt = stats["memory"][idx], stats["runtimes"][idx]
        msps = (mem / rt) if rt > 0 else sys.float_info.max
        msps_meta.append({"op_idx": idx, "name": stats["func_names"][idx],
                          "memory": mem, "runtime": rt, "msps": msps})
    msps_meta.sort(key=lambda c: c["msps"], reverse=True)
    return {"recomputed_ops": recomputed, "stored_ops": stored, "msps_meta": msps_meta}


# ----------------------------------------------------------------------------------------------
# 1. Trade-off curve ([EST] _get_sac_tradeoff_pwlf_stats, steps 1-6, lines 600-642)
# ----------------------------------------------------------------------------------------------
def tradeoff_curve(block, other_mode="always_recompute"):
    """SACEstimator's trade-off curve of one block, as a list of (x, y) points, BEFORE the shift.

    x = discarded memory / sac_memory + DELTA, y = recompute runtime / sac_runtime:
      * first point: the always-recomputed ops ([EST]:600-621) -- with the default mapping, the
        memory-bound "other" ops;
      * one point after each candidate in MSPS-descending order ([EST]:624-629);
      * last point after adding the always-stored ops ([EST]:630-642; none here, so it only
        rewrites the previous key with the same value).
    Built in an OrderedDict keyed by x exactly like the source, so a candidate with 0 bytes
    rewrites the previous point's y instead of adding a point.
    """
    stats = sac_stats(block, other_mode)
    meta = greedy_order_meta(stats)
    mem, rt = stats["memory"], stats["runtimes"]
    sac_memory, sac_runtime = sum(mem), sum(rt)
    if sac_memory <= 0 or sac_runtime <= 0:
        raise ValueError("sac_memory and sac_runtime must be positive (PyTorch divides by them)")
    discarded = sum(mem[i] for i in meta["recomputed_ops"])
    recomp = sum(rt[i] for i in meta["recomputed_ops"])
    curve = OrderedDict()
    curve[discarded / sac_memory + DELTA] = recomp / sac_runtime
    for cand in meta["msps_meta"]:
        discarded += cand["memory"]
        recomp += cand["runtime"]
        curve[discarded / sac_memory + DELTA] = recomp / sac_runtime
    discarded += sum(mem[i] for i in meta["stored_ops"])
    recomp += sum(rt[i] for i in meta["stored_ops"])
    curve[discarded / sac_memory + DELTA] = recomp / sac_runtime
    return list(curve.items())


# ----------------------------------------------------------------------------------------------
# 2. Piecewise-linear fit ([EST] steps 7-9, lines 645-696; [PWLF] PiecewiseLinFit.fit)
# ----------------------------------------------------------------------------------------------
def _lstsq(columns, y):
    """Least squares by modified Gram-Schmidt (two passes), dropping numerically dependent
    columns (their coefficient is 0). Returns (beta, ssr). Stands in for scipy.linalg.lstsq
    (gelsd) used by [PWLF] lstsq (line 1624); identical fitted values / SSR for full-rank A."""
    q_basis, r_cols, kept = [], [], []
    for j, a in enumerate(columns):
        v = list(a)
        r = [0.0] * len(q_basis)
        for _ in range(2):
            for p, q in enumerate(q_basis):
                c = sum(qi * vi for qi, vi in zip(q, v))
                r[p] += c
                v = [vi - c * qi for vi, qi in zip(v, q)]
        nv = math.sqrt(sum(vi * vi for vi in v))
        na = math.sqrt(sum(ai * ai for ai in a))
        if nv <= 1e-12 * max(na, 1e-300):
            continue
        r.append(nv)
        q_basis.append([vi / nv for vi in v])
        r_cols.append(r)
        kept.append(j)
    qty = [sum(qi * yi for qi, yi in zip(q, y)) for q in q_basis]
    k = len(kept)
    coef = [0.0] * k
    for t in range(k - 1, -1, -1):
        s = qty[t] - sum(r_cols[u][t] * coef[u] for u in range(t + 1, k))
        coef[t] = s / r_cols[t][t]
    beta = [0.0] * len(columns)
    for t, j in enumerate(kept):
        beta[j] = coef[t]
    resid = list(y)
    for q, c in zip(q_basis, qty):
        resid = [ri - c * qi for ri, qi in zip(resid, q)]
    return beta, sum(ri * ri for ri in resid)


def _regression_columns(breaks, xs):
    """[PWLF] assemble_regression_matrix (lines 327-424), degree 1: columns
    1, x - b0, and for each interior break b_i: where(x > b_i, x - b_i, 0)."""
    cols = [[1.0] * len(xs), [x - breaks[0] for x in xs]]
    for b in breaks[1:-1]:
        cols.append([(x - b) if x > b else 0.0 for x in xs])
    return cols


def _fit_with_breaks(xs, ys, breaks):
    beta, ssr = _lstsq(_regression_columns(breaks, xs), ys)
    return beta, ssr


def _predict(beta, breaks, x):
    """[PWLF] predict (line 571) for degree 1."""
    v = beta[0] + beta[1] * (x - breaks[0])
    for i, b in enumerate(breaks[1:-1]):
        if x > b:
            v += beta[2 + i] * (x - b)
    return v


def _golden_min(f, lo, hi, iters=80):
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (c, fc) if fc <= fd else (d, fd)


def pwlf(curve, n_segments=DEFAULT_N_SEGMENTS, samples_per_interval=64):
    """The piecewise-linear fit SACEstimator requests, in pure Python.

    Steps as in [EST] `_get_sac_tradeoff_pwlf_stats`:
      7. shift: x = x_[:-1], y = y_[1:]                                    ([EST]:645-648)
      8. n_segments = max(min(len(x) - 2, n_segments), 1); pwlf fit(n_segments)  ([EST]:651-652)
      9. slopes, intercepts, fit_breaks from calc_slopes()                 ([EST]:691-696)

    What `pwlf.PiecewiseLinFit(x, y).fit(n)` computes ([PWLF] fit, lines 734-895): a
    CONTINUOUS piecewise-linear least-squares fit (degree 1, no weights) whose outer breakpoints
    are fixed at min(x) and max(x) ([PWLF]:218, _get_breaks 283-300) and whose n-1 interior
    breakpoints are chosen to minimise the sum of squared residuals by
    scipy.optimize.differential_evolution (best1bin, popsize 50, maxiter 1000, tol 1e-3,
    polish=True, seed=None; [PWLF]:863-881); then fit_with_breaks (least squares for the chosen
    breaks) and calc_slopes ([PWLF]:1217-1253): y_hat at the breaks, slopes = diff(y_hat) /
    diff(breaks), intercepts = y_hat[:-1] - slopes * breaks[:-1]. n = 1 is a plain line through
    all points ([PWLF]:849-854).

    Here the interior breakpoint search is deterministic instead of differential evolution:
    for one interior break (the default n_segments=2 case) SSR(b) is scanned over every
    interval between consecutive data x values (`samples_per_interval` points each, plus the
    data points) and the best sample is refined by golden-section search inside its interval;
    this finds the global minimiser that the (stochastic, unseeded) DE targets. For more interior
    breaks a coordinate-wise version of the same search is used (not needed by PyTorch's
    defaults). Returns dict(n_segments, fit_breaks, slopes, intercepts, beta, ssr, x, y).
    """
    x_all = [p[0] for p in curve]
    y_all = [p[1] for p in curve]
    xs, ys = x_all[:len(x_all) - 1], y_all[1:]
    if len(xs) < 2:
        raise ValueError("trade-off curve too short to fit (PyTorch's pwlf would fail too)")
    n_seg = max(min(len(xs) - 2, n_segments), 1)
    b0, bn = min(xs), max(xs)
    n_int = n_seg - 1

    def ssr_of(interior):
        return _fit_with_breaks(xs, ys, [b0] + sorted(interior) + [bn])[1]

    interior = []
    if n_int >= 1:
        span = bn - b0
        eps = 1e-9 * span
        knots = sorted(set([b0] + list(xs) + [bn]))

        def best_single(other):
            best_b, best_s = None, math.inf
            for lo, hi in zip(knots[:-1], knots[1:]):
                lo_i, hi_i = max(lo, b0 + eps), min(hi, bn - eps)
                if hi_i <= lo_i:
                    continue
                grid = [lo_i + (hi_i - lo_i) * k / samples_per_interval
                        for k in range(samples_per_interval + 1)]
                vals = [(ssr_of(other + [b]), b) for b in grid]
                s0, bb = min(vals)
                k = grid.index(bb)
                a = grid[max(k - 1, 0)]
                c = grid[min(k + 1, len(grid) - 1)]
                if c > a:
                    b_ref, s_ref = _golden_min(lambda t: ssr_of(other + [t]), a, c)
                    if s_ref < s0:
                        s0, bb = s_ref, b_ref
                if s0 < best_s:
                    best_s, best_b = s0, bb
            return best_b, best_s

        if n_int == 1:
            interior = [best_single([])[0]]
        else:  # coordinate descent from evenly spaced breaks (beyond PyTorch's defaults)
            interior = [b0 + span * (i + 1) / (n_int + 1) for i in range(n_int)]
            for _ in range(20):
                changed = False
                for i in range(n_int):
                    others = interior[:i] + interior[i + 1:]
                    b, _ = best_single(others)
                    if b is not None and abs(b - interior[i]) > 1e-12 * span:
                        interior[i], changed = b, True
                if not changed:
                    break
    breaks = [b0] + sorted(interior) + [bn]
    beta, ssr = _fit_with_breaks(xs, ys, breaks)
    y_hat = [_predict(beta, breaks, b) for b in breaks]
    slopes = [(y_hat[i + 1] - y_hat[i]) / (breaks[i + 1] - breaks[i]) for i in range(n_seg)]
    intercepts = [y_hat[i] - slopes[i] * breaks[i] for i in range(n_seg)]
    return {"n_segments": n_seg, "fit_breaks": breaks, "slopes": slopes,
            "intercepts": intercepts, "beta": beta, "ssr": ssr, "x": xs, "y": ys}


def milp_rcp(fit, r):
    """The recompute fraction sac_milp charges for discard ratio r: rcp >= 0 (variable bound,
    [ILP]:82-83) and rcp >= slope_s * r + intercept_s for every segment s ([ILP]:179-184), with
    rcp minimised through the objective -> max(0, max_s(...)). For a convex fit this equals the
    fitted curve; for a concave one the extended lines dominate (upper envelope)."""
    return max(0.0, max(a * r + b for a, b in zip(fit["slopes"], fit["intercepts"])))


def _convex_argmin(fit):
    """Smallest minimiser over [0, 1] of the convex function milp_rcp(fit, .)."""
    lines = list(zip(fit["slopes"], fit["intercepts"]))
    cands = {0.0, 1.0}
    for (a1, b1), (a2, b2) in itertools.combinations(lines, 2):
        if a1 != a2:
            cands.add((b2 - b1) / (a1 - a2))
    for a, b in lines:
        if a != 0:
            cands.add(-b / a)
    cands = sorted(c for c in cands if 0.0 <= c <= 1.0)
    best = min(milp_rcp(fit, c) for c in cands)
    return next(c for c in cands if milp_rcp(fit, c) <= best + 1e-15)


# ----------------------------------------------------------------------------------------------
# Per-module policies: discard ratio -> concrete op decisions
# ----------------------------------------------------------------------------------------------
def get_optimal_checkpointing_policy_per_module(stats, memory_budget):
    """[ILP]:225-295. 0/1 knapsack: x_i = 1 saves op i. Constraints: random ops saved or tied
    ([ILP]:256-263, none here), view-like ops x_i = 0 ([ILP]:265-267 -- our always-recomputed
    pseudo-op), in-place ops tied to parent ([ILP]:269-274, none), and
    sum_i x_i * memory_i <= ceil(memory_budget * sum(memory)) ([ILP]:276-278); objective
    maximise sum_i x_i * runtime_i ([ILP]:280-283). PyTorch solves it with CBC at gapRel=0.05
    ([ILP]:286), i.e. it may accept a solution up to 5% off; here it is solved exactly by
    enumerating the free ops (2^k, k <= ~10). Ties: least saved memory, then lowest indices.
    Returns the list of decisions (1 save, 0 recompute)."""
    if not (0 <= memory_budget <= 1):
        raise ValueError(f"`memory_budget` must be a float between 0 and 1. Got {memory_budget}.")
    n = len(stats["func_names"])
    max_memory = math.ceil(memory_budget * sum(stats["memory"]))
    forced0 = set(stats["view_like_ops"])
    free = [i for i in range(n) if i not in forced0]
    best_key, best = None, None
    for mask in range(1 << len(free)):
        chosen = [free[k] for k in range(len(free)) if mask >> k & 1]
        m = sum(stats["memory"][i] for i in chosen)
        if m > max_memory:
            continue
        key = (-sum(stats["runtimes"][i] for i in chosen), m, chosen)
        if best_key is None or key < best_key:
            best_key, best = key, chosen
    x = [0] * n
    for i in best:
        x[i] = 1
    return x


def get_greedy_checkpointing_policy_per_module(stats, meta, memory_budget):
    """[AUTO] get_greedy_checkpointing_policy_per_module: start with every op saved; the budget
    is memory_budget * sum(memory) minus the always-stored ops; the always-recomputed ops are
    discarded first; then candidates are popped in MSPS-descending order while
    (sum(memory) - discarded) > budget. If the stored ops alone exceed the budget, or the
    candidates run out, it returns "save only the stored ops" (here: recompute everything)."""
    if not (0 <= memory_budget <= 1):
        raise ValueError(f"`memory_budget` must be a float between 0 and 1. Got {memory_budget}.")
    n = len(stats["memory"])
    policy = [1] * n
    sac_memory = sum(stats["memory"])
    budget = memory_budget * sac_memory
    stored = set(meta["stored_ops"])
    saved_memory = sum(stats["memory"][i] for i in stored)
    if saved_memory > budget:
        return [1 if i in stored else 0 for i in range(n)]
    recompute = set(meta["recomputed_ops"])
    discarded = sum(stats["memory"][i] for i in recompute)
    budget -= saved_memory
    queue = list(meta["msps_meta"])
    while (sac_memory - discarded) > budget:
        if not queue:
            return [1 if i in stored else 0 for i in range(n)]
        cand = queue.pop(0)
        recompute.add(cand["op_idx"])
        discarded += cand["memory"]
    for i in recompute:
        policy[i] = 0
    return policy


def _policy_cost(block, stats, policy):
    """Bytes kept and seconds recomputed by one checkpointed block under a per-op policy."""
    saved = int(block["block_input_bytes"]) + sum(
        m for m, x in zip(stats["memory"], policy) if x == 1)
    secs = sum(t for t, x in zip(stats["runtimes"], policy) if x == 0) / 1e3
    return saved, secs


# ----------------------------------------------------------------------------------------------
# 3. sac_milp for N identical blocks
# ----------------------------------------------------------------------------------------------
def pytorch_sac_ilp(block, budget_bytes, other_mode="always_recompute",
                    n_segments=DEFAULT_N_SEGMENTS, policy="optimal", peak_model="sum",
                    big_m_ms=BIG_M_MS):
    """sac_milp ([ILP]:35-217) on N identical blocks, solved exactly, then per-block policies.

    sac_milp's formulation (node i = a module of the model tree; GiB and ms units):
      variables  y_i in {0,1} (module i is an AC unit)          [ILP]:73
                 r_i in [0,1] (fraction of ACM_i discarded)       [ILP]:75
                 d_i, a_i, m_i, rcp_i, rct_i >= 0, max_m >= 0     [ILP]:77-87
      constraints
        y_i = 0 outside ac_units, for supermodules of FSDP units, for leaves     [ILP]:90-115
        y_i + y_j <= 1 for ancestor/descendant pairs (no nested AC)             [ILP]:106-110
        d_i = ACM_i * r_i - (ACM_i - IA_i) * y_i                                [ILP]:141
        r_i <= y_i ;  r_i >= (ACM_i - IA_i) / ACM_i * y_i                       [ILP]:149, 154
        a_i = TA_i + AG_i - sum_{j before i in fw post-order} d_j               [ILP]:157-166
        m_i = a_i + (P_root + TG_i) / world_size ;  max_m >= m_i                [ILP]:168-177
        rcp_i >= slope_s * r_i + intercept_s  for each pwlf segment s           [ILP]:179-184
        rct_i <= M * y_i ; rct_i <= ACT_i * rcp_i ;
        rct_i >= ACT_i * rcp_i - M * (1 - y_i)        (M = 100)                 [ILP]:186-192
        max_m <= memory_budget                                                   [ILP]:195
      objective  minimise sum_i rct_i                                            [ILP]:198
      solved by CBC with gapRel=0.05, 180 s ([ILP]:201); returns {fqn: round(r_i, 4)} for y_i = 1,
      round(objective, 2) ms and round(max_m * 2**30) bytes ([ILP]:209-217).

    Our instance: the AC units are the N blocks (ac_units = blocks; their children, leaves, and
    the root get y = 0). ACM = IA (module docstring), so d_k = ACM * r_k. A block keeps
    F = block_input + ACM bytes if y_k = 0 and block_input + ACM * (1 - r_k) if y_k = 1.

    Memory constraint, peak_model="sum" (the brief's): sum_k saved_k <= budget_bytes, i.e.
    sum_k d_k >= N * F - budget. In sac_milp terms this is exactly the constraint of the ROOT
    node: the root is last in forward post-order, so its coefficient row covers every block's d
    ([ILP]:160-166), and TA_root = sum_k F (+ constants that we take as 0: parameters,
    gradients, activation gradients AG, model input/output, all folded into budget_bytes).
    sac_milp also writes one peak constraint per block k: a_k = TA_k + AG_k - sum_{j<k} d_j
    -- block k's OWN discard is not subtracted (its activations are rematerialised when its
    backward runs). With identical blocks the binding one is the last block, giving
    sum_{j<N} (F - d_j) + F <= budget: the last block's checkpointing is worthless there.
    peak_model="sac_milp" solves with that constraint instead (blocks 1..N-1 eligible, the last
    one left un-checkpointed, which is optimal since its y only adds cost).

    Exact solution without a MILP solver: per AC'd block the cost is
    ACT * g(r_k), g(r) = max(0, max_s(slope_s r + intercept_s)) = milp_rcp -- a convex function
    (maximum of affine functions). For a fixed number n of AC'd blocks the only coupling is
    sum r_k >= R = Dreq / ACM, and by convexity (Jensen) equal ratios are optimal:
    r = max(R / n, argmin_[0,1] g); n * ACT * g(r) is then the exact optimum for that n
    (the big-M cap ACT * g(r) <= M is also best met by equal ratios, g being nondecreasing to the
    right of its minimiser). Enumerating n = 0..N_eligible gives the exact MILP optimum
    (gap 0; CBC would stop within 5%). Ties between n: the smallest n.

    Then each AC'd block's ratio, rounded to 4 decimals as sac_milp returns it, becomes
    budget = 1 - ratio ([AUTO] get_auto_sac_policies) for
    get_optimal_checkpointing_policy_per_module (policy="optimal") or the greedy policy
    (policy="greedy", the default of [AUTO]); the concrete ops give the ACTUAL bytes/seconds.

    Returns a dict: feasible, n_checkpointed, discard_ratio, predicted_recompute_s (ILP objective,
    from the pwlf), recomputation_time_ms (rounded as sac_milp returns it), predicted_bytes
    (the memory metric of peak_model under the ILP's d), recompute_s / saved_bytes (ACTUAL, from
    the concrete op sets; saved_bytes is the same metric as predicted_bytes), actual_exceeds_budget,
    per_block (list of N dicts), fit (the pwlf result).
    """
    if peak_model not in ("sum", "sac_milp"):
        raise ValueError("peak_model must be 'sum' or 'sac_milp'")
    if policy not in ("optimal", "greedy"):
        raise ValueError("policy must be 'optimal' or 'greedy'")
    stats = sac_stats(block, other_mode)
    meta = greedy_order_meta(stats)
    fit = pwlf(tradeoff_curve(block, other_mode), n_segments)
    n_blocks = int(block["blocks"])
    base = int(block["block_input_bytes"])
    acm = sum(stats["memory"])
    act_ms = sum(stats["runtimes"])
    full = base + acm
    eligible = n_blocks if peak_model == "sum" else n_blocks - 1
    d_req = n_blocks * full - budget_bytes          # bytes that must be discarded in total
    r_min = _convex_argmin(fit)

    best = None                                     # (cost_ms, n, r)
    if d_req <= 0:
        best = (0.0, 0, 0.0)
    else:
        big_r = d_req / acm
        for n in range(1, eligible + 1):
            lo = big_r / n
            if lo > 1.0 + 1e-12:
                continue
            r = min(1.0, max(lo, r_min))
            rct = act_ms * milp_rcp(fit, r)
            if rct > big_m_ms:                      # rct_i <= M * y_i  ([ILP]:190)
                continue
            cost = n * rct
            if best is None or cost < best[0] - 1e-12 * max(1.0, abs(best[0])):
                best = (cost, n, r)
    result = {"fit": fit, "peak_model": peak_model, "policy": policy, "other_mode": other_mode}
    if best is None:                                # sac_milp returns ({}, 0, -1)
        result.update({"feasible": False, "n_checkpointed": 0, "discard_ratio": None,
                       "predicted_recompute_s": None, "recompute_s": None,
                       "predicted_bytes": None, "saved_bytes": None,
                       "actual_exceeds_budget": None, "per_block": []})
        return result
    cost_ms, n_ck, r = best
    r_out = round(r, RATIO_DECIMALS)                # ac_decisions value ([ILP]:213)
    per_block, saved_blocks = [], []
    act_secs = 0.0
    if n_ck:
        mem_budget = 1 - r_out
        if policy == "optimal":
            decisions = get_optimal_checkpointing_policy_per_module(stats, mem_budget)
        else:
            decisions = get_greedy_checkpointing_policy_per_module(stats, meta, mem_budget)
        ck_bytes, ck_secs = _policy_cost(block, stats, decisions)
    for k in range(n_blocks):
        if k < n_ck:
            per_block.append({
                "checkpointed": True, "discard_ratio": r_out,
                "predicted_bytes": base + acm * (1 - r),
                "predicted_recompute_s": act_ms * milp_rcp(fit, r) / 1e3,
                "save_ops": [nm for nm, x in zip(stats["func_names"], decisions) if x == 1],
                "recompute_ops": [nm for nm, x in zip(stats["func_names"], decisions) if x == 0],
                "saved_bytes": ck_bytes, "recompute_s": ck_secs})
            saved_blocks.append(ck_bytes)
            act_secs += ck_secs
        else:
            per_block.append({"checkpointed": False, "discard_ratio": 0.0,
                              "predicted_bytes": full, "predicted_recompute_s": 0.0,
                              "save_ops": list(stats["func_names"]), "recompute_ops": [],
                              "saved_bytes": full, "recompute_s": 0.0})
            saved_blocks.append(full)
    pred_blocks = [pb["predicted_bytes"] for pb in per_block]
    if peak_model == "sum":
        pred_bytes, act_bytes = sum(pred_blocks), sum(saved_blocks)
    else:
        pred_bytes = sum(pred_blocks[:-1]) + full
        act_bytes = sum(saved_blocks[:-1]) + full
    result.update({
        "feasible": True, "n_checkpointed": n_ck, "discard_ratio": r_out,
        "discard_ratio_exact": r,
        "predicted_recompute_s": cost_ms / 1e3,
        "recomputation_time_ms": round(cost_ms, TIME_DECIMALS),
        "predicted_bytes": pred_bytes,
        "recompute_s": act_secs, "saved_bytes": act_bytes,
        "actual_exceeds_budget": act_bytes > budget_bytes,
        "per_block": per_block})
    return result


# ----------------------------------------------------------------------------------------------
# 4. Exact optimum over per-block save sets (reference)
# ----------------------------------------------------------------------------------------------
def block_options(block):
    """Pareto-optimal (bytes, seconds, label) choices of ONE block under our cost model:
    no checkpoint (block_input + all ops + other, 0 s) or SAC with save set S over `ops`
    (block_input + sum_S bytes, elementwise + sum_{not S} seconds)."""
    _validate_block(block)
    ops = block["ops"]
    base = int(block["block_input_bytes"])
    full = base + sum(int(o["output_bytes"]) for o in ops) + int(block["other_saved_bytes"])
    opts = [(full, 0.0, "none")]
    for mask in range(1 << len(ops)):
        s = [ops[i] for i in range(len(ops)) if mask >> i & 1]
        b = base + sum(int(o["output_bytes"]) for o in s)
        t = float(block["elementwise_recompute_s"]) + sum(
            float(o["recompute_s"]) for i, o in enumerate(ops) if not mask >> i & 1)
        opts.append((b, t, "save{" + ",".join(o["name"] for o in s) + "}"))
    return _pareto(opts)


def _pareto(points):
    """Keep (bytes, secs, ...) points not dominated: sort by bytes, then strictly decreasing secs."""
    out = []
    for p in sorted(points, key=lambda q: (q[0], q[1])):
        if not out or p[1] < out[-1][1] - 1e-15:
            out.append(p)
    return out


_FRONTIER_CACHE = {}


def exact_pareto_frontier(block, n_blocks=None):
    """Pareto frontier of (total bytes, total seconds) over n_blocks identical blocks, by DP over
    blocks: frontier_{k+1} = pareto(frontier_k (+) options). Each point carries the count of
    blocks per option (blocks are interchangeable). Cached per block description."""
    n_blocks = int(block["blocks"]) if n_blocks is None else n_blocks
    key = (json.dumps(block, sort_keys=True), n_blocks)
    if key in _FRONTIER_CACHE:
        return _FRONTIER_CACHE[key]
    opts = block_options(block)
    frontier = [(0, 0.0, ())]
    for _ in range(n_blocks):
        nxt = {}
        for b, t, counts in frontier:
            for j, (ob, ot, _) in enumerate(opts):
                nb, nt = b + ob, t + ot
                if nb not in nxt or nt < nxt[nb][1]:
                    c = list(counts) + [0] * (len(opts) - len(counts))
                    c[j] += 1
                    nxt[nb] = (nb, nt, tuple(c))
        frontier = _pareto(list(nxt.values()))
    _FRONTIER_CACHE[key] = (frontier, opts)
    return frontier, opts


def exact_subset_optimum(block, budget_bytes, peak_model="sum"):
    """True optimum of our cost model: each block picks any save set S (2^len(ops)) or no
    checkpoint; minimise total recompute s.t. the memory metric <= budget_bytes.
    peak_model="sum": sum_k bytes_k <= budget. peak_model="sac_milp": sum_{k<N} bytes_k + F_N
    <= budget (the last block's activations are all live during its backward, see
    pytorch_sac_ilp). Returns dict(feasible, recompute_s, saved_bytes, choices)."""
    n_blocks = int(block["blocks"])
    if peak_model == "sum":
        frontier, opts = exact_pareto_frontier(block, n_blocks)
        extra = 0
    else:
        frontier, opts = exact_pareto_frontier(block, n_blocks - 1)
        extra = block_options(block)[-1][0]           # the no-checkpoint option (largest bytes)
    best = None
    for b, t, counts in frontier:
        if b + extra <= budget_bytes and (best is None or t < best[1]):
            best = (b + extra, t, counts)
    if best is None:
        return {"feasible": False, "recompute_s": None, "saved_bytes": None, "choices": {}}
    choices = {opts[j][2]: c for j, c in enumerate(best[2]) if c}
    if peak_model == "sac_milp":
        choices["none"] = choices.get("none", 0) + 1
    return {"feasible": True, "recompute_s": best[1], "saved_bytes": best[0], "choices": choices}


# ----------------------------------------------------------------------------------------------
# 5. Self-test on a Llama-3-8B-like block
# ----------------------------------------------------------------------------------------------
ASSUMED_PEAK_FLOPS = 400e12   # PLACEHOLDER: achieved bf16 matmul/attention FLOP/s
ASSUMED_HBM_BPS = 3.35e12     # PLACEHOLDER: bytes/s for the memory-bound ops (H100 SXM HBM3 peak)


def llama3_8b_block(seq=8192, hidden=4096, ffn=14336, heads=32, kv_heads=8, batch=1,
                    elt=2, n_layers=32):
    """Synthetic Llama-3-8B-like block (bf16, micro-batch 1, seq 8192, flash attention, causal).

    Bytes (tokens T = batch * seq, head_dim = hidden / heads = 128, kv dim = 8 * 128 = 1024):
      block input x            T * 4096 * 2            =  64 MiB
      wq  (q, post-RoPE size)  T * 4096 * 2            =  64 MiB
      wk, wv                   T * 1024 * 2            =  16 MiB each
      sdpa: out T*4096*2 (64 MiB) + logsumexp fp32 heads*T*4 (1 MiB) = 65 MiB
      wo                       T * 4096 * 2            =  64 MiB
      w1, w3                   T * 14336 * 2           = 224 MiB each
      w2                       T * 4096 * 2            =  64 MiB
      other (saved without AC, always recomputed under SAC): attention_norm out 64 MiB,
        residual h (ffn_norm's input) 64 MiB, ffn_norm out 64 MiB, silu(w1) 224 MiB,
        silu(w1)*w3 (w2's input) 224 MiB, 2 rstd vectors fp32 T*4 = 64 KiB in all
        -> 640 MiB + 64 KiB. (RoPE outputs are attributed to the wq/wk entries.)
    Times (recompute = one forward of the op):
      matmul  2*T*in*out / ASSUMED_PEAK_FLOPS: wq, wo 0.687 ms; wk, wv 0.172 ms;
              w1, w3, w2 2.405 ms
      sdpa    causal forward 2*T^2*hidden (= 4*T^2*hidden / 2) / ASSUMED_PEAK_FLOPS = 1.374 ms
      elementwise: bytes moved / ASSUMED_HBM_BPS with bytes moved (MiB, read+write) =
              attention_norm 128 + residual add 192 + ffn_norm 128 + silu 448 + mul 672 +
              residual add 192 + RoPE on q,k 160 = 1920 MiB -> 0.601 ms
    """
    t = batch * seq
    kv = hidden // heads * kv_heads
    mib = 2 ** 20

    def mm(name, k, n):
        return {"name": name, "output_bytes": t * n * elt,
                "recompute_s": 2.0 * t * k * n / ASSUMED_PEAK_FLOPS}

    sdpa = {"name": "sdpa", "output_bytes": t * hidden * elt + heads * t * 4,
            "recompute_s": 2.0 * t * t * hidden / ASSUMED_PEAK_FLOPS}
    ops = [mm("wq", hidden, hidden), mm("wk", hidden, kv), mm("wv", hidden, kv), sdpa,
           mm("wo", hidden, hidden), mm("w1", hidden, ffn), mm("w3", hidden, ffn),
           mm("w2", ffn, hidden)]
    other = 3 * t * hidden * elt + 2 * t * ffn * elt + 2 * t * 4
    moved_mib = 128 + 192 + 128 + 448 + 672 + 192 + 160
    assert t * hidden * elt == 64 * mib
    return {"blocks": n_layers, "block_input_bytes": t * hidden * elt, "ops": ops,
            "other_saved_bytes": other,
            "elementwise_recompute_s": moved_mib * mib / ASSUMED_HBM_BPS}


def _gib(b):
    return b / 2 ** 30


def print_block_summary(block, other_mode="always_recompute"):
    stats = sac_stats(block, other_mode)
    meta = greedy_order_meta(stats)
    curve = tradeoff_curve(block, other_mode)
    fit = pwlf(curve)
    print(f"block: ACM (sac_memory) = {sum(stats['memory']) / 2**20:.2f} MiB, "
          f"ACT (sac_runtime) = {sum(stats['runtimes']):.4f} ms, other_mode = {other_mode}")
    print("greedy order (MSPS desc, bytes/ms): " + ", ".join(
        f"{c['name']}({c['msps']:.3g})" for c in meta["msps_meta"]))
    print("trade-off curve (x = discarded/ACM + 0.01, y = recompute/ACT): " + ", ".join(
        f"({x:.4f},{y:.4f})" for x, y in curve))
    print(f"pwlf: n_segments={fit['n_segments']} breaks=" +
          ",".join(f"{b:.4f}" for b in fit["fit_breaks"]) +
          " slopes=" + ",".join(f"{s:.4f}" for s in fit["slopes"]) +
          " intercepts=" + ",".join(f"{s:.4f}" for s in fit["intercepts"]) +
          f" ssr={fit['ssr']:.3e}")


def print_table(block, budgets_bytes, other_mode="always_recompute", peak_model="sum"):
    print(f"{'budget GiB':>10} | {'ilp pred s':>10} | {'ilp act s':>10} | {'act GiB':>8} | "
          f"{'over?':>5} | {'n_ck':>4} | {'r':>6} | {'greedy s':>9} | {'greedy GiB':>10} | "
          f"{'exact s':>9} | recompute set (optimal policy)")
    for bud in budgets_bytes:
        ilp = pytorch_sac_ilp(block, bud, other_mode=other_mode, peak_model=peak_model)
        gr = pytorch_sac_ilp(block, bud, other_mode=other_mode, policy="greedy",
                             peak_model=peak_model)
        ex = exact_subset_optimum(block, bud, peak_model=peak_model)
        ex_s = f"{ex['recompute_s']:.5f}" if ex["feasible"] else "infeas"
        if not ilp["feasible"]:
            print(f"{_gib(bud):>10.3f} | {'infeas':>10} | {'':>10} | {'':>8} | {'':>5} | "
                  f"{'':>4} | {'':>6} | {'':>9} | {'':>10} | {ex_s:>9} |")
            continue
        rset = ""
        if ilp["n_checkpointed"]:
            rset = ",".join(ilp["per_block"][0]["recompute_ops"])
        print(f"{_gib(bud):>10.3f} | {ilp['predicted_recompute_s']:>10.5f} | "
              f"{ilp['recompute_s']:>10.5f} | {_gib(ilp['saved_bytes']):>8.3f} | "
              f"{'YES' if ilp['actual_exceeds_budget'] else 'no':>5} | "
              f"{ilp['n_checkpointed']:>4} | {ilp['discard_ratio']:>6.4f} | "
              f"{gr['recompute_s']:>9.5f} | {_gib(gr['saved_bytes']):>10.3f} | {ex_s:>9} | {rset}")


def _self_checks():
    """Small consistency checks of the solvers against brute force."""
    import random
    rng = random.Random(1)
    # (a) the pwlf breakpoint search against a dense grid over the breakpoint
    blk = llama3_8b_block()
    fit = pwlf(tradeoff_curve(blk))
    xs, ys = fit["x"], fit["y"]
    grid = [min(xs) + (max(xs) - min(xs)) * k / 20000 for k in range(1, 20000)]
    dense = min(_fit_with_breaks(xs, ys, [min(xs), b, max(xs)])[1] for b in grid)
    assert fit["ssr"] <= dense + 1e-12, (fit["ssr"], dense)
    # (b) DP exact optimum against brute force over all per-block choices (tiny instance)
    for _ in range(20):
        tiny = {"blocks": 3, "block_input_bytes": rng.randint(1, 5),
                "ops": [{"name": f"o{i}", "output_bytes": rng.randint(1, 9),
                         "recompute_s": rng.random()} for i in range(3)],
                "other_saved_bytes": rng.randint(0, 9), "elementwise_recompute_s": rng.random()}
        opts_all = [(o[0], o[1]) for o in block_options(tiny)]
        for bud in range(3 * tiny["block_input_bytes"], 3 * opts_all[-1][0] + 30, 3):
            brute = min(sum(c[1] for c in combo) for combo in itertools.product(opts_all, repeat=3)
                        if sum(c[0] for c in combo) <= bud)
            ex = exact_subset_optimum(tiny, bud)
            assert abs(ex["recompute_s"] - brute) < 1e-12, (bud, ex, brute)
    # (c) the closed-form MILP solution against a grid over (n, equal or unequal ratios)
    n_blocks = blk["blocks"]
    stats = sac_stats(blk)
    acm, act = sum(stats["memory"]), sum(stats["runtimes"])
    full = blk["block_input_bytes"] + acm
    for frac in (0.1, 0.3, 0.5, 0.7, 0.9):
        bud = int(n_blocks * blk["block_input_bytes"] + frac * n_blocks * acm)
        sol = pytorch_sac_ilp(blk, bud)
        d_req = n_blocks * full - bud
        best = math.inf
        for n in range(1, n_blocks + 1):
            for k in range(0, 401):           # two groups of ratios r1 >= r2 (n1 = n // 2)
                r1 = k / 400
                n1 = n // 2 if n > 1 else 1
                n2 = n - n1
                need = d_req / acm - n1 * r1
                r2 = max(0.0, need / n2) if n2 else (0.0 if need <= 1e-12 else math.inf)
                if r2 > 1 or (n2 == 0 and need > 1e-12):
                    continue
                cost = act * (n1 * milp_rcp(fit, r1) + n2 * milp_rcp(fit, r2))
                best = min(best, cost)
        assert sol["predicted_recompute_s"] * 1e3 <= best + 1e-9, (frac, sol, best)
    print("self-checks passed: pwlf breakpoint search, Pareto DP vs brute force, "
          "closed-form MILP vs grid")


def main(argv):
    if len(argv) > 1:
        with open(argv[1]) as f:
            block = json.load(f)
        n = int(block["blocks"])
        lo = n * int(block["block_input_bytes"])
        hi = block_options(block)[-1][0] * n
        if len(argv) > 2:
            budgets = [int(float(g) * 2 ** 30) for g in argv[2:]]
        else:
            budgets = [int(lo + (hi - lo) * k / 10) for k in range(11)]
        print_block_summary(block)
        print_table(block, budgets)
        return 0

    _self_checks()
    block = llama3_8b_block()
    n = block["blocks"]
    lo = n * block["block_input_bytes"]              # full checkpointing everywhere
    hi = block_options(block)[-1][0] * n              # no checkpointing
    budgets = [int(lo + (hi - lo) * k / 12) for k in range(13)]
    print(f"\nLlama-3-8B-like block x {n} (bf16, seq 8192, mb 1; times at "
          f"{ASSUMED_PEAK_FLOPS / 1e12:.0f} TFLOP/s and {ASSUMED_HBM_BPS / 1e12:.2f} TB/s, "
          f"PLACEHOLDERS)")
    print(f"full checkpointing keeps {_gib(lo):.3f} GiB, no checkpointing {_gib(hi):.3f} GiB "
          f"(activations only)")
    print_block_summary(block)
    print("\nmemory = sum over blocks of saved bytes (peak_model='sum'); policy per AC'd block "
          "from get_optimal_checkpointing_policy_per_module; 'greedy' = [AUTO] greedy policy")
    print_table(block, budgets)
    print("\nsame, other_mode='candidate' (memory-bound ops as ordinary MSPS candidates)")
    print_block_summary(block, "candidate")
    print_table(block, budgets, other_mode="candidate")
    print("\nsame, peak_model='sac_milp' (sac_milp's per-block peak: last block fully live)")
    print_table(block, [b + int(block_options(block)[-1][0]) - block["block_input_bytes"]
                        for b in budgets[:-1]], peak_model="sac_milp")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
