#!/usr/bin/env python3
"""How shardtune reads the configs verl and ROLL users really run: every example launch script of a
verl checkout and every example YAML of a ROLL checkout, through `shardtune estimate --from`.

    tests/bench/real_configs.py --shardtune build/cli/shardtune \
        --verl PATH_TO_VERL_GIT --roll PATH_TO_ROLL_GIT [--jobs 2] [--json OUT.json]

The repositories are read at HEAD (a checkout, or a bare git directory) and their config
folders extracted into a scratch folder (`git archive`); nothing of them is copied into
shardtune's tree. Each job runs as its user would run shardtune, from the folder the trainer is
launched in (the checkout's root), so that shardtune composes the Hydra defaults lists itself
(planner/configs/hydra_compose.h): a verl script gives `--from` the primary config its entry point
loads (verl/trainer/config/ppo_trainer.yaml for main_ppo, sft_trainer.yaml for fsdp_sft_trainer,
sft_trainer_engine.yaml for sft_trainer, or the script's --config-path/--config-name, a relative
path being relative to the entry point's file as Hydra takes it) and its command's `key=value`
overrides, with the script's shell variables expanded, with --set (group choices such as
engine=fsdp included). ROLL YAMLs are given whole, from the checkout's root (their
`../config/*@_here_` defaults are composed too). Before the jobs, the script checks that
shardtune's composition of verl's ppo_trainer.yaml equals verl's checked-in
_generated_ppo_trainer.yaml (the configs_test binary beside shardtune, HydraComposeVerlTest). The cluster is trainer.nnodes x trainer.n_gpus_per_node (ROLL: the largest device_mapping
over num_gpus_per_node) of H100-80G, the GPU the scripts name most; scripts for Ascend NPUs are
counted as out of scope. The model is the one the config loads (shardtune's preset of that Hugging
Face id); one shardtune has no preset for is counted under "model": the user gives --model with
its config.json, which this machine (no network) does not have.

Prints one line per file (accepted with the headline answer, or refused with shardtune's one-line
reason), then the counts by outcome and by reason, with the date and the repositories' commits.
"""
import argparse
import collections
import concurrent.futures
import contextlib
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import yaml


class Repo:
    """A git repository read at HEAD, checkout or bare."""

    def __init__(self, path):
        self.path = path
        self.commit = self.git("rev-parse", "HEAD").strip()

    def git(self, *args):
        return subprocess.run(["git", "-C", self.path, *args], check=True,
                              capture_output=True, text=True).stdout

    def files(self):
        return self.git("ls-tree", "-r", "--name-only", "HEAD").splitlines()

    def read(self, path):
        return self.git("show", "HEAD:" + path)

    def extract(self, dest, paths):
        """The folders `paths` at HEAD, written under `dest` (the rest of the tree is not needed)."""
        os.makedirs(dest, exist_ok=True)
        present = [p for p in paths if self.git("ls-tree", "HEAD", p).strip()]
        archive = subprocess.run(["git", "-C", self.path, "archive", "HEAD"] + present,
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)


# ---- verl launch scripts -------------------------------------------------------------------

ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
ENTRY = re.compile(r"-m\s+(verl\.trainer\.(?:main_ppo|fsdp_sft_trainer|sft_trainer))\b|"
                   r"\b(verl/trainer/(?:main_ppo|fsdp_sft_trainer|sft_trainer))\.py\b")
# A shell variable the expansion left as written (not $PWD, $HOME or OmegaConf's ${oc.*}).
UNSET = re.compile(r"\$\{(?!PWD\b|HOME\b)[A-Za-z_][A-Za-z0-9_]*(?::?[-+=][^}]*)?\}|\$(?!PWD\b|HOME\b)[A-Za-z_][A-Za-z0-9_]*")
OVERRIDE = re.compile(r"^([+~]{0,2}[A-Za-z_][A-Za-z0-9_.\-]*)=(.*)$", re.S)


