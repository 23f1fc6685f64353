"""bench/serve_table.py's command line: two table runs compared as markdown; a file that is no run, a missing
--url and an unbounded abandon time refused with one line naming the flag (exit 2), nothing written.

    python -m pytest tests/test_serve_table.py -q
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from serve_table import main  # noqa: E402

ROW = {"name": "generate.text.empty", "status": 400, "message": "text: empty prompt", "dropped": False}


def run_file(tmp_path: Path, name: str, **change) -> str:
    p = tmp_path / name
    p.write_text(json.dumps({"rows": [{**ROW, "timed_out": False, **change}]}))
    return str(p)


def test_compare_prints_the_rows_that_differ(tmp_path, capsys):
    a = run_file(tmp_path, "a.json")
    b = run_file(tmp_path, "b.json", status=200, message=None, stream_error="Empty prompt")
    wrapped = tmp_path / "sglang_table.json"  # bench/serve_table_sglang.py's file: the run under "table"
    wrapped.write_text(json.dumps({"error": None, "table": json.loads(Path(b).read_text())}))
    b = str(wrapped)
    out = tmp_path / "diff.md"
    assert main(["--compare", a, b, "--names", "kit", "sglang", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert text == out.read_text()
    assert "| row | kit | sglang |" in text
    assert "| generate.text.empty | 400 | 200 (stream error) | text: empty prompt | Empty prompt |" in text


def test_bad_input_is_one_line_exit_2(tmp_path, capsys):
    not_a_run = tmp_path / "x.json"
    not_a_run.write_text("[1]")
    a = run_file(tmp_path, "a.json")
    out = tmp_path / "never.md"
    cases = [
        (["--compare", str(not_a_run), a, "--out", str(out)], "--compare"),
        (["--compare", str(tmp_path / "missing.json"), a], "--compare"),
        ([], "--url"),
        (["--url", "http://127.0.0.1:9", "--abandon-after-s", "9"], "--abandon-after-s"),
        (["--url", "http://127.0.0.1:9", "--context-len", "10"], "--context-length"),
    ]
    for argv, flag in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {flag}") and "\n" not in err, err
    assert not out.exists()
