"""SGLang's REAL parser, per release: the kit's recorded flag table, its resolution and its launch lines agree with it.

Builds (once, cached) the side environments `sglang-0.5.17` and `sglang-0.5.23` (kit.venvs: sglang
`--no-deps` over this interpreter's packages) and runs `ServerArgs.add_cli_args` there. A build
failure fails these tests (it is exactly what would leave users without the real parser); set
KIT_NO_VENV_BUILD=1 to skip them on a machine without a package index.
Run: python -m pytest tests/test_sglang_parser.py -q
"""

import os
from pathlib import Path

import pytest

from kit.derive.flag_scan import derive
from kit.serving.checks import lint
from kit.serving.launch import FIELDS, LaunchSpec, spec_from_command
from kit.sglang.flags import resolve_flags, table_for
from kit.sglang.parser import parse_argvs

pytestmark = pytest.mark.interop
SEED = (Path(__file__).resolve().parents[1] / "kit" / "tests" / "data" / "seed_launch.sh").read_text()
RELEASES = ["0.5.17", "0.5.23"]


@pytest.fixture(scope="module", params=RELEASES)
def release(request):
    from kit.sglang.parser import side_python

    if os.environ.get("KIT_NO_VENV_BUILD") == "1":
        pytest.skip("KIT_NO_VENV_BUILD=1")
    return request.param, side_python(request.param)


def test_recorded_table_is_what_the_real_parser_builds(release):
    version, py = release
    recorded = table_for(version)
    assert recorded.exact
    derived = derive(version, python=py)
    assert derived["entry"] == recorded.entry
    rec = {a["dest"]: a for a in recorded.actions}
    assert {a["dest"]: a for a in derived["actions"]} == rec


# argvs whose reading depends on argparse's rules: prefixes, `=`, repeats, aliases, types, choices
CASES = [
    ["--model-path", "m", "--speculative-algo", "EAGLE", "--speculative-num-steps", "3"],
    ["--model", "m", "--tp=8", "--port", "1", "--port", "2", "--trust-remote"],
    ["--model-path", "m", "--speculative-num-steps", "abc"],
    ["--model-path", "m", "--speculative-algorithm", "EAGLE4"],
    ["--model-path", "m", "--mem-fraction-static", "0.x"],
    ["--model-path", "m", "--speculative", "EAGLE"],
    ["--model-path", "m", "--speculative-num-stepz", "3"],
    ["--model-path", "m", "--trust-remote-code=1"],
    ["--model-path", "m", "--log-level", "debug", "--speculative-eagle-topk", "-1"],
]


def test_table_resolution_agrees_with_the_real_parser(release):
    version, py = release
    for argv, real in zip(CASES, parse_argvs(CASES, python=py, version=version)):
        mine = resolve_flags(argv, version)
        assert real["unknown"] == mine.unknown, argv
        assert real["error"] == (mine.errors[0]["message"] if mine.errors else None), argv
        if real["args"] is not None:
            for dest, value in mine.values.items():
                assert real["args"][dest] == value, (argv, dest)


def generated_specs():
    seed = spec_from_command(SEED)
    full = LaunchSpec(
        model_path="/m",
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="/d",
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        tp_size=2,
        mem_fraction_static=0.8,
        host="127.0.0.1",
        port=30001,
        api_key="k",
        served_model_name="x",
        trust_remote_code=True,
        attention_backend="flashinfer",
        speculative_draft_attention_backend="triton",
        page_size=1,
        max_running_requests=8,
        decode_log_interval=10,
        enable_metrics=True,
        log_level="info",
    )
    return {
        "seed": seed,
        "seed_fixed": seed.replace(speculative_algorithm="EAGLE3", host="127.0.0.1"),
        "full": full,
        "default": LaunchSpec(),
    }


def test_every_generated_command_parses_with_sglang(release):
    version, py = release
    specs = generated_specs()
    argvs = [s.flags() for s in specs.values()]
    argvs += [s.argv("reference")[4:] for s in specs.values()]  # `kit serve` takes SGLang's flags too
    results = parse_argvs(argvs, python=py, version=version)
    for argv, res in zip(argvs, results):
        assert res["ok"] and res["error"] is None, (argv, res["unknown"], res["error"])
    for (name, spec), res in zip(specs.items(), results):
        for f in FIELDS:  # SGLang reads every typed field exactly as the kit meant it
            v = getattr(spec, f)
            if v not in (None, False):
                assert res["args"][f] == v, (name, f, res["args"][f], v)
    seed = results[0]["args"]
    assert (seed["speculative_algorithm"], seed["tp_size"], seed["disable_custom_all_reduce"]) == ("EAGLE", 8, True)
    assert seed["num_continuous_decode_steps"] == 4


def test_kit_fields_are_sglang_flags(release):
    version, py = release
    [res] = parse_argvs([["--model-path", "m"]], python=py, version=version)
    assert set(FIELDS) <= set(res["args"]), set(FIELDS) - set(res["args"])


def test_bad_flags_become_launch_flag(release):
    version, py = release
    bad = spec_from_command("python -m sglang.launch_server --model-path m --speculative-num-stepz 3 --tp-size x")
    flags = lint(bad, sglang_python=py, sglang_version=version).by_code("launch.flag")
    assert flags and all(f.severity == "error" for f in flags)
    assert any("--speculative-num-stepz" in f.title for f in flags)
    steps = spec_from_command("python -m sglang.launch_server --model-path m --speculative-num-steps abc")
    assert steps.extra_args == ["--speculative-num-steps", "abc"]
    errs = lint(steps, sglang_python=py, sglang_version=version).by_code("launch.flag")
    assert [f.evidence.get("judge") for f in errs] == [f"SGLang {version}'s parser"]
    assert "invalid int value: 'abc'" in errs[0].title
