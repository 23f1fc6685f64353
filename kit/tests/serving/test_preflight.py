"""`kit launch` checks before it starts: the checks of `kit doctor` (one gathering, `kit.preflight`),
the kit's names resolved as the notebooks resolve them, paths that must exist, a refusal unless `--force`.

Tiny target config + random EAGLE-3 draft written in code; SGLang's real parser made unavailable (its
recorded flag table still judges the flags) and no server is started (`ServerProcess` replaced).
Run: python -m pytest kit/tests/serving/test_preflight.py -q
"""

import json

import pytest

from kit.checkpoint.random_draft import write_random_draft
from kit.cli import main
from kit.preflight import DoctorConfig, diagnose, launch_report
from kit.serving.launch import LaunchSpec
from kit.sglang.versions import listed
from kit.tests.checkpoint.test_checkpoint import TINY

SHORT = {"max_position_embeddings": 64}  # the target serves 128 positions
PARAMS = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]


@pytest.fixture(autouse=True)
def no_side_parser(monkeypatch, tmp_path):
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path / "venvs"))
    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")


@pytest.fixture
def target(tmp_path):
    d = tmp_path / "target"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**TINY, "model_type": "llama"}))
    return d


def draft(tmp_path, name="draft", **config):
    d = write_random_draft(tmp_path / name, "sglang", TINY, draft_vocab_size=32)
    if config:
        cfg = json.loads((d / "config.json").read_text())
        (d / "config.json").write_text(json.dumps({**cfg, **config}))
    return d


class Started(Exception):
    """Raised by the stand-in for ServerProcess: the verb got as far as starting a server."""


@pytest.fixture
def no_start(monkeypatch):
    from kit.serving import process

    def from_spec(spec, engine="sglang", **kw):
        raise Started(spec.argv(engine))

    monkeypatch.setattr(process.ServerProcess, "from_spec", staticmethod(from_spec))


def launch(target, draft_path, *extra):
    return [
        "launch",
        "--model-path",
        str(target),
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(draft_path),
        *PARAMS,
        *extra,
    ]


def dry_run(capsys, argv):
    rc = main(argv + ["--dry-run", "--json"])
    return rc, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def errors(doc):
    return {f["code"] for f in doc["findings"] if f["severity"] == "error"}


def test_a_sound_launch_passes_and_starts(target, tmp_path, capsys, no_start):
    d = draft(tmp_path)
    rc, doc = dry_run(capsys, launch(target, d))
    assert rc == 0 and errors(doc) == set(), doc["findings"]
    with pytest.raises(Started):
        main(launch(target, d))


@pytest.mark.parametrize(
    "config,code",
    [
        ({"max_position_embeddings": 64}, "draft.context_short"),  # the target serves 128 positions
        ({"num_key_value_heads": 2}, "draft.shape"),  # k_proj/v_proj tensors hold one kv head
    ],
)
def test_doctor_errors_refuse_the_start(target, tmp_path, capsys, no_start, config, code):
    d = draft(tmp_path, **config)
    rc, doc = dry_run(capsys, launch(target, d))
    assert rc == 1 and code in errors(doc)
    assert main(launch(target, d)) == 1  # refused: no server started
    err = capsys.readouterr().err
    assert code in err and "not starting" in err and "--force" in err
    with pytest.raises(Started):
        main(launch(target, d, "--force"))


def test_launch_and_doctor_report_the_same_findings(target, tmp_path):
    d = draft(tmp_path, max_position_embeddings=64, num_key_value_heads=2)
    spec = LaunchSpec(
        model_path=str(target),
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(d),
        speculative_num_steps=3,
        speculative_eagle_topk=2,
        speculative_num_draft_tokens=3,
    )
    doctor = diagnose(DoctorConfig(target=str(target), draft=str(d), launch=spec.command()))
    launched = launch_report(spec)
    assert [f.to_dict() for f in launched.findings] == [f.to_dict() for f in doctor.findings]
    assert {"draft.context_short", "draft.shape", "launch.spec_verify"} <= {f.code for f in launched.errors}


@pytest.mark.parametrize("version", listed())
def test_doctor_on_every_release_gives_findings_or_one_line(target, tmp_path, capsys, version):
    """Side environments off (the autouse fixture: the offline laptop), a sound deployment on each release of
    kit/sglang/releases.json: findings (exit 0 or 1) or a one-line error (exit 2), never a traceback."""
    d = draft(tmp_path)
    cmd = LaunchSpec(model_path=str(target), speculative_algorithm="EAGLE3", speculative_draft_model_path=str(d))
    rc = main(["doctor", "--launch", cmd.command() + " " + " ".join(PARAMS), "--sglang-version", version, "--json"])
    out, err = capsys.readouterr()
    if rc == 2:
        assert len(err.strip().splitlines()) == 1, err
    else:
        doc = json.loads(out.strip().splitlines()[-1])
        assert rc == int(not doc["summary"]["ok"]) and doc["findings"], doc


def test_a_missing_draft_path_is_an_error(target, tmp_path, capsys, no_start):
    missing = tmp_path / "drafts" / "nope"
    rc, doc = dry_run(capsys, launch(target, missing))
    assert rc == 1 and errors(doc) == {"launch.path"}
    (f,) = [f for f in doc["findings"] if f["code"] == "launch.path"]
    assert f["evidence"] == {"flag": "--speculative-draft-model-path", "path": str(missing), "engine": "sglang"}
    assert main(launch(target, missing)) == 1


