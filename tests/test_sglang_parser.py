"""Every launch command the kit generates, and the seed's, parsed by SGLang 0.5.23's REAL parser.

Builds (once, cached) the side venv `sglang-0.5.23` (kit.venvs: sglang --no-deps + light packages)
and runs `ServerArgs.add_cli_args` there. Run: python -m pytest tests/test_sglang_parser.py -q
"""

from pathlib import Path

import pytest

from kit.serving.checks import lint
from kit.serving.launch import ALIASES, FIELDS, LaunchSpec, spec_from_command
from kit.sglang.parser import parse_argvs

pytestmark = pytest.mark.interop
SEED = (Path(__file__).resolve().parents[1] / "kit" / "tests" / "data" / "seed_launch.sh").read_text()


@pytest.fixture(scope="module")
def py():
    from kit.venvs import ensure_venv

    try:
        return str(ensure_venv("sglang-0.5.23"))
    except Exception as e:  # no network on a fresh machine
        pytest.skip(f"side venv sglang-0.5.23 unavailable: {e}")


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


def test_every_generated_command_parses_with_sglang(py):
    specs = generated_specs()
    argvs = [s.flags() for s in specs.values()]
    argvs += [s.argv("reference")[4:] for s in specs.values()]  # `kit serve` takes SGLang's flags too
    results = parse_argvs(argvs, python=py)
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


def test_kit_fields_and_aliases_are_sglang_flags(py):
    value = {"model_path": "v", "speculative_draft_model_path": "v", "tp_size": "8"}
    res = parse_argvs(
        [[a, value[ALIASES[a]]] + ([] if ALIASES[a] == "model_path" else ["--model-path", "m"]) for a in ALIASES]
        + [["--model-path", "m"]],
        python=py,
    )
    assert all(r["ok"] for r in res), res
    assert set(FIELDS) <= set(res[-1]["args"]), set(FIELDS) - set(res[-1]["args"])
    for r, a in zip(res, ALIASES):
        assert str(r["args"][ALIASES[a]]) == value[ALIASES[a]], a


def test_bad_flags_become_launch_flag(py):
    bad = spec_from_command("python -m sglang.launch_server --model-path m --speculative-num-stepz 3 --tp-size x")
    r = lint(bad, sglang_python=py)
    flags = r.by_code("launch.flag")
    assert flags and all(f.severity == "error" for f in flags)
    assert any("tp-size" in f.title or "--speculative-num-stepz" in f.title for f in flags)
