"""Parse launch argv with SGLang's REAL argument parser (`ServerArgs.add_cli_args`).

The kit's own flag table can only be a guess at what SGLang accepts; SGLang's parser is the
truth, and it imports on a CPU. Where it runs:

1. in this interpreter, when `sglang` is importable (a GPU host with SGLang installed);
2. else the interpreter named by `python=` / $KIT_SGLANG_PYTHON;
3. else the kit's side venv `sglang-0.5.23` (`kit.venvs.ensure_venv`, built on first use unless
   $KIT_NO_VENV_BUILD=1).

Several argvs are parsed in one call (importing SGLang takes ~8 s). Each result is
{"ok": bool, "unknown": [...], "error": str|None, "args": {dest: value}|None}.

    from kit.sglang.parser import parse_argvs
    [res] = parse_argvs([["--model-path", "m", "--tp-size", "8"]])

Run `python -m kit.sglang.parser --model-path m --tp 8` to see one result.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from kit.findings import KitInputError

VENV = "sglang-0.5.23"

# Runs inside the interpreter that has sglang; reads a JSON list of argvs on stdin and prints a
# JSON list of results as its last stdout line. Built exactly like `prepare_server_args` (prog,
# abbreviations allowed), except that errors raise instead of exiting.
_WORKER = r"""
import argparse, json, sys
from sglang.srt.server_args import ServerArgs

class _ParseError(Exception):
    pass

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _ParseError(message)

def parse_many(argvs):
    parser = _Parser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    out = []
    for argv in argvs:
        try:
            ns, unknown = parser.parse_known_args(argv)
            out.append({"ok": not unknown, "unknown": unknown, "error": None, "args": vars(ns)})
        except _ParseError as e:
            out.append({"ok": False, "unknown": [], "error": str(e), "args": None})
    return out

if __name__ == "__main__":
    res = parse_many(json.loads(sys.stdin.read()))
    sys.stdout.write("\n" + json.dumps(res, default=str) + "\n")
"""


def _in_process_available() -> bool:
    try:
        return importlib.util.find_spec("sglang") is not None
    except (ImportError, ValueError):
        return False


def parser_python(python: str | None = None, build: bool | None = None) -> str | None:
    """Interpreter to run the parser in; None means in-process. Raises KitInputError if none."""
    if python:
        return python
    if _in_process_available():
        return None
    if os.environ.get("KIT_SGLANG_PYTHON"):
        return os.environ["KIT_SGLANG_PYTHON"]
    from kit.venvs import ensure_venv, venv_root

    if build is None:
        build = os.environ.get("KIT_NO_VENV_BUILD") != "1"
    if not build and not (venv_root() / VENV / ".kit-complete").exists():
        raise KitInputError(f"SGLang's parser is unavailable: no sglang here and side venv {VENV} not built")
    return str(ensure_venv(VENV))


_CACHE: dict[tuple, dict] = {}  # (interpreter, argv) -> result: a notebook lints the same line twice


def parse_argvs(
    argvs: list[list[str]], python: str | None = None, build: bool | None = None, timeout: float = 300
) -> list[dict]:
    """SGLang's parse of each argv (flags only, without `python -m sglang.launch_server`)."""
    py = parser_python(python, build)
    todo = [a for a in argvs if (py, tuple(a)) not in _CACHE]
    if todo:
        for a, res in zip(todo, _parse(todo, py, timeout)):
            _CACHE[(py, tuple(a))] = res
    return [_CACHE[(py, tuple(a))] for a in argvs]


def _parse(argvs: list[list[str]], py: str | None, timeout: float) -> list[dict]:
    if py is None:
        ns: dict = {}
        exec(compile(_WORKER.replace('if __name__ == "__main__":', "if False:"), "sglang_parser_worker", "exec"), ns)
        return json.loads(json.dumps(ns["parse_many"](argvs), default=str))
    if not Path(py).exists() and "/" in py:
        raise KitInputError(f"{py}: no such interpreter for SGLang's parser")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.setdefault("HF_HUB_OFFLINE", "1")
    try:
        r = subprocess.run(
            [py, "-c", _WORKER],
            input=json.dumps(argvs),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise KitInputError(f"{py}: cannot run SGLang's parser ({e})")
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise KitInputError(f"{py}: SGLang's parser did not run ({tail})")
    return json.loads(r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in parse_argvs([sys.argv[1:]])[0].items() if k != "args"}))
