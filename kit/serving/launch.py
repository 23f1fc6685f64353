"""Launch specs: a typed SGLang launch line that the kit builds, parses back, lints, starts and watches.

The seed's launch line was a wall of NCCL variables and flags that ran `--speculative-algorithm
EAGLE` for an EAGLE-3 draft. Here a launch is a `LaunchSpec` dataclass whose field names are
SGLang's own argument names (`speculative_num_steps` <-> `--speculative-num-steps`, the rule of
SGLang's `arg_utils.py`), so:

    spec = spec_from_command(open("seed_launch.sh").read())   # env assignments and all
    spec.argv(), spec.env                                      # back to argv + environment
    report = lint(spec)                                        # kit.serving.checks: real parser + rules

`--engine reference` turns the same spec into `python -m kit serve ...`, the kit's CPU reference
server, which takes SGLang's flag names and semantics.

    python -m kit launch --from "$(cat seed_launch.sh)" --dry-run --json
    python -m kit launch --engine reference --speculative-algorithm EAGLE3 --speculative-draft-model-path D

`--dry-run` starts nothing; with `--json` the last line is {"argv": [...], "env": {...}, "findings": [...]}.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit import config as kconfig
from kit.findings import Code, Finding, KitInputError, Report
from kit.serving.engines import SGLANG_MODULE, get_engine
from kit.sglang.params import EAGLE_FAMILY, SpecParams, resolve

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "launch/process/logs: notebook 04"
UNPARSED = Code(
    "launch.unparsed",
    SECTION,
    "warning / info",
    (
        "warning: parts of the launch text the kit cannot attribute and that may change the launch "
        "(`source`/`eval`, `$(...)` or undefined `$VAR`, `--env-file`, `--config FILE`, a further launch); "
        "info: other commands in the text (not checked)"
    ),
    "write the values out in the command to have them checked",
)
ENV_SCOPE = Code(
    "launch.env_scope",
    SECTION,
    "warning",
    (
        "a variable the text sets for the server does not reach it as written: `VAR=1 && python ...` or "
        "`VAR=1;` (a shell variable, not exported), a host variable not passed into `docker run` with `-e`, "
        "`sudo` without `-E`"
    ),
    "export it, put `VAR=value` right before the command, or `docker run -e VAR=value`",
)

# not SGLang flags: the interpreter, environment, unparsed extras and the kit's log file
KIT_ONLY = {"python", "env", "extra_args", "log_file"}


def _f(help_: str, default: Any = None, **meta) -> Any:
    return field(default=default, metadata={"help": help_, **meta})


@dataclass
class LaunchSpec:
    """One server launch. Field names are SGLang argument names; KIT_ONLY fields are the kit's. Its three
    speculative fields as one `SpecParams`: `spec_params()` reads, `replace(**params.given())` writes them."""

    model_path: str = _f(
        "target model: a local dir, 'embedded' (SmolLM2, its cached dir for SGLang) or a Hugging Face id (checked "
        "from the local cache, else from its config.json and safetensors headers; SGLang downloads it)",
        "embedded",
    )
    revision: str | None = _f("the target's hub revision: branch, tag or commit (a hub id only)")
    speculative_algorithm: str | None = _f("EAGLE3 for an EAGLE-3 draft (EAGLE skips aux capture)")
    speculative_draft_model_path: str | None = _f(
        "draft checkpoint dir or Hugging Face id (`kit launch`: 'demo' = the kit's demo draft)"
    )
    speculative_draft_model_revision: str | None = _f("the draft's hub revision (a hub id only)")
    speculative_num_steps: int | None = _f("draft steps per verify (set steps/topk/draft tokens together)")
    speculative_eagle_topk: int | None = _f("branching factor per step (1 = chain)")
    speculative_num_draft_tokens: int | None = _f("tokens verified per step, root included")
    tp_size: int | None = _f("tensor parallel size")
    mem_fraction_static: float | None = _f("fraction of GPU memory for weights + KV cache")
    context_length: int | None = _f("most tokens per request, prompt + output (default: the model's config)")
    host: str | None = _f("bind address (SGLang default 127.0.0.1)")
    port: int | None = _f("HTTP port (SGLang default 30000)")
    api_key: str | None = _f("API key the server requires")
    served_model_name: str | None = _f("model name reported by /v1/models")
    trust_remote_code: bool = _f("run the model repo's Python code", False)
    attention_backend: str | None = _f("attention backend (flashinfer, triton, fa3, trtllm_mha, ...)")
    speculative_draft_attention_backend: str | None = _f("draft attention backend")
    page_size: int | None = _f("KV cache page size")
    max_running_requests: int | None = _f("max concurrent requests")
    max_queued_requests: int | None = _f("most requests waiting for a slot; past it a request gets 503 + Retry-After")
    chunked_prefill_size: int | None = _f("most prompt tokens one step prefills, over all requests (-1: no chunking)")
    decode_log_interval: int | None = _f("decode forwards between 'Decode batch' log lines (default 40)")
    enable_metrics: bool = _f("serve Prometheus /metrics", False)
    log_level: str | None = _f("log level")
    python: str = _f("interpreter that runs SGLang", "python3")
    log_file: str | None = _f("file the kit streams the server log to")
    extra_args: list = field(default_factory=list, metadata={"cli": False})
    env: dict = field(default_factory=dict, metadata={"cli": False})

    # -- spec -> argv -------------------------------------------------------------------------
    def items(self) -> list[tuple[str, Any]]:
        """(field, value) for every SGLang field that is set, in field order."""
        values = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if f.name not in KIT_ONLY]
        return [(n, v) for n, v in values if v is not None and v is not False]

    def flags(self, flag: Callable[[str], str | None] | None = None) -> list[str]:
        """SGLang flags for every field that is set, in field order, then the extras. With `flag` (a serving
        engine's field -> flag name, None = not taken: `kit.serving.engines`), its flags and no extras."""
        out: list[str] = []
        for name, v in self.items():
            f = "--" + name.replace("_", "-") if flag is None else flag(name)
            if f is not None:
                out += [f] if v is True else [f, _fmt(v)]
        return out + (list(self.extra_args) if flag is None else [])

    def argv(self, engine: str = "sglang") -> list[str]:
        """The process argv for that serving engine (`kit.serving.engines`)."""
        return get_engine(engine).argv(self)

    def command(self, engine: str = "sglang") -> str:
        from kit.sglang.cmdline import join_command

        return join_command(self.env, self.argv(engine))

    def spec_params(self) -> SpecParams:
        """The three speculative values as given on the command line (None = not given)."""
        return SpecParams(self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens)

    def resolved_params(self, target_arch: str | None = None, sglang_version: str | None = None) -> SpecParams | None:
        """What SGLang runs for this launch (`kit.sglang.params.resolve`); None without speculation
        or when that release would refuse (or crash on) the values."""
        alg = (self.speculative_algorithm or "").upper()
        if alg not in EAGLE_FAMILY:
            return None
        return resolve(self.spec_params(), alg, target_arch, sglang_version).params

    def replace(self, **changes) -> LaunchSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _fmt(v: Any) -> str:
    return repr(v) if isinstance(v, float) and v != int(v) else (str(int(v)) if isinstance(v, float) else str(v))


_HINTS = typing.get_type_hints(LaunchSpec)
FIELDS = {f.name: f for f in dataclasses.fields(LaunchSpec) if f.name not in KIT_ONLY}


def _scalar_type(name: str):
    return kconfig._base_type(_HINTS[name])[0]


# -- argv -> spec ---------------------------------------------------------------------------------
def spec_from_argv(argv: list[str], env: dict[str, str] | None = None, sglang_version: str | None = None) -> LaunchSpec:
    """Parse `python -m sglang.launch_server ...`, `sglang serve ...` or `python -m kit serve ...`.

    Flags are read as that release's argparse reads them (`kit.sglang.flags.resolve_flags`: prefixes,
    `--flag=value`, aliases, last repeat wins, types, choices). Flags the spec types become fields;
    every other flag goes to `extra_args` in its full spelling; unknown flags and values SGLang would
    reject are kept there verbatim, for SGLang's parser (and `launch.flag`) to judge.
    """
    from kit.sglang.cmdline import sglang_launch_test
    from kit.sglang.flags import resolve_flags, server_flags

    argv = list(argv)
    hit = sglang_launch_test(sglang_version)(argv) if argv else None
    if hit is None and argv and not argv[0].startswith("-"):
        raise KitInputError(
            f"launch command: {' '.join(argv[:3])!r} is not an SGLang launch "
            f"(expected `python -m {SGLANG_MODULE} ...` or `sglang serve ...`)"
        )
    entry = hit[0] if hit else ""
    python = argv[0] if entry.startswith("python") else "python3"
    flags = argv[hit[1] :] if entry == "python -m kit serve" else server_flags(argv, sglang_version)[0]
    res = resolve_flags(flags, sglang_version)
    values: dict[str, Any] = {}
    for name in FIELDS:
        if name not in res.values:
            continue
        v, tp = res.values[name], _scalar_type(name)
        try:
            values[name] = v if tp is bool or isinstance(v, tp) else tp(v)
        except (TypeError, ValueError):
            continue
    extra = res.canonical_args(skip=set(values))
    extra += [t for e in res.errors for t in e["tokens"]] + res.unknown
    return LaunchSpec(python=python, env=dict(env or {}), extra_args=extra, **values)


def launch_from_text(
    text: str, sglang_version: str | None = None, source: str = "launch command"
) -> tuple[LaunchSpec, list[Finding]]:
    """A launch as people write it (a script, `&&` chains, exports, docker run, ...) -> (spec, findings).

    The findings say what the kit could not attribute (`launch.unparsed`) and which variables the
    server would not see as written (`launch.env_scope`); the spec's env holds every variable the
    text meant for the server. KitInputError (exit 2) only when the text holds no SGLang launch."""
    _, spec, out = parse_launch(text, sglang_version, source)
    return spec, out


def parse_launch(text: str, sglang_version: str | None = None, source: str = "launch command"):
    """`launch_from_text` with the shell launch it found (`kit.sglang.cmdline.ShellLaunch`: the argv, the
    environment the text sets and the part the server sees): (found, spec, findings)."""
    from kit.sglang.cmdline import find_launch

    found = find_launch(text, source=source, version=sglang_version)
    if found is None:
        first = " ".join(text.strip().split()[:4]) or "(empty)"
        raise KitInputError(
            f"{source}: no SGLang launch found in {first!r}... (expected `python -m "
            f"{SGLANG_MODULE} ...` or `sglang serve ...`, alone or in a script)"
        )
    spec = spec_from_argv(found.argv, found.env, sglang_version)
    out: list[Finding] = []
    unread = [n for n in found.notes if n["kind"] != "command"]
    others = [n["text"] for n in found.notes if n["kind"] == "command"]
    config = spec.extra_args[spec.extra_args.index("--config") + 1 :][:1] if "--config" in spec.extra_args else []
    if unread or config:
        items = [f"{n['text']} ({n['why']})" for n in unread] + [
            f"--config {c} (its flags were not read)" for c in config
        ]
        out.append(
            UNPARSED(
                f"{len(items)} part(s) of the launch text could not be attributed; the "
                "checks below do not include them: " + "; ".join(items)[:300],
                evidence={
                    "items": unread + [{"kind": "config", "text": c} for c in config],
                    "entry": found.entry,
                    "wrappers": found.wrappers,
                },
                fix="write the values out in the command (no $(...), env files or config files) to have them checked",
            )
        )
    if others:
        out.append(
            UNPARSED(
                "not part of the SGLang launch, not checked: " + "; ".join(others)[:300],
                evidence={"commands": others, "entry": found.entry},
                severity="info",
                fix="",
            )
        )
    if found.unseen:
        out.append(
            ENV_SCOPE(
                "the server does not see " + "; ".join(f"{k} ({why})" for k, why in sorted(found.unseen.items()))[:300],
                evidence={"unseen": found.unseen, "forms": found.env_forms},
                fix="export them, or put VAR=value directly before the command (docker: -e VAR=value); "
                "the kit's own command line (`kit launch --from`) passes them",
            )
        )
    return found, spec, out


def drop_option(args: list[str], opt: str, takes_value: bool) -> tuple[list[str], str | None]:
    """`args` without `opt` (as `opt value`, `opt=value` or a bare flag), and the last value it had ('True' for a
    flag); None when `opt` was not there."""
    out, old, i = [], None, 0
    while i < len(args):
        a = args[i]
        if a == opt:
            old = args[i + 1] if takes_value and i + 1 < len(args) else "True"
            i += 2 if takes_value else 1
            continue
        if a.startswith(opt + "="):
            old = a.split("=", 1)[1]
            i += 1
            continue
        out.append(a)
        i += 1
    return out, old


@dataclass
class Change:
    """One change the kit makes to a user's launch before running it (a rehearsal, a server capture): the flag or
    variable, its value as written (None: unset), the value run (None: dropped; True: a switch), and why."""

    flag: str
    original: Any
    new: Any
    reason: str


def recorder_first(site_dir: str, env: dict[str, str], changes: list[Change]) -> str:
    """The PYTHONPATH that puts a recorder's site folder (its sitecustomize.py) before the launch's own (or this
    process's), the change listed."""
    pp = os.pathsep.join(x for x in (site_dir, env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")) if x)
    changes.append(Change("PYTHONPATH", env.get("PYTHONPATH"), pp, "the recorder (sitecustomize.py) goes first"))
    return pp


def spec_from_command(cmd: str, sglang_version: str | None = None) -> LaunchSpec:
    """A whole shell text (env assignments, chains, exports, continuations, quoting) -> LaunchSpec."""
    return launch_from_text(cmd, sglang_version)[0]


# -- notebook helpers -----------------------------------------------------------------------------
def spec_frame(spec: LaunchSpec, other: LaunchSpec | None = None):
    """The set fields as a table (flag, value[, other value]) — the launch line, readable."""
    import pandas as pd

    rows = []
    for f in dataclasses.fields(LaunchSpec):
        a, b = getattr(spec, f.name), getattr(other, f.name) if other is not None else None
        if a in (None, False, [], {}) and b in (None, False, [], {}):
            continue
        flag = f.name if f.name in KIT_ONLY else "--" + f.name.replace("_", "-")
        row = {"field": flag, "value": a}
        if other is not None:
            row["fixed"] = b
        rows.append(row)
    return pd.DataFrame(rows)


def apply_fixes(spec: LaunchSpec, report: Report) -> LaunchSpec:
    """The spec with the mechanical fixes the findings name (algorithm, bind address, topk-1 tokens)."""
    changes: dict[str, Any] = {}
    codes = report.codes()
    if "aux.algorithm" in codes and (spec.speculative_algorithm or "").upper() in ("EAGLE", "NEXTN"):
        changes["speculative_algorithm"] = "EAGLE3"
    if "launch.bind" in codes:
        changes["host"] = "127.0.0.1"
    s, k = spec.speculative_num_steps, spec.speculative_eagle_topk
    if s is not None and k == 1 and spec.speculative_num_draft_tokens not in (None, s + 1):
        changes["speculative_num_draft_tokens"] = s + 1
    return spec.replace(**changes)


# `--speculative-draft-model-path demo`: the kit's demo draft for the embedded target (notebooks 03-05's default)
DEMO_DRAFT = "demo"


def resolve_local(spec: LaunchSpec, engine: str, log=print, bundle: str | None = None) -> LaunchSpec:
    """The kit's names resolved as the notebooks resolve them: `--model-path embedded` -> the cached SmolLM2
    directory for SGLang (which cannot read the name; the reference server resolves it itself), and
    `--speculative-draft-model-path demo` -> the kit's shipped demo draft (`kit.models.shipped_draft`); then the
    flags the engine installed here needs (`Engine.required_changes`: an SGLang from the kit's bundle, or with
    `bundle` that release's bundle, gets the bundle's launch flags), each one `log`ged with its reason."""
    from kit.models import DEFAULT_TARGET

    changes: dict[str, Any] = {}
    if not get_engine(engine).resolves_kit_names and spec.model_path == DEFAULT_TARGET:
        from kit.models import embedded_dir

        changes["model_path"] = str(embedded_dir())
    if spec.speculative_draft_model_path == DEMO_DRAFT:
        from kit.models import shipped_draft

        draft = shipped_draft()
        log(f"shipped draft: {draft}")
        changes["speculative_draft_model_path"] = str(draft)
    spec = spec.replace(**changes)
    changes, notes = get_engine(engine).required_changes(spec, bundle)
    for note in notes:
        log(note)
    return spec.replace(**changes)


def localize(
    spec: LaunchSpec,
    engine: str,
    target: str = "embedded",
    draft: str | None = None,
    port: int | None = None,
    decode_log_interval: int | None = None,
    tp_size: int | None = None,
    servers_per_device: int = 1,
    log=print,
) -> LaunchSpec:
    """The same launch on this machine: local target/draft paths, loopback host, a free port,
    `tp_size` GPUs when given (the notebooks start the seed's 8-GPU line on one), and the engine's memory
    share for one of `servers_per_device` servers running at once on one device (`Engine.share_device`).

    What the target becomes is the engine's (`Engine.localize`); for the reference engine the GPU-only
    flags stay in the spec (the server ignores them). What the engine installed here needs besides
    (`resolve_local`: the SGLang bundle's flags) is added, each change `log`ged."""
    from kit.serving.process import free_port

    changes: dict[str, Any] = dict(host="127.0.0.1", port=port or free_port())
    changes.update(get_engine(engine).localize(spec, target))
    if draft is not None:
        changes["speculative_draft_model_path"] = str(draft)
    if decode_log_interval is not None:
        changes["decode_log_interval"] = decode_log_interval
    if tp_size is not None:
        changes["tp_size"] = tp_size
    return resolve_local(get_engine(engine).share_device(spec.replace(**changes), servers_per_device), engine, log)