def expand(text, env):
    """The shell's expansion of $VAR, ${VAR}, ${VAR:-default} and ${1:-default} (nested: ${A:-"${HOME}/x"}),
    ${VAR:=default} and $((a * b)) with the script's own assignments; $(command) and unknown
    variables stay as written."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$((", i):
            depth, j = 0, i + 3
            while j < len(text):
                if text[j] == "(":
                    depth += 1
                elif text[j] == ")":
                    if depth == 0 and text.startswith("))", j):
                        break
                    depth -= 1
                j += 1
            if j >= len(text):
                out.append(text[i:])
                break
            # Bare names are variables inside $(( )), as in the shell.
            expr = re.sub(r"\b([A-Za-z_][A-Za-z0-9_]*)\b",
                          lambda v: env.get(v.group(1), v.group(0)), expand(text[i + 3:j], env))
            value = text[i:j + 2]
            if re.fullmatch(r"[0-9+\-*/() %]+", expr):
                try:
                    value = str(int(eval(expr.replace("/", "//"))))  # integers, as the shell
                except (SyntaxError, ZeroDivisionError):
                    pass
            out.append(value)
            i = j + 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while j < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            body = text[i + 2:j - 1]
            # Positional parameters (${1:-vllm}) are unset: the examples run without arguments.
            m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?::?[-=](.*))?$", body, re.S)
            if not m:
                out.append(text[i:j])
            elif env.get(m.group(1), "") != "":
                out.append(env[m.group(1)])
            elif m.group(2) is not None:
                d = expand(m.group(2), env)
                out.append(d[1:-1] if len(d) >= 2 and d[0] == d[-1] and d[0] in "\"'" else d)
            else:
                out.append(text[i:j])
            i = j
        elif text[i] == "$":
            m = re.match(r"\$([A-Za-z_][A-Za-z0-9_]*)", text[i:])
            if m and env.get(m.group(1), "") != "":
                out.append(env[m.group(1)])
                i += m.end()
            else:
                out.append(text[i])
                i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def logical_lines(text):
    out, cur = [], ""
    for line in text.splitlines():
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            cur += stripped[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    if cur:
        out.append(cur)
    return out


def parse_script(text):
    """The entry point and the Hydra overrides of the first trainer command of a launch script;
    None when it runs none."""
    env = {"HOME": "~"}
    # if / elif / else / fi: a branch runs when its test is [ "X" = "Y" ] (or ==, !=) of the
    # expanded words and holds, or when the test is anything else and no earlier branch ran (the
    # first branch, as the examples' defaults take it).
    active = []  # per open if: [this branch runs, a branch already ran]
    for line in logical_lines(text):
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        cond = re.match(r"^(if|elif)\s+\[\[?\s*(.*?)\s*\]\]?\s*;\s*then\s*$", stripped)
        if cond or stripped in ("else", "fi"):
            if cond:
                t = re.match(r"""^["']?(.*?)["']?\s+(==|=|!=)\s+["']?(.*?)["']?$""", expand(cond.group(2), env))
                holds = True if not t else ((t.group(1) == t.group(3)) == (t.group(2) != "!="))
                if cond.group(1) == "if":
                    active.append([holds, holds])
                elif active:
                    active[-1][0] = holds and not active[-1][1]
                    active[-1][1] = active[-1][1] or active[-1][0]
            elif stripped == "else" and active:
                active[-1][0] = not active[-1][1]
            elif active:
                active.pop()
            continue
        if any(not a[0] for a in active):
            continue
        a = ASSIGN.match(line)
        assignment = a and not line.lstrip().startswith(("if ", "for ", "while "))
        # The entry point as written, or through a variable (torchrun ... ${ENTRYPOINT} ...); an
        # assignment that names it (ENTRYPOINT=${ENTRYPOINT:-"-m verl.trainer.sft_trainer"}) runs
        # nothing.
        m = ENTRY.search(line)
        rhs = a.group(2).strip() if a else ""
        lone = rhs.startswith("${") and rhs.endswith("}") and "}" not in rhs[2:-1].replace("${", "{")
        if m and assignment and lone:
            m = None
        expanded = None
        if not m and not assignment:
            expanded = expand(line, env)
            m = ENTRY.search(expanded)
        if not m:
            if assignment:
                if lone:
                    # A lone ${X:-default}: its value is one word, spaces and all.
                    value = expand(rhs, env)
                    env[a.group(1)] = value
                    continue
                try:
                    words = shlex.split(expand(a.group(2), env), comments=True)
                except ValueError:
                    words = [a.group(2)]
                env[a.group(1)] = words[0] if words else ""
            continue
        entry = (m.group(1) or m.group(2).replace("/", ".")).rsplit(".", 1)[-1]
        rest = expand(line[m.end():], env) if expanded is None else expanded[m.end():]
        # torchrun's world, before the entry point (the SFT trainers run on it).
        before = expand(line[:m.start()], env) if expanded is None else expanded[:m.start()]
        launcher = {}
        for key, names in (("nproc", ("--nproc-per-node", "--nproc_per_node")), ("nnodes", ("--nnodes",))):
            for n in names:
                t = re.search(re.escape(n) + r"[= ]\s*['\"]?([^\s'\"]+)", before)
                if t:
                    launcher[key] = t.group(1)
        try:
            words = shlex.split(rest, comments=True)
        except ValueError as e:
            return {"entry": entry, "error": "shell quoting: %s" % e}
        overrides, config_name, config_path = [], None, None
        i = 0
        while i < len(words):
            w = words[i]
            if w in ("--config-name", "--config-path") and i + 1 < len(words):
                if w == "--config-name":
                    config_name = words[i + 1]
                else:
                    config_path = words[i + 1]
                i += 2
                continue
            if w.startswith("--config-name="):
                config_name = w.split("=", 1)[1]
            elif w.startswith("--config-path="):
                config_path = w.split("=", 1)[1]
            elif w in ("$@", "${@}") or w.startswith(("|", ">", "2>", "&")):
                pass
            elif OVERRIDE.match(w):
                overrides.append(w)
            i += 1
        return {"entry": entry, "overrides": overrides, "config_name": config_name,
                "config_path": config_path, "launcher": launcher,
                "torchrun": bool(re.search(r"\btorchrun\b|torch\.distributed\.run", before))}
    return None


