"""kit.sglang.parser keeps a side environment's parses beside it, and only a kit side environment's.

A stand-in interpreter (a shell script, no SGLang) plays the side environment, so the test says
nothing about SGLang's parser itself (tests/test_sglang_parser.py runs the real one); it checks that
a second lint of the same line, in a fresh process, does not start the ~10 s parser again.
Run: python -m pytest kit/tests/sglang/test_parser_cache.py -q
"""

import json
from pathlib import Path

from kit.sglang import parser


def _script(calls, answer_cmd: str) -> str:
    """The parser's line protocol: a start line in `calls.starts`, then per request line a `run` and an answer."""
    return (f"#!/bin/sh\necho start >> {calls}.starts\n"
            f"while read -r line; do echo run >> {calls}; printf 'kit-parse: '; {answer_cmd}; echo; done\n")  # fmt: skip


def _fake_env(root, name="sglang-9.9.9-abc"):
    py = root / name / "bin" / "python"
    py.parent.mkdir(parents=True)
    calls = root / "calls"
    answer = json.dumps([{"ok": True, "unknown": [], "error": None, "args": {"tp_size": 8}}])
    py.write_text(_script(calls, f"echo '{answer}'"))
    py.chmod(0o755)
    return str(py), calls


def test_parses_are_kept_beside_a_kit_side_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path))
    py, calls = _fake_env(tmp_path)
    argv = ["--model-path", "m", "--tp-size", "8"]
    monkeypatch.setattr(parser, "_CACHE", {})
    assert parser.parse_argvs([argv], python=py)[0]["args"] == {"tp_size": 8}
    monkeypatch.setattr(parser, "_CACHE", {})  # a new process: only the disk remains
    assert parser.parse_argvs([argv], python=py)[0]["args"] == {"tp_size": 8}
    assert calls.read_text().splitlines() == ["run"]
    parser.parse_argvs([argv + ["--port", "1"]], python=py)  # another line runs the parser again
    assert len(calls.read_text().splitlines()) == 2


def test_a_user_named_interpreter_is_never_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path / "venvs"))
    py, calls = _fake_env(tmp_path / "elsewhere")
    for _ in range(2):
        monkeypatch.setattr(parser, "_CACHE", {})
        parser.parse_argvs([["--tp-size", "8"]], python=py)
    assert len(calls.read_text().splitlines()) == 2
    assert not list(tmp_path.rglob("kit-parse-cache"))


def test_lines_that_differ_only_in_their_port_parse_once_and_keep_their_own_port(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path))
    py, calls = _fake_env(tmp_path)
    answer = [{"ok": True, "unknown": [], "error": None, "args": {"port": 30000, "tp_size": 1}}]
    (tmp_path / "answer").write_text(json.dumps(answer))
    Path(py).write_text(_script(calls, f"cat {tmp_path / 'answer'}"))
    monkeypatch.setattr(parser, "_CACHE", {})
    first = parser.parse_argvs([["--model-path", "m", "--port", "41234"]], python=py)[0]
    monkeypatch.setattr(parser, "_CACHE", {})
    second = parser.parse_argvs([["--model-path", "m", "--port", "41999"]], python=py)[0]
    assert calls.read_text().splitlines() == ["run"]
    assert (first["args"]["port"], second["args"]["port"]) == (41234, 41999)
    parser.parse_argvs([["--model-path", "m", "--port", "x1"]], python=py)  # not a port number: parsed as given
    assert len(calls.read_text().splitlines()) == 2


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
