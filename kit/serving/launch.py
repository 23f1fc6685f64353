"""Launch specs: a typed SGLang launch line that the kit builds, parses back, lints, starts and watches.

The seed's launch line was a wall of NCCL variables and flags that ran `--speculative-algorithm EAGLE` for an EAGLE-3
draft. Here a launch is a `LaunchSpec` whose field names are SGLang's own argument names (`speculative_num_steps` <->
`--speculative-num-steps`), so:

    spec = spec_from_command(open("seed_launch.sh").read())   # env assignments and all
    spec.argv(), spec.env                                      # back to argv + environment
    report = lint(spec)                                        # kit.serving.checks: real parser + rules

`--engine reference` turns the same spec into `python -m kit serve ...`, the kit's CPU reference server.
`python -m kit launch --from "$(cat seed_launch.sh)" --dry-run --json` ends with {"argv", "env", "findings", ...}.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kit import config as kconfig
from kit.config import opt
from kit.findings import Code, Finding, KitInputError, Report
from kit.serving.engines import SGLANG_MODULE, get_engine
from kit.serving.engines.sglang import drop_option  # noqa: F401  (kit.rehearsal and kit.measure.capture use it from here)
from kit.sglang.params import EAGLE_FAMILY, SpecParams, resolve

SECTION = "launch/process/logs: notebook 04"
UNPARSED = Code(
    "launch.unparsed",
    SECTION,
    "warning / info",
    "warning: parts of the launch text the kit cannot attribute and that may change the launch (`source`/`eval`, "
    "`$(...)` or undefined `$VAR`, `--env-file`, `--config FILE`, a further launch); info: other commands in the text "
    "(not checked)",
    "write the values out in the command to have them checked",
)
ENV_SCOPE = Code(
    "launch.env_scope",
    SECTION,
    "warning",
    "a variable the text sets for the server does not reach it as written: `VAR=1 && python ...` or `VAR=1;` (a shell "
    "variable, not exported), a host variable not passed into `docker run` with `-e`, `sudo` without `-E`",
    "export it, put `VAR=value` right before the command, or `docker run -e VAR=value`",
)

# not SGLang flags: the interpreter, environment, unparsed extras and the kit's log file
KIT_ONLY = {"python", "env", "extra_args", "log_file"}


@dataclass
class LaunchSpec:
    """One server launch. Field names are SGLang argument names; KIT_ONLY fields are the kit's. Its three
    speculative fields as one `SpecParams`: `spec_params()` reads, `replace(**params.given())` writes them."""

    model_path: str = opt(
        "target model: a local dir, 'embedded' (SmolLM2, its cached dir for SGLang) or a Hugging Face id (checked "
        "from the local cache, else from its config.json and safetensors headers; SGLang downloads it)",
        "embedded",
    )
    revision: str | None = opt("the target's hub revision: branch, tag or commit (a hub id only)")
    speculative_algorithm: str | None = opt("EAGLE3 for an EAGLE-3 draft (EAGLE skips aux capture)")
    speculative_draft_model_path: str | None = opt(
        "draft checkpoint dir or Hugging Face id (`kit launch`: 'demo' = the kit's demo draft)"
    )
    speculative_draft_model_revision: str | None = opt("the draft's hub revision (a hub id only)")
    speculative_num_steps: int | None = opt("draft steps per verify (set steps/topk/draft tokens together)")
    speculative_eagle_topk: int | None = opt("branching factor per step (1 = chain)")
    speculative_num_draft_tokens: int | None = opt("tokens verified per step, root included")
    tp_size: int | None = opt("tensor parallel size")
    mem_fraction_static: float | None = opt("fraction of GPU memory for weights + KV cache")
    context_length: int | None = opt("most tokens per request, prompt + output (default: the model's config)")
    host: str | None = opt("bind address (SGLang default 127.0.0.1)")
    port: int | None = opt("HTTP port (SGLang default 30000)")
    api_key: str | None = opt("API key the server requires")
    served_model_name: str | None = opt("model name reported by /v1/models")
    trust_remote_code: bool = opt("run the model repo's Python code", False)
    attention_backend: str | None = opt("attention backend (flashinfer, triton, fa3, trtllm_mha, ...)")
    speculative_draft_attention_backend: str | None = opt("draft attention backend")
    page_size: int | None = opt("KV cache page size")
    max_running_requests: int | None = opt("max concurrent requests")
    max_queued_requests: int | None = opt("most requests waiting for a slot; past it a request gets 503 + Retry-After")
    chunked_prefill_size: int | None = opt("most prompt tokens one step prefills, over all requests (-1: no chunking)")
    decode_log_interval: int | None = opt("decode forwards between 'Decode batch' log lines (default 40)")
    enable_metrics: bool = opt("serve Prometheus /metrics", False)
    log_level: str | None = opt("log level")
    python: str = opt("interpreter that runs SGLang", "python3")
    log_file: str | None = opt("file the kit streams the server log to")
    extra_args: list = field(default_factory=list, metadata={"cli": False})
    env: dict = field(default_factory=dict, metadata={"cli": False})

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


def spec_from_argv(argv: list[str], env: dict[str, str] | None = None, sglang_version: str | None = None) -> LaunchSpec:
    """Parse `python -m sglang.launch_server ...`, `sglang serve ...` or `python -m kit serve ...`, the flags read as
    that release's argparse reads them (`kit.sglang.flags.resolve_flags`). Flags the spec types become fields; every
    other flag goes to `extra_args` in its full spelling, unknown flags and rejected values verbatim."""
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
    for name in [n for n in FIELDS if n in res.values]:
        v, tp = res.values[name], kconfig._base_type(_HINTS[name])[0]
        with contextlib.suppress(TypeError, ValueError):  # a value the type refuses stays in extra_args
            values[name] = v if tp is bool or isinstance(v, tp) else tp(v)
    extra = res.canonical_args(skip=set(values))
    extra += [t for e in res.errors for t in e["tokens"]] + res.unknown
    return LaunchSpec(python=python, env=dict(env or {}), extra_args=extra, **values)


def launch_from_text(
    text: str, sglang_version: str | None = None, source: str = "launch command"
) -> tuple[LaunchSpec, list[Finding]]:
    """A launch as people write it (a script, `&&` chains, exports, docker run, ...) -> (spec, findings): what the
    kit could not attribute (`launch.unparsed`) and which variables the server would not see (`launch.env_scope`).
    KitInputError only when the text holds no SGLang launch."""
    _, spec, out = parse_launch(text, sglang_version, source)
    return spec, out


def parse_launch(
    text: str, sglang_version: str | None = None, source: str = "launch command", vllm_version: str | None = None
):
    """`launch_from_text` with the shell launch it found (`kit.sglang.cmdline.ShellLaunch`): (found, spec, findings).
    A vLLM line is read as `vllm_version` reads it (None: the installed vLLM's release, else the newest)."""
    from kit.sglang.cmdline import find_launch
    from kit.vllm import cmdline as vllm_cmdline
    from kit.vllm.rules import rules_for

    found = find_launch(text, source=source, version=sglang_version)
    if found is None and (found := find_launch(text, vllm_cmdline.launch_test, source)) is not None:
        # a vLLM line: the same deployment in SGLang's names (its own flags are judged by kit.vllm.checks)
        v = vllm_cmdline.read_argv(found.argv, rules_for(vllm_version))
        spec = LaunchSpec(env=dict(found.env), **v.spec_fields())
        return found, spec, list(_shell_findings(found, spec))
    if found is None:
        first = " ".join(text.strip().split()[:4]) or "(empty)"
        raise KitInputError(
            f"{source}: no SGLang launch found (nor a vLLM one) in {first!r}... (expected `python -m "
            f"{SGLANG_MODULE} ...`, `sglang serve ...` or `vllm serve ...`, alone or in a script)"
        )
    spec = spec_from_argv(found.argv, found.env, sglang_version)
    return found, spec, list(_shell_findings(found, spec))


def _shell_findings(found, spec: LaunchSpec) -> Iterator[Finding]:
    """`launch.unparsed` / `launch.env_scope`: what the shell text around the launch hides from the checks."""
    unread = [n for n in found.notes if n["kind"] != "command"]
    others = [n["text"] for n in found.notes if n["kind"] == "command"]
    config = spec.extra_args[spec.extra_args.index("--config") + 1 :][:1] if "--config" in spec.extra_args else []
    if unread or config:
        items = [f"{n['text']} ({n['why']})" for n in unread]
        items += [f"--config {c} (its flags were not read)" for c in config]
        yield UNPARSED(
            f"{len(items)} part(s) of the launch text could not be attributed; the "
            "checks below do not include them: " + "; ".join(items)[:300],
            evidence={
                "items": unread + [{"kind": "config", "text": c} for c in config],
                "entry": found.entry,
                "wrappers": found.wrappers,
            },
            fix="write the values out in the command (no $(...), env files or config files) to have them checked",
        )
    if others:
        title = "not part of the SGLang launch, not checked: " + "; ".join(others)[:300]
        yield UNPARSED(title, evidence={"commands": others, "entry": found.entry}, severity="info")
    if found.unseen:
        yield ENV_SCOPE(
            "the server does not see " + "; ".join(f"{k} ({why})" for k, why in sorted(found.unseen.items()))[:300],
            evidence={"unseen": found.unseen, "forms": found.env_forms},
            fix="export them, or put VAR=value directly before the command (docker: -e VAR=value); "
            "the kit's own command line (`kit launch --from`) passes them",
        )


@dataclass
class Change:
    """One change the kit makes to a user's launch before running it (a rehearsal, a capture): the flag or variable,
    its value as written (None: unset), the value run (None: dropped; True: a switch), and why."""

    flag: str
    original: Any
    new: Any
    reason: str


def recorder_first(site_dir: str, env: dict[str, str], changes: list[Change]) -> str:
    """The PYTHONPATH that puts a recorder's site folder before the launch's own (or this process's), the change
    listed."""
    pp = os.pathsep.join(x for x in (site_dir, env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")) if x)
    changes.append(Change("PYTHONPATH", env.get("PYTHONPATH"), pp, "the recorder (sitecustomize.py) goes first"))
    return pp


def spec_from_command(cmd: str, sglang_version: str | None = None) -> LaunchSpec:
    """A whole shell text (env assignments, chains, exports, continuations, quoting) -> LaunchSpec."""
    return launch_from_text(cmd, sglang_version)[0]


def spec_frame(spec: LaunchSpec, other: LaunchSpec | None = None):
    """The set fields as a table (flag, value[, other value]) — the launch line, readable."""
    import pandas as pd

    rows = []
    for f in dataclasses.fields(LaunchSpec):
        a, b = getattr(spec, f.name), getattr(other, f.name) if other is not None else None
        if a in (None, False, [], {}) and b in (None, False, [], {}):
            continue
        flag = f.name if f.name in KIT_ONLY else "--" + f.name.replace("_", "-")
        rows.append({"field": flag, "value": a} | ({"fixed": b} if other is not None else {}))
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
    """The kit's names resolved as the notebooks resolve them (`--model-path embedded` -> the cached SmolLM2 directory
    for an engine that cannot read the name; the draft `demo` -> `kit.models.shipped_draft`), then the flags the
    engine installed here needs (`Engine.required_changes`, `bundle`: that release's bundle), each `log`ged."""
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
    """The same launch on this machine: local target (`Engine.localize`) and draft, loopback host, a free port,
    `tp_size` GPUs when given, and the engine's memory share for one of `servers_per_device` servers on one device
    (`Engine.share_device`); then `resolve_local`, each change `log`ged."""
    from kit.serving.process import free_port

    changes: dict[str, Any] = dict(host="127.0.0.1", port=port or free_port())
    changes.update(get_engine(engine).localize(spec, target))
    given = dict(decode_log_interval=decode_log_interval, tp_size=tp_size)
    given["speculative_draft_model_path"] = None if draft is None else str(draft)
    changes.update({k: v for k, v in given.items() if v is not None})
    return resolve_local(get_engine(engine).share_device(spec.replace(**changes), servers_per_device), engine, log)