def override_value(overrides, key, default=None):
    for o in overrides:
        k, _, v = o.lstrip("+~").partition("=")
        if k == key:
            return v
    return default


def verl_jobs(repo):
    """(name, outcome) for out-of-scope scripts, or (name, job) to run."""
    for path in repo.files():
        if not re.match(r"^(examples|recipe)/.*\.sh$", path):
            continue
        parsed = parse_script(repo.read(path))
        if parsed is None:
            continue  # data preparation, rollout-only generation, ...
        name = "verl:" + path
        if "error" in parsed:
            yield name, ("refused", "script", parsed["error"])
            continue
        ov = parsed["overrides"]
        # The entry points' @hydra.main(config_path="config", config_name=...).
        cfg = parsed["config_name"] or {"main_ppo": "ppo_trainer", "fsdp_sft_trainer": "sft_trainer",
                                        "sft_trainer": "sft_trainer_engine"}[parsed["entry"]]
        cfg = cfg.strip("'\"")
        if cfg.endswith(".yaml"):
            cfg = cfg[:-5]
        if "npu" in path.lower() or override_value(ov, "trainer.device") == "npu":
            yield name, ("out of scope", "Ascend NPU", "")
            continue
        if "megatron" in cfg:
            yield name, ("out of scope", "Megatron", "--config-name " + cfg)
            continue
        strategy = override_value(ov, "actor_rollout_ref.actor.strategy", "fsdp")
        if strategy == "megatron":
            yield name, ("out of scope", "Megatron", "actor.strategy=megatron")
            continue
        # hydra/_internal/utils.py compute_search_path_dir: an absolute --config-path as it is
        # ($(pwd)/x is the launch folder's x), a relative one relative to the entry point's file
        # (verl/trainer/ for verl.trainer.main_ppo).
        config_dir = "verl/trainer/config"
        if parsed["config_path"]:
            cp = parsed["config_path"].strip("'\"")
            cp = re.sub(r"^(\$\(pwd\)|\$\{PWD\}|\$PWD)/?", "/", cp)
            if "$" in cp:
                yield name, ("refused", "scheduler variables",
                             "--config-path %s (a variable the script does not set)" % cp)
                continue
            config_dir = os.path.normpath(cp.lstrip("/") if cp.startswith("/")
                                          else os.path.join("verl/trainer", cp))
        if "$" in cfg:
            yield name, ("refused", "scheduler variables",
                         "--config-name %s (a variable the script does not set)" % cfg)
            continue
        # The world: main_ppo's trainer.nnodes x n_gpus_per_node; the SFT trainers' is torchrun's.
        if parsed["entry"] != "main_ppo" and parsed["torchrun"]:
            # A count the script takes as an argument (nproc_per_node=$1, its usage line's
            # <nproc_per_node>) is one node of 8, the GPUs the examples are written for.
            nnodes = parsed["launcher"].get("nnodes", "1")
            per_node = parsed["launcher"].get("nproc", "1")
            nnodes = nnodes if nnodes.isdigit() else "1"
            per_node = per_node if per_node.isdigit() else "8"
        else:
            nnodes = override_value(ov, "trainer.nnodes", "1")
            per_node = override_value(ov, "trainer.n_gpus_per_node", "8")
        # A variable the shell would expand to nothing (the bench keeps unknown ones as written).
        # Variables the script never sets expand to nothing, as in the shell ($PWD and $HOME are
        # the shell's own); a world size left empty is the scheduler's to give.
        world_keys = ("trainer.nnodes", "trainer.n_gpus_per_node")
        unset_world = [o for o in ov if o.partition("=")[0].lstrip("+") in world_keys and UNSET.search(o)]
        if unset_world or UNSET.search(nnodes) or UNSET.search(per_node):
            yield name, ("refused", "scheduler variables",
                         "%s (set by the job scheduler, not the script)" %
                         (unset_world[0] if unset_world else nnodes + " x " + per_node))
            continue
        ov = [UNSET.sub("", o) for o in ov]
        yield name, {"config": config_dir + "/" + cfg + ".yaml", "root": "verl", "overrides": ov,
                     "nnodes": nnodes, "per_node": per_node}


