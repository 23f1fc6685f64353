"""CLI dispatch and exit codes. Run: python -m pytest kit/tests/test_cli.py"""

import json
import subprocess
import sys

from kit.cli import main


def test_unknown_verb_exits_2(capsys):
    assert main(["no-such-verb"]) == 2
    assert "unknown verb" in capsys.readouterr().err


def test_doctor_bad_config_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert main(["doctor", "--target", str(bad), "--no-probe-env"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and "invalid JSON" in err


def test_doctor_json_last_line_in_subprocess(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kit", "doctor", "--json"], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert "findings" in doc and "summary" in doc