def test_a_hub_id_is_passed_on_and_an_unreadable_one_said_so(tmp_path, capsys, monkeypatch):
    """Offline (the suite's HF_HUB_OFFLINE=1) with an empty cache: the id goes to SGLang as given, and the
    finding names it and why its checks did not run (a warning for a target; kit/tests/checkpoint/test_hub.py
    resolves ids from a cache and over HTTP)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    rc, doc = dry_run(capsys, ["launch", "--model-path", "meta-llama/Llama-3.1-8B-Instruct"])
    assert rc == 0 and doc["argv"][doc["argv"].index("--model-path") + 1] == "meta-llama/Llama-3.1-8B-Instruct"
    (f,) = [f for f in doc["findings"] if f["code"] == "launch.path"]
    assert f["severity"] == "warning" and "meta-llama/Llama-3.1-8B-Instruct" in f["title"]
    assert "HF_HUB_OFFLINE" in f["title"] and "not in the Hugging Face cache" in f["title"]


def test_embedded_and_demo_resolve_as_the_notebooks_do(target, tmp_path, capsys, monkeypatch, no_start):
    import kit.models

    d = draft(tmp_path)
    monkeypatch.setattr(kit.models, "embedded_dir", lambda: target)
    monkeypatch.setattr(kit.models, "shipped_draft", lambda: d)
    argv = ["launch", "--model-path", "embedded", "--speculative-algorithm", "EAGLE3"]
    argv += ["--speculative-draft-model-path", "demo", *PARAMS]
    rc, doc = dry_run(capsys, argv)
    assert rc == 0, doc["findings"]
    flags = dict(zip(doc["argv"][3::2], doc["argv"][4::2]))
    assert flags["--model-path"] == str(target) and flags["--speculative-draft-model-path"] == str(d)
    # the checks saw the resolved pair: a short draft context is found through `embedded` and `demo`
    monkeypatch.setattr(kit.models, "shipped_draft", lambda: draft(tmp_path, "short", **SHORT))
    rc, doc = dry_run(capsys, argv)
    assert rc == 1 and "draft.context_short" in errors(doc)
    # the reference server resolves `embedded` itself; its checks still read the cached target
    rc, doc = dry_run(capsys, argv + ["--engine", "reference"])
    assert "draft.context_short" in errors(doc) and doc["argv"][doc["argv"].index("--model-path") + 1] == "embedded"


def test_probe_env_as_doctor_probes_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["launch", "--model-path", "meta-llama/Llama-3.1-8B-Instruct"]
    probed = {f["code"] for f in dry_run(capsys, argv + ["--probe-env"])[1]["findings"]}
    assert probed & {"env.gpu", "env.no_gpu"} and "env.torch" in probed
    assert not {c for c in (f["code"] for f in dry_run(capsys, argv)[1]["findings"]) if c in ("env.gpu", "env.no_gpu")}


def test_diagnose_each_runs_the_parser_once_for_every_launch(target, tmp_path, monkeypatch):
    from kit.preflight import diagnose_each
    from kit.sglang import parser

    calls = []

    def parse(argvs, py, timeout):  # a stand-in for SGLang's parser: every flag accepted
        calls.append(len(argvs))
        return [{"ok": True, "unknown": [], "error": None, "args": {}} for _ in argvs]

    monkeypatch.setattr(parser, "parser_python", lambda *a, **k: "/stand-in/python")
    monkeypatch.setattr(parser, "_parse", parse)
    monkeypatch.setattr(parser, "_CACHE", {})
    d = draft(tmp_path)
    cfgs = [
        DoctorConfig(
            target=str(target),
            draft=str(d),
            launch=f"python -m sglang.launch_server --model-path {target} --speculative-algorithm {alg} "
            f"--speculative-draft-model-path {d} --port {port}",
        )
        for alg, port in (("EAGLE3", 41001), ("EAGLE", 41002))
    ]
    fixed, seed = diagnose_each(cfgs)
    assert calls == [2]  # one parser run for both launches; each lint read its own result
    assert "aux.algorithm" in {f.code for f in seed.findings} - {f.code for f in fixed.findings}
    monkeypatch.setattr(parser, "_CACHE", {})
    assert [f.to_dict() for f in diagnose(cfgs[1]).findings] == [f.to_dict() for f in seed.findings]


def test_a_multimodal_target_whose_processor_is_remote_code_needs_trust_remote_code(tmp_path, monkeypatch):
    """SGLang loads Kimi-K2.5's processor while it starts: remote code without --trust-remote-code never starts
    (seen on the H200: 'contains custom code which must be executed')."""
    from kit.sglang import loader

    monkeypatch.setattr(loader, "processor_archs", lambda version, download=False: {"KimiK25ForConditionalGeneration"})
    target = tmp_path / "kimi"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["KimiK25ForConditionalGeneration"]}))
    launch = f"python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 --speculative-draft-model-path /d"

    def codes(cmd: str) -> set[str]:
        return {
            f.code for f in diagnose(DoctorConfig(target=str(target), launch=cmd, sglang_version="0.5.17")).findings
        }

    assert "launch.remote_code_needed" in codes(launch)  # no processor files: the vendor's is remote code
    assert "launch.remote_code_needed" not in codes(launch + " --trust-remote-code")
    (target / "processor_config.json").write_text(json.dumps({"processor_class": "LlavaProcessor"}))
    assert "launch.remote_code_needed" not in codes(launch)  # the folder's own processor is Transformers' code
    (target / "processor_config.json").write_text(json.dumps({"auto_map": {"AutoProcessor": "p.P"}}))
    assert "launch.remote_code_needed" in codes(launch)
