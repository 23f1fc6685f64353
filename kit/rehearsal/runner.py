"""A dress rehearsal's runtime: the user's launch adjusted to the miniature, run on real SGLang, recorded.

`plan_rehearsal` builds the miniatures (kit.rehearsal.miniature) and rewrites the user's own launch: their flags
and environment, with only what a rehearsal must change, each change listed with its reason (paths to the
miniatures, `--load-format dummy --skip-tokenizer-init` for the target, `--speculative-draft-load-format auto`
where the release has that flag so the draft goes through SGLang's real loader, TP kept when the host has the
GPUs else TP1, the memory fraction, host/port, the recorder on PYTHONPATH). `run_rehearsal` starts it through
kit.serving.process (no orphans), sends a few requests by `input_ids` (no tokenizer), stops it and checks GPU
memory went back to its starting level. `read_record` merges what kit.rehearsal.hooks wrote;
`observed_findings` turns that record into the kit's finding codes and `compare` marks each confirmed /
refuted / new against doctor's static verdict.

    plan = plan_rehearsal(RehearsalConfig(target="T", draft="D", launch_file="launch.sh", out="rehearsal"))
    print(plan.render())                       # --dry-run stops here
    result = run_rehearsal(plan)               # GPU host with SGLang (or the kit's bundle) importable
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit.checkpoint.inspect import KEYS_DROPPED, PARAMS_MISSING, QUANT
from kit.findings import Code, Finding, KitInputError
from kit.hf import HFConfig
from kit.serving.after_import import install_as_sitecustomize
from kit.serving.engines.sglang import BUNDLE_REASON
from kit.serving.launch import Change, drop_option, recorder_first
from kit.sglang.bundle_site import BUNDLE_FLAG_HELP, bundle_launch_flags
from kit.sglang.flags import DECODE_GRAPH_CAP, PREFILL_GRAPH_CAP
from kit.wiring.aux import ALGORITHM

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "launch/process/logs: notebook 04"
STARTUP = Code(
    "rehearse.startup",
    SECTION,
    "error",
    (
        "`kit rehearse`: the miniature of the deployment did not start on real SGLang, for a reason no other "
        "code names (the exception is in the evidence)"
    ),
    "read the exception; a miniature-only failure (kernel shapes) is worth reporting to the kit",
)
TIMED_OUT = Code(
    "rehearse.timeout",
    SECTION,
    "warning",
    (
        "`kit rehearse`: the miniature was still starting when `--timeout` ran out (the last line SGLang "
        "logged says what it was doing); no verdict either way, doctor's findings are marked not reached"
    ),
    "a longer `--timeout`, or fewer rehearsals side by side on one GPU (CUDA-graph capture is CPU-bound)",
)

RECORD_NAME = "record.jsonl"
SITE_DIR = "site"
# flags a rehearsal sets itself (dests); every other flag of the user's launch is kept as written
OWN = {
    "unrehearsed": "not rehearsed: PD disaggregation and DeepEP need a peer server and RDMA (InfiniBand) devices; "
    "the rest of the launch runs as one server",
    "model_path": "the miniature target (its config.json only)",
    "tokenizer_path": "no tokenizer: requests go by input_ids (--skip-tokenizer-init)",
    "revision": "the miniatures are local folders: a hub revision does not apply to them",
    "speculative_draft_model_path": "the miniature draft (the user's tensor names and dtypes, random values)",
    "load_format": "the miniature target has no weights: SGLang fills them (dummy)",
    "skip_tokenizer_init": "requests go by input_ids",
    "speculative_draft_load_format": "the draft is read from its file by SGLang's real loader",
    "host": "loopback",
    "port": "a free port",
    "tp_size": "TP",
    "mem_fraction_static": "the share of the GPU memory free at its start the server may fill: a miniature needs little",
    "max_total_tokens": "caps the KV pool: the miniature's footprint stays small (rehearsals can share a GPU)",
    "nccl_port": "a port of its own for the torch.distributed rendezvous (rehearsals side by side never race)",
    "dist_init_addr": "one host: loopback, with a port of its own",
    "nnodes": "one host: a rehearsal runs on this host's GPUs",
    "node_rank": "one host: a rehearsal runs on this host's GPUs",
    "cuda_graph_max_bs": "CUDA graphs captured up to the rehearsal's few requests (capture is most of a startup)",
    "cuda_graph_max_bs_prefill": "prefill CUDA graphs captured up to the rehearsal's prompt lengths",
}
OWN["cuda_graph_max_bs_decode"] = OWN["cuda_graph_max_bs"]
OWN["piecewise_cuda_graph_max_tokens"] = OWN["cuda_graph_max_bs_prefill"]
# the largest decode batch and prefill token count a rehearsal captures CUDA graphs for (it sends `requests`
# prompts of at most len(REQUEST_IDS[0]) tokens, one at a time), by the release's flag names, newer first
GRAPH_CAPS = ((DECODE_GRAPH_CAP, 8), (PREFILL_GRAPH_CAP, 128))
GRAPH_BS = GRAPH_CAPS[0][1]
REQUEST_IDS = [[1, 450, 4996, 17354, 1701, 432, 17204, 975, 278, 17366, 11203, 29889]]


def _f(help_: str, default: Any = None) -> Any:
    return field(default=default, metadata={"help": help_})


@dataclass
class RehearsalConfig:
    target: str = _f(
        "target: a local directory (its config.json is all that is read), the config.json, or a Hugging Face id "
        "(the local cache first, else its config.json over the network)"
    )
    draft: str = _f(
        "draft directory: config.json + safetensors (header read; no tensor loaded), or a Hugging Face id (the "
        "cache first, else config.json and safetensors headers over the network)"
    )
    revision: str | None = _f("the target's hub revision (branch, tag, commit) when --target is a hub id")
    draft_revision: str | None = _f("the draft's hub revision when --draft is a hub id")
    launch_file: str = _f("file holding the user's launch command (shell text)")
    out: str = _f("output directory: miniatures, the recorder, the record and the report", "rehearsal")
    dry_run: bool = _f("build the miniatures and print the plan; start nothing (works without a GPU)", False)
    sglang_version: str | None = _f("SGLang release (default: installed, else the kit's default)")
    gpus: int | None = _f("GPUs this host has (default: counted with nvidia-smi)")
    hidden: int = _f("goal hidden size of the miniature target", 256)
    mem_fraction: float = _f(
        "--mem-fraction-static of the rehearsal: the share of the GPU memory free at the server's start that "
        "SGLang may fill with weights and KV pool (the pool is then capped by --max-total-tokens)",
        0.3,
    )
    max_total_tokens: int | None = _f(
        "--max-total-tokens of the rehearsal: caps the KV pool, so a miniature's footprint stays a few GiB "
        "whatever the fraction (none: the pool fills the fraction)",
        16384,
    )
    tp: int | None = _f("TP of the rehearsal (default: the launch's when the GPUs are there, else 1)")
    cuda_visible_devices: str | None = _f(
        "GPUs the server sees (CUDA_VISIBLE_DEVICES, e.g. '1' or '0,1'); their number is the GPUs available"
    )
    port: int | None = _f("the server's --port (default: a free one)")
    nccl_port: int | None = _f(
        "the server's --nccl-port, its torch.distributed rendezvous (default: SGLang picks one); rehearsals "
        "running side by side give distinct ones"
    )
    end_check: str = field(
        default="gpu",
        metadata={
            "help": "what is checked after the stop: gpu (every GPU's memory back to its starting level; one "
            "rehearsal at a time) or own (the rehearsal's own server processes are gone and hold no GPU "
            "memory; for rehearsals sharing GPUs)",
            "choices": ("gpu", "own"),
        },
    )
    shrink_head_dims: bool = _f(
        "also shrink MLA kv_lora_rank/rope/nope/v head dims (SGLang's kernels may refuse)", False
    )
    requests: int = _f("requests sent by input_ids once it is up", 3)
    max_new_tokens: int = _f("tokens generated per request", 32)
    timeout: float = _f("seconds to wait for the server to be ready", 300.0)
    bundle: bool = _f(BUNDLE_FLAG_HELP, False)
    json: bool = _f("print one JSON document as the last line", False)


@dataclass
class RehearsalPlan:
    config: RehearsalConfig
    version: str
    env: dict[str, str]
    argv: list[str]
    changes: list[Change]
    notes: list[str]
    target_dir: str
    draft_dir: str
    record: str
    port: int
    tp: int
    user_tp: int
    blocked: str | None = None  # why this plan cannot run (the dry run still shows it)

    def render(self) -> str:
        from kit.sglang.cmdline import join_command

        lines = [
            f"rehearsal of SGLang {self.version}: TP{self.tp}"
            + ("" if self.tp == self.user_tp else f" (the launch asks TP{self.user_tp})")
        ]
        lines += [f"  miniature target: {self.target_dir}", f"  miniature draft:  {self.draft_dir}", "changes:"]
        lines += [f"  {c.flag}: {c.original!r} -> {c.new!r}  ({c.reason})" for c in self.changes]
        lines += ["notes:"] + [f"  {n}" for n in self.notes]
        if self.blocked:
            lines += [f"cannot run: {self.blocked}"]
        shown = {k: v for k, v in self.env.items() if k.startswith(("SGLANG", "NCCL", "CUDA", "KIT_", "PYTHONPATH"))}
        lines += ["command:", "  " + join_command(shown, self.argv)]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"] = asdict(self.config)
        return d


# -- host facts ---------------------------------------------------------------------------------------------
def gpu_count() -> int:
    r = _smi(["-L"])
    return len([x for x in r.splitlines() if x.startswith("GPU ")]) if r else 0


def gpu_memory_used() -> list[int] | None:
    """MiB used per GPU (nvidia-smi), None when it cannot be read."""
    r = _smi(["--query-gpu=memory.used", "--format=csv,noheader,nounits"])
    if not r:
        return None
    return [int(x) for x in r.split() if x.strip().isdigit()]


def gpu_apps() -> dict[int, int] | None:
    """{pid: MiB} of the processes holding GPU memory (nvidia-smi), None when it cannot be read."""
    r = _smi(["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
    if r is None:
        return None
    out: dict[int, int] = {}
    for line in r.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out[int(parts[0])] = out.get(int(parts[0]), 0) + int(parts[1])
    return out


def own_processes(record: str) -> list[int]:
    """PIDs of the live processes of one rehearsal: their environment names its record (the server gets
    KIT_REHEARSAL_RECORD; SGLang's scheduler and detokenizer processes inherit it)."""
    from kit.rehearsal.hooks import RECORD_ENV

    tag = f"{RECORD_ENV}={record}".encode()
    pids = []
    for d in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            if tag in Path("/proc", d, "environ").read_bytes().split(b"\0"):
                pids.append(int(d))
        except OSError:  # gone, or another user's
            pass
    return pids


def _smi(args: list[str]) -> str | None:
    if not shutil.which("nvidia-smi"):
        return None
    try:
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


# -- the plan -----------------------------------------------------------------------------------------------
def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise KitInputError(f"{path}: cannot read the {what} ({e})")


def not_rehearsable(target_config: HFConfig, found, version: str, target_dir: Path | None = None) -> str | None:
    """Why `kit rehearse` cannot stand this deployment up as the user wrote it (None: it can). `found`: the
    launch's ShellLaunch; `target_dir`: the target's folder (remote configuration code shipped with it)."""
    from kit.sglang.loader import known_model_type

    placeholders = [n["text"] for n in found.notes if n["kind"] == "placeholder"]
    if placeholders:
        return (
            f"the launch holds unfilled placeholders ({', '.join(placeholders)}): a shell reads each as two "
            "redirections, so the flags before them take the next words; fill them in"
        )
    from kit.checkpoint.processors import STAND_IN_PROCESSORS
    from kit.rehearsal.miniature import missing_processor

    lacking = missing_processor(target_config, target_dir, version) - STAND_IN_PROCESSORS.keys()
    if lacking:
        return (
            f"SGLang {version} loads the HF processor of a multimodal target ({', '.join(sorted(lacking))}) at "
            "startup, --skip-tokenizer-init or not; the target folder has no processor/tokenizer files for the "
            "miniature to carry, and the kit has no stand-in processor for that class"
        )
    mt = target_config.get("model_type")
    shipped = bool(target_config.get("auto_map")) and target_dir is not None and any(Path(target_dir).glob("*.py"))
    if mt and not shipped and known_model_type(mt, version) is False:
        return (
            f"the target's model_type {mt!r} has no config class in Transformers or SGLang {version}, and its "
            "configuration code (auto_map and its .py files) is not with the target"
        )
    return None


def adjust_launch(
    env: dict[str, str],
    argv: list[str],
    version: str,
    target_dir: str,
    draft_dir: str,
    tp: int,
    port: int,
    mem_fraction: float,
    site_dir: str,
    record: str,
    bundle_flags: tuple[str, ...] = (),
    max_total_tokens: int | None = None,
    nccl_port: int | None = None,
    cuda_visible_devices: str | None = None,
) -> tuple[dict[str, str], list[str], list[Change], list[str]]:
    """The user's launch with the rehearsal's changes; (env, argv, changes, notes). `bundle_flags`: flags the
    kit's SGLang bundle needs (it carries one attention/sampling backend), set over the user's;
    `max_total_tokens`, `nccl_port`: set when given; `cuda_visible_devices`: the GPUs the server sees."""
    from kit.sglang.flags import launch_entry, resolve_flags, server_flags, table_for

    hit = launch_entry(argv, version)
    if hit is None:
        raise KitInputError(f"launch file: {' '.join(argv[:3])!r} does not start an SGLang server")
    entry, k = hit
    flags, _ = server_flags(argv, version)
    res = resolve_flags(flags, version)
    table = table_for(version)
    opts = _Options(table.by_option())
    changes: list[Change] = []
    notes: list[str] = []
    if not table.exact:
        notes.append(f"no flag table for SGLang {version}: flags located with {table.checked}'s")
    user_tp = int(res.values.get(opts.dest("tp_size")) or 1)
    want = {
        "model_path": target_dir,
        "speculative_draft_model_path": draft_dir,
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "host": "127.0.0.1",
        "port": port,
        "tp_size": tp,
        "mem_fraction_static": mem_fraction,
    }
    if max_total_tokens:
        want["max_total_tokens"] = max_total_tokens
    if nccl_port:
        want["nccl_port"] = nccl_port
    want.update(_host_settings(res, opts, version, nccl_port or port, notes))
    program = _program(argv[:k], entry, changes)
    extra = _bundle_flags(bundle_flags, res, opts, version, changes)
    kept = _server_flags(res, extra, want, opts, tp, user_tp, changes, notes)
    new_env = _rehearsal_env(env, site_dir, record, cuda_visible_devices, tp, user_tp, changes)
    if _fp8(target_dir) and not any(k in env for k in DEEPGEMM_JIT):
        new_env[DEEPGEMM_JIT[0]] = "0"
        changes.append(Change(DEEPGEMM_JIT[0], None, "0", "DeepGEMM's JIT warm-up compiles an FP8 kernel per batch "
                              "size (minutes) before the server is ready; the miniature's FP8 GEMMs take SGLang's "
                              "other kernels"))  # fmt: skip
    return new_env, program + kept, changes, notes


# SGLang's switch of DeepGEMM's JIT FP8 kernels (on by default; the older name first read before 0.5)
DEEPGEMM_JIT = ("SGLANG_ENABLE_JIT_DEEPGEMM", "SGL_ENABLE_JIT_DEEPGEMM")


def _fp8(target_dir: str) -> bool:
    """Whether the miniature target keeps a block-FP8 quantization (its config.json, or its text_config's)."""
    try:
        cfg = json.loads((Path(target_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    q = cfg.get("quantization_config") or (cfg.get("text_config") or {}).get("quantization_config") or {}
    return q.get("quant_method") == "fp8"


@dataclass(frozen=True)
class _Options:
    """A release's server options (`FlagTable.by_option`), asked by ServerArgs field name."""

    by_option: dict[str, Any]

    def dest(self, name: str) -> str | None:
        """The dest `resolve_flags` reads ServerArgs field `name` under (its current name on every release:
        `kit.sglang.flags.table_for`), or None when the release has no such option."""
        a = self.by_option.get("--" + name.replace("_", "-"))
        return a["dest"] if a else None

    def option(self, name: str) -> str:
        return self.by_option["--" + name.replace("_", "-")]["option_strings"][0]


def _host_settings(res, opts: _Options, version: str, port: int, notes: list[str]) -> dict[str, Any]:
    """What one host needs beyond the rehearsal's own flags: a local dist-init address (`port` + 1), CUDA graphs
    capped to the miniature (`GRAPH_CAPS`), the draft loaded from its files while the target is dummy-loaded."""
    want: dict[str, Any] = {}
    if res.values.get(opts.dest("dist_init_addr") or ""):
        want["dist_init_addr"] = f"127.0.0.1:{port + 1}"
    if int(res.values.get(opts.dest("nnodes") or "") or 1) > 1:  # a multi-node launch, rehearsed on this host
        want.update({"nnodes": 1, **({"node_rank": 0} if opts.dest("node_rank") else {})})
    for names, cap in GRAPH_CAPS if not res.values.get(opts.dest("disable_cuda_graph") or "") else ():
        name = next((n for n in names if opts.dest(n)), None)
        if name and int(res.values.get(opts.dest(name)) or cap + 1) > cap:
            want[name] = cap
    if opts.dest("speculative_draft_load_format"):
        want["speculative_draft_load_format"] = "auto"
    else:
        notes.append(
            f"SGLang {version} has no --speculative-draft-load-format: the draft would be dummy-loaded too; "
            "a rehearsal needs the miniature target's weights written instead (not built by the kit yet)"
        )
    return want


def _program(head: list[str], entry: str, changes: list[Change]) -> list[str]:
    """The words before the server's flags; a Python entry runs on the interpreter running the kit."""
    out = list(head)
    if entry.startswith("python"):
        out[0] = sys.executable
        if os.path.basename(head[0]) != os.path.basename(sys.executable):
            changes.append(
                Change("python", head[0], sys.executable, "the interpreter running the kit (SGLang or its bundle)")
            )
    return out


def _bundle_flags(bundle_flags: tuple[str, ...], res, opts: _Options, version: str, changes: list[Change]):
    """The bundle's flags resolved (None: none), each that overrides a user's value recorded as a change."""
    from kit.sglang.flags import resolve_flags

    if "--dtype" in bundle_flags and str(res.values.get(opts.dest("dtype")) or "auto") not in ("float32", "float"):
        # the bundle's --dtype stands in only for a float32 it cannot run (sgl_kernel has no fp32 rmsnorm); `auto`
        # never resolves to float32 (SGLang runs a float32 config as float16), so the user's dtypes stay, and a
        # target/draft dtype fault between them is rehearsed as written
        i = bundle_flags.index("--dtype")
        bundle_flags = (*bundle_flags[:i], *bundle_flags[i + 2 :])
    extra = resolve_flags(list(bundle_flags), version) if bundle_flags else None
    for o in extra.occurrences if extra else ():  # each flag added, or replacing the user's value (a switch: True)
        old = next((" ".join(u.raws) or True for u in reversed(res.occurrences) if u.dest == o.dest), None)
        if old != (" ".join(o.raws) or True):
            changes.append(Change(o.canonical, old, " ".join(o.raws) or True, BUNDLE_REASON))
    return extra


def _server_flags(
    res, extra, want: dict[str, Any], opts: _Options, tp: int, user_tp: int, changes: list[Change], notes: list[str]
) -> list[str]:
    """The server's flags: the user's less those the rehearsal replaces or cannot stage, the bundle's, the
    rehearsal's `want`, then what the table could not read, as written."""
    revisions = [n for n in ("revision", "speculative_draft_model_revision") if opts.dest(n)]
    skip = {opts.dest(n) for n in [*want, "tokenizer_path", *revisions]} | {
        o.dest for o in (extra.occurrences if extra else ())
    }
    for o in res.occurrences:  # one server, one host: PD disaggregation and DeepEP's all-to-all need peers and RDMA
        if (
            o.dest.startswith("disaggregation_")
            or o.dest == "deepep_mode"
            or (o.dest == "moe_a2a_backend" and res.raw(o.dest) == "deepep")
        ):
            skip.add(o.dest)
            changes.append(Change(o.canonical, res.raw(o.dest) or True, None, OWN["unrehearsed"]))
    kept = res.canonical_args(skip=skip) + (extra.canonical_args() if extra else [])
    # what the table could not read stays as written: SGLang's own parser is the judge of it
    leftover = [t for e in res.errors for t in e["tokens"]]
    leftover += [t for t in res.unknown if t not in leftover]
    if leftover:
        notes.append(f"kept as written for SGLang's parser to judge: {' '.join(leftover)}")
    for name in ("dp_size", "ep_size", "pp_size"):
        v = res.values.get(opts.dest(name)) if opts.dest(name) else None
        if v and int(v) > 1 and tp < user_tp:
            kept = drop_option(kept, opts.option(name), True)[0]
            changes.append(Change(opts.option(name), v, None, f"TP{tp} rehearsal: no room for {name}={v}"))
    for name, new in want.items():
        opt = opts.option(name)
        old = res.raw(opts.dest(name)) if any(o.dest == opts.dest(name) for o in res.occurrences) else None
        if str(old) != str(new):
            changes.append(Change(opt, old, new, _tp_reason(tp, user_tp) if name == "tp_size" else OWN[name]))
        kept += [opt] if new is True else [opt, str(new)]
    kept += leftover
    if opts.dest("tokenizer_path") and res.values.get(opts.dest("tokenizer_path")):
        changes.append(Change("--tokenizer-path", res.raw(opts.dest("tokenizer_path")), None, OWN["tokenizer_path"]))
    for name in revisions:
        if res.values.get(opts.dest(name)):
            changes.append(Change(opts.option(name), res.raw(opts.dest(name)), None, OWN["revision"]))
    return kept


def _tp_reason(tp: int, user_tp: int) -> str:
    """Why the rehearsal runs at TP `tp` where the launch asks for `user_tp`."""
    if tp == user_tp:
        return "the launch's TP: this host has the GPUs"
    if tp == 1:
        return f"fewer GPUs here than TP{user_tp}: TP1, so TP sharding and NCCL are not rehearsed"
    return f"fewer GPUs here than TP{user_tp}: TP{tp}, sharded over {tp} GPUs and NCCL, at a smaller TP"


def _rehearsal_env(
    env: dict[str, str],
    site_dir: str,
    record: str,
    cuda_visible_devices: str | None,
    tp: int,
    user_tp: int,
    changes: list[Change],
) -> dict[str, str]:
    """The launch's environment with the recorder first on PYTHONPATH, its record file, and the GPUs it sees."""
    new_env = dict(env)
    new_env["PYTHONPATH"] = recorder_first(site_dir, env, changes)
    new_env["KIT_REHEARSAL_RECORD"] = record
    if cuda_visible_devices is not None:
        if (old := env.get("CUDA_VISIBLE_DEVICES")) != cuda_visible_devices:
            changes.append(Change("CUDA_VISIBLE_DEVICES", old, cuda_visible_devices, "this rehearsal's GPUs"))
        new_env["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
    elif "CUDA_VISIBLE_DEVICES" in env and tp < user_tp:
        changes.append(Change("CUDA_VISIBLE_DEVICES", env["CUDA_VISIBLE_DEVICES"], None, f"TP{tp}: this host's GPUs"))
        new_env.pop("CUDA_VISIBLE_DEVICES")
    return new_env


def plan_rehearsal(cfg: RehearsalConfig, port: int | None = None) -> RehearsalPlan:
    """Build the miniatures under cfg.out and the adjusted launch (nothing is started)."""
    from kit.checkpoint.processors import STAND_IN_PROCESSORS
    from kit.rehearsal.miniature import (
        miniature_target,
        missing_processor,
        write_miniature_draft,
        write_miniature_target,
        write_stand_in_processor,
    )
    from kit.serving.process import free_port
    from kit.sglang.cmdline import find_launch
    from kit.sglang.flags import flag_value
    from kit.sglang.versions import default_release, importable_version

    version = cfg.sglang_version or importable_version() or default_release()
    tpath = Path(cfg.target)
    tcfg = _read_json(tpath / "config.json" if tpath.is_dir() else tpath, "target config.json")
    dpath = Path(cfg.draft)
    dcfg = _read_json(dpath / "config.json", "draft config.json")
    try:
        text = Path(cfg.launch_file).read_text()
    except OSError as e:
        raise KitInputError(f"{cfg.launch_file}: cannot read the launch file ({e})")
    found = find_launch(text, source=cfg.launch_file, version=version)
    if found is None:
        raise KitInputError(f"{cfg.launch_file}: no SGLang launch found in it")
    why = not_rehearsable(HFConfig.of(tcfg), found, version, tpath if tpath.is_dir() else tpath.parent)
    if why and not cfg.dry_run:  # a dry run shows the plan and why it cannot run
        raise KitInputError(f"not rehearsable: {why}")
    user_tp = int(flag_value(found.argv, "--tp-size", version) or 1)
    if cfg.cuda_visible_devices is not None:
        gpus = len([g for g in cfg.cuda_visible_devices.split(",") if g.strip()])
    else:
        gpus = cfg.gpus if cfg.gpus is not None else gpu_count()
    tp = cfg.tp or (user_tp if gpus >= user_tp else 1)
    if tp > max(gpus, 1) and not cfg.dry_run:
        raise KitInputError(f"--tp {tp}: only {gpus} GPU(s) available to the rehearsal")
    mini = miniature_target(tcfg, tp=tp, hidden=cfg.hidden, shrink_head_dims=cfg.shrink_head_dims, draft_config=dcfg)
    out = Path(cfg.out).resolve()
    if out.exists() and any(out.iterdir()) and not (out / "plan.json").exists():
        raise KitInputError(f"{out}: exists and is not a rehearsal directory; choose another --out")
    tdir, ddir, site = out / "target", out / "draft", out / SITE_DIR
    tsrc = tpath if tpath.is_dir() else tpath.parent
    stand_in = min(missing_processor(HFConfig.of(tcfg), tsrc, version) & STAND_IN_PROCESSORS.keys(), default=None)
    write_miniature_target(tcfg, tdir, mini, tsrc)
    stand_in_note = write_stand_in_processor(tdir, stand_in) if stand_in else None
    write_miniature_draft(dpath, ddir, mini)
    site.mkdir(parents=True, exist_ok=True)
    install_as_sitecustomize(Path(__file__).with_name("hooks.py"), site)
    record = out / RECORD_NAME
    port = port or cfg.port or free_port()
    # SGLang installed from the kit's bundle: its manifest's flags; else, with --bundle, the release's bundle's
    bundle_flags = tuple(bundle_launch_flags(version if cfg.bundle else None))
    # found.server_env: what the user's server sees (an unexported shell variable stays out)
    env, argv, changes, notes = adjust_launch(
        found.server_env, found.argv, version, str(tdir), str(ddir), tp, port, cfg.mem_fraction, str(site),
        str(record), bundle_flags, cfg.max_total_tokens, cfg.nccl_port, cfg.cuda_visible_devices,
    )  # fmt: skip
    notes = [*mini.notes, *([stand_in_note] if stand_in_note else []), *notes]
    notes.append(f"miniature widths: {', '.join(f'{k} {a} -> {b}' for k, (a, b) in mini.sizes.items())}")
    notes.append(
        "random weights: the rehearsal says whether the deployment runs as configured, never how well it accepts"
    )
    notes += [f"not seen by the server in the user's shell: {k} ({why})" for k, why in found.unseen.items()]
    blocked = f"not rehearsable: {why}" if why else next((n for n in notes if "not built by the kit yet" in n), None)
    plan = RehearsalPlan(
        cfg, version, env, argv, changes, notes, str(tdir), str(ddir), str(record), port, tp, user_tp, blocked
    )
    (out / "plan.json").write_text(json.dumps(plan.to_dict(), indent=1, default=str) + "\n")
    return plan


# -- running it ---------------------------------------------------------------------------------------------
def run_rehearsal(plan: RehearsalPlan, on_line=None) -> dict[str, Any]:
    """Start SGLang on the plan, send requests by input_ids, stop it, check GPU memory; the raw result."""
    from kit.serving.process import ServerExited, ServerNotReady, ServerProcess, http_json
    from kit.sglang.http_api import http_api

    api = http_api(plan.version)
    if plan.blocked:
        raise KitInputError(f"rehearsal cannot run: {plan.blocked}")
    Path(plan.record).unlink(missing_ok=True)
    mem_before = gpu_memory_used()
    t0 = time.monotonic()
    result: dict[str, Any] = {"started": False, "requests": [], "gpu_memory_before": mem_before}
    log = str(Path(plan.record).with_name("server.log"))
    srv = ServerProcess(plan.argv, env={**os.environ, **plan.env}, port=plan.port, log_file=log, on_line=on_line)
    try:
        try:
            info = srv.wait_ready(timeout=plan.config.timeout)
            result["started"] = True
            result["startup_s"] = round(time.monotonic() - t0, 1)
            for i in range(plan.config.requests):
                body = {
                    "input_ids": REQUEST_IDS[0][: 4 + 3 * i] if i else REQUEST_IDS[0],
                    "sampling_params": {"max_new_tokens": plan.config.max_new_tokens, "temperature": 0},
                }
                status, out = http_json(srv.base_url + api.generate_path, data=body, timeout=120)
                meta = out.get("meta_info", {}) if isinstance(out, dict) else {}
                n_out = len(out.get("output_ids") or []) if isinstance(out, dict) else 0
                err = None if status == 200 else str(out)[:500]
                result["requests"].append(
                    {"status": status, "output_tokens": n_out, "spec": api.spec_fields(meta), "error": err}
                )
            result["server_info"] = (info or {}).get("server_info")
            result["own_while_up"] = _own_gpu(plan.record)
        except ServerNotReady as e:  # still starting: a limit reached, not a verdict on the deployment
            result["timed_out"] = {"after_s": round(e.timeout), "last_log_line": e.last[-300:]}
            result["exit"] = str(e)[-4000:]
        except ServerExited as e:
            result["exit"] = str(e)[-4000:]
    finally:
        result["exit_code"] = srv.stop()
        result["log_tail"] = srv.tail(60)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    result.update(end_check(plan, mem_before, result.get("own_while_up")))
    result["record"] = read_record(plan.record)
    return result


def _own_gpu(record: str) -> dict[str, Any]:
    pids = own_processes(record)
    apps = gpu_apps()
    return {"pids": pids, "gpu_mib": None if apps is None else {p: apps[p] for p in pids if p in apps}}


def end_check(plan: RehearsalPlan, mem_before: list[int] | None, while_up: dict | None) -> dict[str, Any]:
    """After the stop, in both modes: the rehearsal's own processes are gone (stragglers are killed and named).
    `end_check` "gpu": every GPU's memory back to its level before the start (one rehearsal on the host);
    "own": none of its processes holds GPU memory (rehearsals sharing GPUs: the whole GPU says nothing)."""
    out: dict[str, Any] = {"end_check": plan.config.end_check, "gpu_memory_before": mem_before}
    deadline = time.monotonic() + 20
    left = own_processes(plan.record)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = own_processes(plan.record)
    for pid in left:  # processes of this rehearsal that outlived the stop
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    out["own_processes_left"] = left
    if plan.config.end_check == "own":
        seen = set((while_up or {}).get("pids") or []) | set(left)
        apps = _settled_apps(seen)
        held = None if apps is None else {p: apps[p] for p in seen if p in apps}
        out["own_gpu_memory_mib"] = held
        out["gpu_memory_returned"] = None if held is None else not held
        if while_up and while_up.get("gpu_mib") == {}:
            out["end_check_note"] = (
                "nvidia-smi listed none of the rehearsal's pids while it ran (another PID namespace?): "
                "the memory half of the check rests on its processes being gone"
            )
    else:
        out["gpu_memory_after"] = settled_memory(mem_before)
        out["gpu_memory_returned"] = (
            None
            if mem_before is None or out["gpu_memory_after"] is None
            else _returned(out["gpu_memory_after"], mem_before)
        )
    out["clean"] = not left and out["gpu_memory_returned"] is not False
    return out


def _settled_apps(pids: set[int], wait: float = 20.0) -> dict[int, int] | None:
    """nvidia-smi's compute apps once none of `pids` is listed, or after `wait` s (the driver frees lazily)."""
    deadline = time.monotonic() + wait
    while True:
        apps = gpu_apps()
        if apps is None or not (pids & set(apps)) or time.monotonic() > deadline:
            return apps
        time.sleep(1)


def _returned(now: list[int], before: list[int]) -> bool:
    """Every GPU's memory back to its level before (64 MiB of slack)."""
    return all(a <= b + 64 for a, b in zip(now, before))


def settled_memory(before: list[int] | None, wait: float = 20.0) -> list[int] | None:
    """GPU memory after the stop, given up to `wait` s to return to `before` (the driver frees it lazily)."""
    deadline = time.monotonic() + wait
    while True:
        now = gpu_memory_used()
        if now is None or before is None or _returned(now, before) or time.monotonic() > deadline:
            return now
        time.sleep(1)


def read_record(path: str | Path) -> dict[str, Any]:
    """Merge the recorder's JSON lines: {kind: [observations]}; unreadable lines are counted, not fatal."""
    out: dict[str, Any] = {"bad_lines": 0}
    p = Path(path)
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            obs = json.loads(line)
        except json.JSONDecodeError:
            out["bad_lines"] += 1
            continue
        out.setdefault(obs.get("kind", "?"), []).append(obs)
    return out


# -- record -> findings -------------------------------------------------------------------------------------
# codes a rehearsal can observe; a static finding with another code is "not rehearsed"
OBSERVABLE = set(
    "aux.algorithm aux.target_capture aux.hidden_width aux.fc_width draft.keys_dropped draft.params_missing "
    "draft.quant draft.config draft.arch draft.context_short draft.nextn_zero draft.dtype launch.flag "
    "launch.spec_verify launch.remote_code_needed".split()
)
# SGLang's startup exception text -> the code that names that fault
EXCEPTION_CODES = (
    (r"too many values to unpack|not enough values to unpack|cannot unpack", "aux.target_capture"),
    (r"mat1 and mat2 shapes cannot be multiplied", "aux.hidden_width"),
    # target and draft resolved to different dtypes (kit.sglang.dtype): the draft's first linear gets both
    (r"expected mat1 and mat2 to have the same dtype|mat1 and mat2 must have the same dtype", "draft.dtype"),
    (r"To allow overriding this maximum|context_length.*greater than|longer than the derived", "draft.context_short"),
    (r"Unrecognized model|Unrecognized configuration class", "draft.config"),
    (r"Model architectures? \[.*\] (is|are) not supported|not supported for now", "draft.arch"),
    (r"set_mla_kv_buffer|list index out of range", "draft.nextn_zero"),
    (r"invalid choice|unrecognized arguments|ambiguous option|expected one argument", "launch.flag"),
    (r"size mismatch|shape mismatch|Attempted to load|assert param.*size", "aux.fc_width"),
    (r"expanded size of the tensor \(\d+\) must match the existing size", "launch.spec_verify"),
    (r"contains custom code which must be executed", "launch.remote_code_needed"),
)
RUNTIME_FILLED = ("embed_tokens", "lm_head")  # set from the target after load_weights when shared
TIMEOUT = TIMED_OUT.code  # the server was still starting at the limit: no verdict either way


def _startup_text(result: dict[str, Any]) -> str:
    rec = result.get("record") or {}
    tb = "\n".join(o.get("traceback", "") for o in rec.get("exception", []))
    parts = (tb, result.get("exit") or "", "\n".join(result.get("log_tail") or []))
    return "\n".join(p for p in parts if p)


def target_inputs(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The recorded draft forwards that carry the target's hidden states: every mode but decode (a draft decode
    step carries the draft's own H-wide state in every EAGLE-3 run, `get_draft_recurrent_hidden_state_spec`)."""
    return [o for o in rec.get("draft_input", []) if not o.get("decode")]


def observed_findings(result: dict[str, Any]) -> list[Finding]:
    """What the rehearsal saw, in the kit's finding codes."""
    rec = result.get("record") or {}
    out: list[Finding] = []
    if result.get("timed_out"):
        t = result["timed_out"]
        out.append(
            TIMED_OUT(
                f"SGLang was not ready within {t['after_s']} s (still starting: {t['last_log_line'][:200]!r})",
                evidence={"exception": _startup_text(result)[-2000:]},
            )
        )
    elif not result.get("started"):
        text = _startup_text(result)
        code = STARTUP.code  # unless one of the kit's codes names the exception
        code = next((c for rx, c in EXCEPTION_CODES if re.search(rx, text)), code)
        lines = [ln for ln in text.splitlines() if ln.strip()]
        errs = [ln for ln in lines if re.search(r"\w+(Error|Exception)\b:?", ln)]
        last = (errs or lines or [""])[-1]
        out.append(
            Finding(
                code=code,
                severity="error",
                title=f"SGLang did not start: {last.strip()[:200]}",
                evidence={"exception": text[-2000:]},
            )
        )
    for obs in rec.get("load_weights", []):
        if obs.get("skipped"):
            out.append(
                KEYS_DROPPED(
                    f"{obs['draft_class']}.load_weights skipped {len(obs['skipped'])} checkpoint tensor(s)",
                    evidence={"skipped": obs["skipped"]},
                )
            )
        missing = [p for p in obs.get("unfilled", []) if not any(r in p for r in RUNTIME_FILLED)]
        if missing:
            norms_only = all("norm" in p for p in missing)
            out.append(
                PARAMS_MISSING(
                    f"{len(missing)} draft parameter(s) never filled by load_weights",
                    evidence={"unfilled": missing},
                    severity="warning" if norms_only else "error",
                )
            )
    inputs = target_inputs(rec)
    if inputs and result.get("started"):
        w = inputs[0]
        widths = {o["width"] for o in inputs}
        if w.get("draft_hidden") in widths and (w.get("fc_in") or 0) not in widths:
            out.append(
                ALGORITHM(f"the draft receives width {w['width']} = its hidden size: fc is bypassed", evidence=w)
            )
    # ModelConfig.quantization is the parse; the loader may still build the draft unquantized (a ModelOpt file
    # without quant_algo on a LlamaForCausalLMEagle3 head, kit.sglang.quant.no_algo_loader)
    built = [o["quant_config"] for o in rec.get("load_weights", []) if "quant_config" in o]
    unquantized = bool(built) and all(q is None for q in built)
    for mc in rec.get("model_config", []):
        if mc.get("is_draft_model") and mc.get("quantization") and not unquantized:
            out.append(QUANT(f"the draft was set up quantized: {mc['quantization']}", evidence=mc))
    return out


def observed_facts(result: dict[str, Any]) -> dict[str, Any]:
    """The plain facts a report shows (captured layers, draft input width, resolved speculative parameters)."""
    rec = result.get("record") or {}
    cap = (rec.get("capture") or [{}])[-1]
    args = (rec.get("server_args") or [{}])[-1]
    return {
        "started": result.get("started"),
        "startup_s": result.get("startup_s"),
        "captured": cap.get("layers_to_capture"),
        "marked": cap.get("marked"),
        "capture_ids": cap.get("layer_ids"),
        "draft_input_width": [o.get("width") for o in target_inputs(rec)][:1],
        "draft_fc_in": [o.get("fc_in") for o in target_inputs(rec)][:1],
        "draft_hidden": [o.get("draft_hidden") for o in target_inputs(rec)][:1],
        "load_weights": [
            {
                "draft_class": o.get("draft_class"),
                "skipped": o.get("skipped") or [],
                "unfilled": o.get("unfilled") or [],
            }
            for o in rec.get("load_weights", [])
        ],
        "speculative": {k: args.get(k) for k in args if k.startswith("speculative_")},
        **{
            key: {("draft" if m.get("is_draft_model") else "target"): m.get(f) for m in rec.get("model_config", [])}
            for key, f in (("dtypes", "dtype"), ("quantization", "quantization"))
        },
        "spec_verify_ct": [(r.get("spec") or {}).get("verify_ct") for r in result.get("requests", [])],
        "gpu_memory_returned": result.get("gpu_memory_returned"),
        "end_check": result.get("end_check"),
        "own_processes_left": result.get("own_processes_left"),
        "own_gpu_mib_while_up": (result.get("own_while_up") or {}).get("gpu_mib"),
        "clean": result.get("clean"),
    }


def compare(static: list[Finding], observed: list[Finding], started: bool = True) -> list[dict[str, Any]]:
    """One row per code: doctor's severity, what the rehearsal saw, and confirmed / refuted / new / not rehearsed
    / not reached (SGLang stopped at an earlier fault, before it could show this one, or was still starting at
    the limit) / timed out (the TIMEOUT row itself: no verdict)."""
    st: dict[str, str] = {}
    for f in static:
        if f.severity in ("error", "warning"):
            st[f.code] = "error" if "error" in (st.get(f.code), f.severity) else f.severity
    ob = {f.code: f for f in observed}
    rows = []
    for code in sorted(set(st) | set(ob)):
        if code == TIMEOUT:
            verdict = "timed out"
        elif TIMEOUT in ob and code in st:
            verdict = "not reached"
        elif code in st and code in ob:
            verdict = "confirmed"
        elif code in st and code in OBSERVABLE and st[code] == "error":
            verdict = "refuted" if started else "not reached"
        elif code in st:
            verdict = "not rehearsed"
        else:
            verdict = "new"
        seen = ob[code].title if code in ob else None
        rows.append({"code": code, "doctor": st.get(code), "rehearsal": seen, "verdict": verdict})
    return rows
