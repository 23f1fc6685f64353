"""kit.sglang.parser keeps a side environment's parses beside it, and only a kit side environment's; a side
environment's parser is one daemon every process shares, a user-named interpreter's a worker per process.

Stand-ins play the parser, so the tests say nothing about SGLang's parser itself (tests/test_sglang_parser.py
runs the real one): for a side environment, this interpreter over a stand-in `sglang` package (an argparse
with --model-path, --tp-size and --port, counting its parses); for a user-named interpreter, a shell script
speaking the worker's line protocol. They check that a second lint of the same line, in a fresh process, does
not start the ~10 s parser again, and that a second process's new line does not import SGLang again.
Run: python -m pytest kit/tests/sglang/test_parser_cache.py -q
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.findings import KitInputError
from kit.sglang import parser

_SERVER_ARGS = """
class ServerArgs:
    @staticmethod
    def add_cli_args(p):
        with open({calls!r}, "a") as f:
            f.write("run\\n")
        p.add_argument("--model-path")
        p.add_argument("--tp-size", type=int, default=1)
        p.add_argument("--port", type=int, default=30000)
"""


def _script(calls, answer_cmd: str) -> str:
    """The parser's line protocol: a start line in `calls.starts`, then per request line a `run` and an answer."""
    return (f"#!/bin/sh\necho start >> {calls}.starts\n"
            f"while read -r line; do echo run >> {calls}; printf 'kit-parse: '; {answer_cmd}; echo; done\n")  # fmt: skip


def _fake_env(root, name="sglang-9.9.9-abc"):
    """A user-named interpreter: a shell script answering every line with tp_size 8."""
    py = root / name / "bin" / "python"
    py.parent.mkdir(parents=True)
    calls = root / "calls"
    answer = json.dumps([{"ok": True, "unknown": [], "error": None, "args": {"tp_size": 8}}])
    py.write_text(_script(calls, f"echo '{answer}'"))
    py.chmod(0o755)
    return str(py), calls


@pytest.fixture
def side_env(tmp_path, monkeypatch):
    """A kit side environment whose interpreter is this one over a stand-in sglang; its daemon idles out in 2 s.
    Yields (python, calls): `calls` gets a line per interpreter start (`.starts`) and per parser built."""
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path / "venvs"))
    monkeypatch.setattr(parser, "DAEMON_IDLE_S", 2.0)
    monkeypatch.setattr(parser, "_CACHE", {})
    pkg = tmp_path / "fake" / "sglang" / "srt"
    pkg.mkdir(parents=True)
    calls = tmp_path / "calls"
    (pkg.parent / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "server_args.py").write_text(_SERVER_ARGS.format(calls=str(calls)))
    py = tmp_path / "venvs" / "sglang-9.9.9-abc" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(
        f'#!/bin/sh\necho start >> {calls}.starts\nPYTHONPATH={tmp_path / "fake"} exec {sys.executable} "$@"\n'
    )
    py.chmod(0o755)
    yield str(py), calls
    sock = parser._daemon_socket(str(py))
    for _ in range(100):  # the daemon idles out and removes its socket
        if not sock.exists():
            break
        time.sleep(0.05)
    assert not sock.exists()


def _lines(f: Path) -> list[str]:
    return f.read_text().splitlines() if f.exists() else []


