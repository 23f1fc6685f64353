"""The CLI: top-level and per-verb help, one error style across every verb, closed pipes, exit codes.

Run: python -m pytest kit/tests/test_cli.py
"""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit.cli import VERBS, main, top_help, verb_help

SEED_LAUNCH = Path(__file__).parent / "data" / "seed_launch.sh"
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _kit(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, **kw)


# -- help ------------------------------------------------------------------------------------------
def test_top_help_has_one_line_per_verb_without_importing_them():
    text = top_help()
    for verb, (mod, _) in VERBS.items():
        line = next(x for x in text.splitlines() if x.strip().startswith(verb + " "))
        assert verb_help(mod) and verb_help(mod) in line
    code = (
        "import sys; from kit.cli import top_help; top_help(); "
        "print(sorted(m for m in sys.modules if m.startswith('kit.') and m.count('.') > 1))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # HELP lines are read from source, no verb module imported


def test_help_line_read_from_source_equals_the_module_constant():
    for mod in ("kit.doctor", "kit.checkpoint.inspect"):
        assert verb_help(mod) == importlib.import_module(mod).HELP


@pytest.mark.parametrize("verb", list(VERBS))
def test_every_verb_help_shows_usage_defaults_and_an_example(verb, capsys):
    assert main([verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: kit {verb}")
    assert "example:\n  kit " + verb in out
    if verb not in ("bundle",):  # bundle's flags live under its build/install sub-verbs
        assert "(default: " in out


def test_bench_help_shows_real_defaults(capsys):
    main(["bench", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--concurrency CONCURRENCY requests in flight at once (default: 4)" in out
    assert "--resume RESUME" in out


def test_serve_refuses_flags_the_reference_server_ignores(capsys):
    main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "--context-length" in out
    for flag in ("--tp-size", "--mem-fraction-static", "--attention-backend", "--page-size"):
        assert flag not in out
    assert main(["serve", "--tp-size", "2"]) == 2
    err = capsys.readouterr().err
    assert "usage: kit serve" in err
    assert "kit serve: error: --tp-size: the CPU reference server does not implement this SGLang flag" in err


def test_launch_help_marks_sglang_only_flags_and_says_how_hub_ids_are_checked(capsys):
    main(["launch", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--tp-size TP_SIZE tensor parallel size [SGLang only: dropped with --engine reference]" in out
    assert "checked from the local cache, else from its config.json and safetensors headers" in out
    assert "--speculative-draft-model-revision" in out


def test_bad_flag_prints_the_verbs_usage_and_a_close_match(capsys):
    assert main(["doctor", "--targte", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kit doctor")
    assert "kit doctor: error: unrecognized arguments: --targte x (did you mean: --targte -> --target?)" in err
    assert "python -m kit [-h]" not in err


def test_unknown_verb_exits_2(capsys):
    assert main(["docter"]) == 2
    err = capsys.readouterr().err
    assert "unknown verb 'docter' (did you mean 'doctor'?)" in err


# -- one error style -------------------------------------------------------------------------------
# a user error for every verb: one line on stderr, `kit VERB: error: ...` naming the flag or file,
# exit 2, nothing on stdout, and no torch/transformers imported on the way (no slow work first)
BAD_INPUT = {
    "env": (["--facts", "/nonexistent/facts.json"], "/nonexistent/facts.json"),
    "doctor": (["--target", "/nonexistent/model"], "--target /nonexistent/model"),
    "inspect": (["/nonexistent/draft"], "/nonexistent/draft"),
    "convert": (["/nonexistent/draft", "/nonexistent/out", "--to", "sglang"], "/nonexistent/draft"),
    "probe": (["--target", "/nonexistent/model"], "/nonexistent/model"),
    "oracle": (["--draft", "/nonexistent/draft"], "/nonexistent/draft"),
    "train-draft": (["--target", "/nonexistent/model"], "/nonexistent/model"),
    "launch": (["--from", "vllm bench serve --model m", "--dry-run"], "vllm bench"),  # a client, not a server
    "serve": (["--speculative-draft-model-path", "/nonexistent/draft"], "--speculative-draft-model-path"),
    "bench": (["--url", "http://127.0.0.1:9", "--no-progress"], "--url http://127.0.0.1:9"),
    "sweep": (["--prompts", "builtin"], "--launch"),
    "tune": (["--launch", "python -m sglang.launch_server --model-path m", "--batch-size", "0"], "--batch-size"),
    "bundle": (["install", "/nonexistent/b.tar.xz"], "/nonexistent/b.tar.xz"),
    "demo": (["--draft", "/nonexistent/draft"], "/nonexistent/draft"),
    "expect": (["--log", "/nonexistent/train.log"], "/nonexistent/train.log"),
    "rehearse": (
        ["--target", "/nonexistent/model", "--draft", "/nonexistent/draft", "--launch-file", "l.sh", "--dry-run"],
        "l.sh",  # the launch is read first: it may name the models
    ),
}


def test_every_verb_has_a_bad_input_case():
    assert set(BAD_INPUT) == set(VERBS)


# kit.reference.oracle imports torch with its module (kit.reference.speculate); for it, "no slow work"
# is checked as "no model library (transformers) imported"
TORCH_AT_IMPORT = {"oracle"}

_RUN_ONE = """
import contextlib, io, json, sys
from kit.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    rc = main(json.loads(sys.argv[1]))
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
print(json.dumps({"rc": rc, "out": out.getvalue(), "err": err.getvalue(), "heavy": heavy}))
"""


@pytest.mark.parametrize("verb", list(BAD_INPUT))
def test_user_error_is_one_line_exit_2_before_slow_work(verb, tmp_path):
    args, names = BAD_INPUT[verb]
    r = subprocess.run(
        [sys.executable, "-c", _RUN_ONE, json.dumps([verb, *args])],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    lines = got["err"].strip().splitlines()
    assert got["rc"] == 2, got
    assert len(lines) == 1 and lines[0].startswith(f"kit {verb}: error: ") and names in lines[0], got
    assert got["out"] == "", got
    assert got["heavy"] == (["torch"] if verb in TORCH_AT_IMPORT else []), got
    assert not any(tmp_path.iterdir())  # no partial output left behind


def test_hub_id_is_explained_not_called_missing(capsys, tmp_path, monkeypatch):
    """Offline (the suite's HF_HUB_OFFLINE=1) and not in an empty cache: one line saying so and what to do
    (kit/tests/checkpoint/test_hub.py resolves ids from a cache and over HTTP)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    assert main(["doctor", "--target", "meta-llama/Llama-3.1-8B-Instruct"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert "--target meta-llama/Llama-3.1-8B-Instruct: not in the Hugging Face cache" in err
    assert "HF_HUB_OFFLINE is set" in err and "hf download meta-llama/Llama-3.1-8B-Instruct" in err


def test_doctor_bad_config_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    assert main(["doctor", "--target", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and "invalid JSON" in err


def test_doctor_with_nothing_to_check_is_exit_2(capsys):
    assert main(["doctor"]) == 2
    assert "kit doctor: error: nothing to check" in capsys.readouterr().err


def test_unknown_sglang_version_warns_which_rules_were_used(capsys):
    from kit.sglang.versions import listed

    draft = EXAMPLES / "kimi_k25_eagle3_config.json"
    rc = main(["doctor", "--draft", str(draft), "--sglang-version", "9.9", "--json"])
    err = capsys.readouterr().err
    assert rc in (0, 1)
    assert f"kit doctor: warning: SGLang 9.9 is newer than the releases the kit has read (up to {listed()[-1]})" in err
    assert "python -m kit.sglang.releases --derive 9.9" in err and err.count("warning") == 1
    main(["doctor", "--draft", str(draft), "--sglang-version", "0.4.1", "--json"])  # before the list
    assert "SGLang 0.4.1 is not in the kit's recorded releases; using the rules of 0.4.4" in capsys.readouterr().err
    assert main(["doctor", "--draft", str(draft), "--sglang-version", "banana"]) == 2
    assert "--sglang-version 'banana': not a version" in capsys.readouterr().err


# -- doctor output -----------------------------------------------------------------------------------
def test_doctor_folds_info_wraps_and_does_not_probe_by_default():
    code = (
        "import sys; from kit.cli import main; "
        f"rc = main(['doctor', '--launch-file', {str(SEED_LAUNCH)!r}]); "
        "print('TORCH', 'torch' in sys.modules); sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(COLUMNS="80"))
    assert r.returncode in (0, 1), r.stderr
    lines = r.stdout.splitlines()
    assert lines[-1] == "TORCH False"  # the machine is probed only with --probe-env
    assert all(len(x) <= 80 for x in lines), [x for x in lines if len(x) > 80]
    assert not any(x.startswith("info ") for x in lines)
    assert any(x.startswith("+ ") and "info finding" in x and "--verbose shows them" in x for x in lines)


def test_doctor_fixes_use_the_users_paths(tmp_path, capsys):
    draft = tmp_path / "my draft"
    draft.mkdir()
    cfg = json.loads((EXAMPLES / "kimi_k25_eagle3_config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]  # not an EAGLE-3 class: the fix is a convert command
    (draft / "config.json").write_text(json.dumps(cfg))
    main(["doctor", "--draft", str(draft), "--json"])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    fixes = [f["fix"] for f in doc["findings"] if "convert" in f["fix"]]
    assert fixes and all(f"'{draft}' '{draft}-sglang'" in f for f in fixes), fixes
    assert not any(" SRC " in f or " DST " in f for f in fixes)


def test_closed_pipe_ends_quietly():
    # the reader leaves before reading: every write of the verb hits a closed pipe
    configs = f"--target {EXAMPLES / 'kimi_k25_config.json'} --draft {EXAMPLES / 'kimi_k25_eagle3_config.json'}"
    for args in ("serve --help", f"doctor {configs} --verbose"):
        cmd = f"{sys.executable} -m kit {args} | true"
        for _ in range(3):
            r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
            assert "BrokenPipeError" not in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_console_script_is_declared():
    import tomllib

    doc = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert doc["project"]["scripts"]["kit"] == "kit.cli:entry"


def test_doctor_json_last_line_in_subprocess():
    r = _kit("doctor", "--target", str(EXAMPLES / "kimi_k25_config.json"), "--json")
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert "findings" in doc and "summary" in doc


def _env(**kw):
    import os

    return {**os.environ, **kw}