# ---- ROLL example YAMLs ----------------------------------------------------------------------

def count_devices(v):
    if isinstance(v, list):
        return len(v)
    if isinstance(v, str):
        m = re.fullmatch(r"\s*list\(\s*range\(\s*(\d+)\s*,\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)\s*\)\s*", v)
        if m:
            a, b, s = int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)
            return len(range(a, b, s))
    return 0


def roll_jobs(repo):
    for path in repo.files():
        if not re.match(r"^examples/.*\.ya?ml$", path):
            continue
        text = repo.read(path)
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            continue
        if not isinstance(doc, dict):
            continue
        workers = {k: v for k, v in doc.items()
                   if isinstance(v, dict) and isinstance(v.get("strategy_args"), dict)}
        if not workers:
            continue  # env, reward or data configs
        name = "roll:" + path
        if "ascend" in path.lower() or "npu" in path.lower():
            yield name, ("out of scope", "Ascend NPU", "")
            continue
        trainers = {k: v for k, v in workers.items()
                    if str(v["strategy_args"].get("strategy_name", "")).endswith("_train")}
        names = {str(v["strategy_args"].get("strategy_name")) for v in trainers.values()}
        if not trainers:
            yield name, ("out of scope", "no training worker", "")
            continue
        if not any(n.startswith("fsdp2") for n in names):
            kind = sorted(names)[0].split("_")[0]
            label = {"megatron": "Megatron", "deepspeed": "DeepSpeed"}.get(kind, kind)
            yield name, ("out of scope", label, "strategy_name " + sorted(names)[0])
            continue
        per_node = doc.get("num_gpus_per_node", 8)
        per_node = per_node if isinstance(per_node, int) and per_node > 0 else 8
        devices = max([count_devices(w.get("device_mapping")) for w in workers.values()] + [0])
        world = max(devices, per_node)
        nnodes = max(1, -(-world // per_node))
        yield name, {"config": path, "root": "roll", "format": "roll", "overrides": [],
                     "nnodes": str(nnodes), "per_node": str(per_node)}


# ---- running shardtune -----------------------------------------------------------------------

REASONS = [
    ("Megatron", r"megatron"),
    ("DeepSpeed", r"deepspeed"),
    ("model", r"expected a preset, a Hugging Face id of one|model directory holding a config"),
    ("vision-language model", r"vision|VLForConditionalGeneration|multimodal"),
    ("interpolation", r"interpolation that does not resolve"),
    # A Hydra defaults list shardtune could not compose (hydra_compose.h's one-line errors).
    ("Hydra composition", r"defaults entry|hydra/searchpath|config group entry"),
    # The job scheduler's variables (SLURM_JOB_NUM_NODES, ...) left in the world size.
    ("scheduler variables", r'--cluster: expected .* got "[^"]*\$'),
    # What verl itself refuses: Hydra's "+" onto a set key and a key its struct config lacks
    # (config_loader_impl.py), fsdp_workers.py's mini-batch / micro-batch assertions, a model
    # path that names no model.
    ("verl refuses it too", r'to be absent or null|that is a multiple of the micro-batch|'
                            r'size per GPU \(or use_dynamic_bsz: true\), got null|'
                            r'unknown preset "model_path"|unknown key "torch_dtype"|'
                            r'expected true or false, got ""'),
    ("world size", r"world size|ranks, got|GPUs per node"),
    ("sequence length", r"sequence length|seq.len"),
    ("unknown key", r"unknown key"),
    ("not modelled", r"which shardtune does not model|is not modelled yet|is not modelled\)|"
                     r"shardtune models FSDP units of whole blocks"),
]


def reason_of(message):
    for label, pattern in REASONS:
        if re.search(pattern, message, re.I):
            return label
    return "other"


def check_verl_composition(shardtune, verl_root):
    """'equal' / 'DIFFERENT (...)' / 'not checked (...)': HydraComposeVerlTest of the configs_test
    binary built beside shardtune, run on the extracted verl tree."""
    binary = os.path.join(os.path.dirname(os.path.dirname(shardtune)), "tests", "configs", "configs_test")
    if not os.path.isfile(binary):
        return "not checked (no %s)" % binary
    p = subprocess.run([binary, "--gtest_filter=HydraComposeVerlTest.*"], capture_output=True, text=True,
                       env=dict(os.environ, SHARDTUNE_VERL_CHECKOUT=verl_root))
    if p.returncode == 0 and "[  PASSED  ] 1 test" in p.stdout:
        return "equal, key for key"
    return "DIFFERENT (%s)" % (p.stdout.strip().splitlines() or ["exit %d" % p.returncode])[-1]


def run_one(shardtune, name, job, workdir, show=False):
    if isinstance(job, tuple):
        return name, job
    cluster = "%sx%sxH100" % (job["nnodes"], job["per_node"]) if job["nnodes"] != "1" \
        else "%sxH100" % job["per_node"]
    cwd = os.path.join(workdir, job["root"])
    if not os.path.isfile(os.path.join(cwd, job["config"])):
        return name, ("refused", "config file", "%s: no such file in the checkout" % job["config"])
    args = ["--from", job["config"]]
    if job.get("format"):
        args += ["--from-format", job["format"]]
    for o in job["overrides"]:
        args += ["--set", o]
    cmd = [shardtune, "estimate", "--cluster", cluster, "--json"] + args
    if show:
        print("%s:\n  (cd %s && %s)" % (name, shlex.quote(cwd),
                                         " ".join(shlex.quote(c) for c in cmd if c != "--json")))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)
    except subprocess.TimeoutExpired:
        return name, ("refused", "timeout", "over 120 s")
    if p.returncode != 0:
        msg = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "exit %d" % p.returncode
        msg = re.sub(r"^error: ", "", msg).replace(cwd + "/", "").replace(workdir + "/", "")
        return name, ("refused", reason_of(msg), msg)
    doc = json.loads(p.stdout)
    req = doc.get("per_rank", {}).get("required_bytes")
    coloc = doc.get("colocation") or {}
    if coloc.get("peak_bytes"):
        req = max(req or 0, coloc["peak_bytes"])  # the co-located roles' worst phase
    fits = doc.get("fits")
    verdict = (doc.get("verdict") or {}).get("text", "")
    headline = "%s on %s: %s%s" % (
        doc["model"]["name"], cluster,
        "%.1f GiB required, " % (req / 2**30) if isinstance(req, (int, float)) else "",
        "fits" if fits else "DOES NOT FIT")
    if verdict:
        headline += " (%s)" % verdict
    if fits:
        kind = "fits"
    elif "average more than" in verdict:
        kind = "fits below a mean length"  # variable-length micro-batches at their worst
    elif "fits alone" in verdict:
        kind = "out beside co-located"      # each role fits alone
    else:
        kind = "does not fit"
    return name, ("accepted", kind, headline)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardtune", default="build/cli/shardtune")
    ap.add_argument("--verl", help="a verl checkout or git directory")
    ap.add_argument("--roll", help="a ROLL checkout or git directory")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", help="write every outcome to this file")
    ap.add_argument("--only", help="only the files whose name matches this regular expression")
    ap.add_argument("--keep", help="extract the checkouts' config folders into this directory, keep "
                                   "them, and print each file's shardtune command (with --json "
                                   "dropped) and the folder it runs in")
    a = ap.parse_args()
    if not a.verl and not a.roll:
        ap.error("give --verl and/or --roll")
    shardtune = os.path.abspath(a.shardtune)
    jobs, heads = [], []
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    with (contextlib.nullcontext(os.path.abspath(a.keep)) if a.keep
          else tempfile.TemporaryDirectory(prefix="shardtune_real_configs_")) as workdir:
        composed_check = None
        if a.verl:
            verl = Repo(a.verl)
            heads.append("volcengine/verl@" + verl.commit[:9])
            verl.extract(os.path.join(workdir, "verl"), ["verl/trainer/config", "examples", "recipe"])
            jobs += list(verl_jobs(verl))
            composed_check = check_verl_composition(shardtune, os.path.join(workdir, "verl"))
        if a.roll:
            roll = Repo(a.roll)
            heads.append("alibaba/ROLL@" + roll.commit[:9])
            roll.extract(os.path.join(workdir, "roll"), ["examples"])
            jobs += list(roll_jobs(roll))
        if a.only:
            jobs = [(n, j) for n, j in jobs if re.search(a.only, n)]
        show = bool(a.keep)
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
            results = list(ex.map(lambda nj: run_one(shardtune, nj[0], nj[1], workdir, show), jobs))
    by_outcome = collections.Counter()
    by_reason = collections.Counter()
    for name, (outcome, reason, detail) in results:
        by_outcome[outcome] += 1
        by_reason[(outcome, reason)] += 1
        print("%-13s %-70s %s" % (outcome, name, detail if outcome != "out of scope" else reason))
    print()
    print("real configs, %s, %s, shardtune estimate --from" %
          (datetime.date.today().isoformat(), ", ".join(heads)))
    if composed_check:
        print("  verl's ppo_trainer.yaml as shardtune composes it vs verl's _generated_ppo_trainer.yaml: "
              + composed_check)
    total = len(results)
    for outcome in ("accepted", "refused", "out of scope"):
        print("  %-13s %3d of %d" % (outcome, by_outcome[outcome], total))
    for (outcome, reason), n in sorted(by_reason.items()):
        print("    %-13s %-24s %3d" % (outcome, reason, n))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"file": n, "outcome": o, "reason": r, "detail": d}
                       for n, (o, r, d) in results], f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
