"""A vLLM launch line -> its speculative setup, and the same deployment in SGLang's argument names.

`vllm serve TARGET ...` and `python -m vllm.entrypoints.openai.api_server --model TARGET ...` are found in shell text
by `kit.sglang.cmdline.find_launch` (wrappers, env, quoting: one shell reader) with `launch_test` as its predicate;
`read_argv` reads the flags as vLLM's parser spells them (`_` or `-`, `--flag=value`), the JSON of
`--speculative-config` (or its `--speculative-config.KEY VALUE` form) and the older `--speculative-model` /
`--num-speculative-tokens` flags; `VllmLaunch.spec_fields()` is the `kit.serving.launch.LaunchSpec` the SGLang line
of the same deployment has: target, draft, EAGLE or EAGLE3, steps = num_speculative_tokens, topk 1, tensor parallel.
`vllm serve DRAFT` with no speculative flags, DRAFT a speculators-format draft readable here (a folder, or the Hugging
Face cache: no network), is read as vLLM reads it: its verifier is the target (`VllmLaunch.auto`).

    found = find_launch(text, launch_test)      # kit.sglang.cmdline.ShellLaunch
    v = read_argv(found.argv)                   # VllmLaunch: method, draft, tokens, tp, draft_tp, legacy, problem
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.hf import hub_cache
from kit.sglang.flags import PYTHON_PROG, FlagResolution, resolve_flags
from kit.vllm.rules import VllmRules, rules_for

API_SERVER = "vllm.entrypoints.openai.api_server"
# the older speculative flags, each as the --speculative-config key it became
LEGACY = {
    "--speculative-model": "model",
    "--num-speculative-tokens": "num_speculative_tokens",
    "--speculative-draft-tensor-parallel-size": "draft_tensor_parallel_size",
    "--speculative-model-quantization": "quantization",
    "--speculative-max-model-len": "max_model_len",
    "--speculative-disable-by-batch-size": "disable_by_batch_size",
    "--speculative-draft-model-revision": "revision",
}
# LaunchSpec field (SGLang's argument name) -> the vLLM flag of the same meaning: read here, written by the vllm
# engine (kit.serving.engines.vllm); `-tp` is vLLM's short form
FLAGS = {
    "tp_size": "--tensor-parallel-size",
    "context_length": "--max-model-len",
    "mem_fraction_static": "--gpu-memory-utilization",
    "max_running_requests": "--max-num-seqs",
    "page_size": "--block-size",
    "host": "--host",
    "port": "--port",
    "api_key": "--api-key",
    "served_model_name": "--served-model-name",
    "revision": "--revision",
    "trust_remote_code": "--trust-remote-code",
}
AS_SGLANG = {**{flag: name for name, flag in FLAGS.items()}, "-tp": "tp_size"}
PASSED_AS_IS = ("--dtype", "--quantization", "--kv-cache-dtype")  # the same flag and values in SGLang
ALGORITHM = {"eagle3": "EAGLE3", "eagle": "EAGLE"}  # vLLM method -> SGLang's --speculative-algorithm


def launch_test(argv: list[str]) -> tuple[str, int] | None:
    """(entry point, index of the first flag) when argv starts vLLM's OpenAI server, else None."""
    prog = os.path.basename(argv[0]) if argv else ""
    if prog == "vllm" and argv[1:2] == ["serve"]:
        return "vllm serve", 2
    if PYTHON_PROG.match(prog) and argv[1:3] == ["-m", API_SERVER]:
        return f"python -m {API_SERVER}", 3
    return None


@dataclass
class VllmLaunch:
    """What a vLLM launch line says: the target, `--speculative-config` as given (`spec`: legacy flags folded in),
    the other flags by name, the legacy flags used, and what could not be read (`problem`: one line)."""

    entry: str
    target: str | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    flags: dict[str, Any] = field(default_factory=dict)
    legacy: list[str] = field(default_factory=list)
    problem: str | None = None
    python: str = "python3"
    auto: bool = False  # the speculative setup came from the model's speculators config (`vllm serve DRAFT`)
    args: list[str] = field(default_factory=list)  # the flags as vLLM's argparse receives them (`read_argv`)

    @property
    def method(self) -> str | None:
        return self.spec.get("method")

    @property
    def draft(self) -> str | None:
        return self.spec.get("model")

    @property
    def tp(self) -> int:
        return int(self.flags.get("--tensor-parallel-size") or self.flags.get("-tp") or 1)

    @property
    def draft_tp(self) -> int | None:
        v = self.spec.get("draft_tensor_parallel_size")
        return None if v is None else int(v)

    def spec_fields(self) -> dict[str, Any]:
        """The LaunchSpec fields (SGLang's names) of the same deployment; `extra_args`: the flags SGLang spells alike."""
        out: dict[str, Any] = {"model_path": self.target or "", "python": self.python}
        for flag, name in AS_SGLANG.items():
            if self.flags.get(flag) is not None:
                out[name] = True if name == "trust_remote_code" else self.flags[flag]
        alg = ALGORITHM.get(str(self.method).lower())
        n = self.spec.get("num_speculative_tokens")
        if alg:
            out["speculative_algorithm"] = alg
            out |= {"speculative_draft_model_path": self.draft, "speculative_eagle_topk": 1}
            out["speculative_draft_model_revision"] = self.spec.get("revision")
            if isinstance(n, int):
                out |= {"speculative_num_steps": n, "speculative_num_draft_tokens": n + 1}
        for k in ("tp_size", "context_length", "max_running_requests", "page_size", "port"):
            if isinstance(out.get(k), str) and out[k].isdigit():
                out[k] = int(out[k])
        if isinstance(out.get("mem_fraction_static"), str):
            try:
                out["mem_fraction_static"] = float(out["mem_fraction_static"])
            except ValueError:
                del out["mem_fraction_static"]
        out["extra_args"] = [t for f in PASSED_AS_IS if self.flags.get(f) for t in (f, self.flags[f])]
        return out


