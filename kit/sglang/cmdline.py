"""Split a shell command line into (environment assignments, argv).

The seed's launch line is `NCCL_PROTO=LL ... SGLANG_X=1 /venv/bin/python3 -m sglang.launch_server ...`;
both the NCCL rules and the launch linter need its env and argv apart. Handles `env` and
`export`-free prefixes, backslash-newline continuations and quoting (shlex, POSIX rules).
"""

from __future__ import annotations

import re
import shlex

from kit.findings import KitInputError

_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def split_command(command: str, source: str = "launch command") -> tuple[dict[str, str], list[str]]:
    text = command.replace("\\\r\n", " ").replace("\\\n", " ").strip()
    try:
        words = shlex.split(text, comments=True)
    except ValueError as e:
        raise KitInputError(f"{source}: cannot parse shell words ({e})")
    env: dict[str, str] = {}
    i = 0
    if words[:1] == ["env"]:
        i = 1
    while i < len(words) and _ASSIGN.match(words[i]):
        k, v = words[i].split("=", 1)
        env[k] = v
        i += 1
    return env, words[i:]


def join_command(env: dict[str, str], argv: list[str]) -> str:
    parts = [f"{k}={shlex.quote(v)}" for k, v in env.items()] + [shlex.quote(a) for a in argv]
    return " ".join(parts)


def flag_value(argv: list[str], name: str) -> str | None:
    """Value of the first `--name V` or `--name=V` in argv, or None."""
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None