def test_a_side_environment_parser_is_one_daemon_every_process_shares(side_env, tmp_path):
    py, calls = side_env
    assert parser.parse_argvs([["--model-path", "m", "--tp-size", "2"]], python=py)[0]["args"]["tp_size"] == 2
    # another process, another line: the same daemon answers (no second interpreter start)
    code = (
        "from kit.sglang import parser; "
        f"print(parser.parse_argvs([['--tp-size', '4']], python={py!r})[0]['args']['tp_size'])"
    )
    env = {"KIT_VENV_DIR": str(tmp_path / "venvs"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["4"]
    assert _lines(Path(f"{calls}.starts")) == ["start"] and _lines(calls) == ["run", "run"]
    bad = parser.parse_argvs([["--tp-size", "x"]], python=py)[0]  # argparse's own error comes back as the result
    assert not bad["ok"] and "invalid int value" in bad["error"]


def test_a_daemon_that_cannot_import_sglang_is_a_one_line_error(side_env):
    py, calls = side_env
    server_args = Path(py).parents[3] / "fake" / "sglang" / "srt" / "server_args.py"
    server_args.write_text("raise ImportError(\"No module named 'torch'\")\n")
    with pytest.raises(KitInputError, match=r"parser did not run \(ImportError: No module named 'torch'\)"):
        parser.parse_argvs([["--tp-size", "8"]], python=py)


def test_a_socket_left_by_a_killed_daemon_is_replaced(side_env):
    import socket

    py, calls = side_env
    sock = parser._daemon_socket(py)
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(sock))  # bound, never listening, then closed: what a killed daemon leaves
    dead.close()
    assert parser.parse_argvs([["--tp-size", "3"]], python=py)[0]["args"]["tp_size"] == 3
    assert _lines(Path(f"{calls}.starts")) == ["start"]


def test_warm_checks_a_new_build_through_the_daemon_it_leaves_up(side_env, monkeypatch):
    py, calls = side_env

    def built_now(python=None, build=None, version=None, check=None):  # a build that ends with its check
        if check is not None:
            check(py)
        return py

    monkeypatch.setattr(parser, "parser_python", built_now)
    parser.warm()
    assert parser._daemon_socket(py).exists() and _lines(calls) == ["run"]  # SGLang imported once, by the check
    assert parser.parse_argvs([["--tp-size", "5"]], python=py)[0]["args"]["tp_size"] == 5
    assert _lines(Path(f"{calls}.starts")) == ["start"]


def test_warm_does_nothing_for_a_built_environment(side_env, monkeypatch):
    py, calls = side_env
    monkeypatch.setattr(parser, "parser_python", lambda python=None, build=None, version=None, check=None: py)
    parser.warm()
    assert not parser._daemon_socket(py).exists() and not _lines(Path(f"{calls}.starts"))


def test_parses_are_kept_beside_a_kit_side_environment(side_env, monkeypatch):
    py, calls = side_env
    argv = ["--model-path", "m", "--tp-size", "8"]
    assert parser.parse_argvs([argv], python=py)[0]["args"]["tp_size"] == 8
    monkeypatch.setattr(parser, "_CACHE", {})  # a new process: only the disk remains
    assert parser.parse_argvs([argv], python=py)[0]["args"]["tp_size"] == 8
    assert _lines(calls) == ["run"]
    parser.parse_argvs([argv + ["--port", "1"]], python=py)  # another line runs the parser again
    assert len(_lines(calls)) == 2
    assert list(Path(py).parents[1].glob("kit-parse-cache/*.json"))


def test_a_user_named_interpreter_is_never_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path / "venvs"))
    py, calls = _fake_env(tmp_path / "elsewhere")
    for _ in range(2):
        monkeypatch.setattr(parser, "_CACHE", {})
        parser.parse_argvs([["--tp-size", "8"]], python=py)
    assert len(calls.read_text().splitlines()) == 2
    assert not list(tmp_path.rglob("kit-parse-cache"))


def test_lines_that_differ_only_in_their_port_parse_once_and_keep_their_own_port(side_env, monkeypatch):
    py, calls = side_env
    first = parser.parse_argvs([["--model-path", "m", "--port", "41234"]], python=py)[0]
    monkeypatch.setattr(parser, "_CACHE", {})
    second = parser.parse_argvs([["--model-path", "m", "--port", "41999"]], python=py)[0]
    assert _lines(calls) == ["run"]
    assert (first["args"]["port"], second["args"]["port"]) == (41234, 41999)
    bad = parser.parse_argvs([["--model-path", "m", "--port", "x1"]], python=py)[0]  # not a number: parsed as given
    assert len(_lines(calls)) == 2 and not bad["ok"]


def test_one_parser_process_answers_every_call(tmp_path, monkeypatch):
    """Importing SGLang costs ~9 s: the lint of a line and the lint of its fix share one parser process."""
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path / "venvs"))
    py, calls = _fake_env(tmp_path / "elsewhere")
    for tp in ("2", "4", "8"):
        parser.parse_argvs([["--tp-size", tp]], python=py)
    assert len(calls.read_text().splitlines()) == 3
    assert Path(f"{calls}.starts").read_text().splitlines() == ["start"]


def test_a_parser_that_dies_is_one_line_error_and_is_started_again(tmp_path, monkeypatch):
    import pytest

    from kit.findings import KitInputError

    py = tmp_path / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text("#!/bin/sh\necho 'ModuleNotFoundError: No module named sglang' >&2\nexit 1\n")
    py.chmod(0o755)
    for _ in range(2):
        with pytest.raises(KitInputError, match="parser did not run .ModuleNotFoundError"):
            parser.parse_argvs([["--tp-size", "8"]], python=str(py))