def _json(text: str) -> tuple[dict[str, Any], str | None]:
    """--speculative-config's value: (the dict, None) or ({}, the problem in one line)."""
    try:
        v = json.loads(text)
    except json.JSONDecodeError as e:
        return {}, f"--speculative-config is not JSON ({e.msg} at column {e.colno}): {text[:80]!r}"
    if not isinstance(v, dict):
        return {}, f"--speculative-config is {type(v).__name__} JSON, not an object: {text[:80]!r}"
    return v, None


def _scalar(v: str) -> Any:
    """A `--speculative-config.KEY VALUE` value as vLLM reads it: JSON when it parses, else the string."""
    try:
        return json.loads(v)
    except json.JSONDecodeError:
        return v


def read_argv(argv: list[str], rules: VllmRules | None = None) -> VllmLaunch:
    """A vLLM server argv (its entry point first: `launch_test`) -> VllmLaunch; the flags that take no value are
    those of the release's recorded parser (`rules`, default: the installed vLLM's release, else the newest)."""
    parser = (rules or rules_for()).parser_flags or ()
    switches = {o for a in parser if a["nargs"] == 0 for o in a["option_strings"]}
    entry, i = launch_test(argv) or ("", 0)
    v = VllmLaunch(entry, python=argv[0] if entry.startswith("python") else "python3")
    legacy: dict[str, Any] = {}
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            v.target = v.target or a  # `vllm serve MODEL`
            i += 1
            continue
        name, eq, value = a.partition("=")
        name = name[:2] + name[2:].replace("_", "-") if name.startswith("--") else name
        takes = not eq and name not in switches and i + 1 < len(argv) and not argv[i + 1].startswith("-")
        if "." in name:  # FlexibleArgumentParser folds `--json-arg.key VALUE` into `--json-arg JSON` first
            v.args += [name.split(".", 1)[0], "{}"]
        else:
            v.args += [name + eq + value] if eq else [name, *argv[i + 1 : i + 1 + takes]]
        value = value if eq else (argv[i + 1] if takes else True)
        i += 1 + takes
        if name == "--speculative-config":
            conf, v.problem = _json(str(value))
            v.spec.update(conf)
        elif name.startswith("--speculative-config."):
            v.spec[name.split(".", 1)[1].replace("-", "_")] = _scalar(str(value))
        elif name in LEGACY:
            v.legacy.append(name)
            legacy[LEGACY[name]] = _scalar(str(value))
        elif name == "--model":
            v.target = str(value)
        else:
            v.flags[name] = value
    v.spec = {**legacy, **v.spec}  # the config wins where both name a key
    if not v.spec and v.target and (sc := speculators_config(v.target, v.flags.get("--revision"))):
        n = (sc.get("proposal_methods") or [{}])[0].get("speculative_tokens")
        v.spec = {"method": sc.get("algorithm"), "model": v.target, "num_speculative_tokens": n}
        v.target, v.auto = (sc.get("verifier") or {}).get("name_or_path"), True
    if isinstance(v.spec.get("num_speculative_tokens"), str) and v.spec["num_speculative_tokens"].isdigit():
        v.spec["num_speculative_tokens"] = int(v.spec["num_speculative_tokens"])
    return v


def resolve(v: VllmLaunch, rules: VllmRules) -> FlagResolution | None:
    """The line's flags read with argparse's own rules (`kit.sglang.flags.resolve_flags`) over the release's recorded
    `vllm serve` parser (`rules.flag_table`, in the form of SGLang's flag tables); None where none is recorded."""
    return None if rules.flag_table is None else resolve_flags(v.args, table=rules.flag_table)


def speculators_config(model: str, revision: str | None = None) -> dict[str, Any] | None:
    """`speculators_config` of `model`'s config.json where it is readable without the network (a local folder, the
    Hugging Face cache); None for any other model."""
    folder = Path(model).expanduser()
    if not folder.is_dir():
        from huggingface_hub import try_to_load_from_cache

        with contextlib.suppress(Exception):  # not a repo id, no cache: nothing to read here
            hit = try_to_load_from_cache(model, "config.json", cache_dir=hub_cache(), revision=revision or "main")
            folder = Path(hit).parent if isinstance(hit, str) else folder
    with contextlib.suppress(OSError, ValueError):
        cfg = json.loads((folder / "config.json").read_text())
        return cfg.get("speculators_config") if isinstance(cfg, dict) else None
    return None
