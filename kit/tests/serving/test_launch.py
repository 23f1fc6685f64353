"""Launch specs: parse/round-trip the seed's command, semantic lint rules, the `kit launch` verb.

SGLang's real parser is exercised in tests/test_sglang_parser.py (interop); here it is switched
off (`parse_flags=False`) or made unavailable, so these tests stay hermetic and fast.
Run: python -m pytest kit/tests/serving/test_launch.py -q
"""

import json
from pathlib import Path

import pytest

from kit.findings import KitInputError
from kit.serving.checks import lint
from kit.serving.launch import LaunchSpec, launch_from_text, localize, spec_from_argv, spec_from_command

SEED = (Path(__file__).parents[1] / "data" / "seed_launch.sh").read_text()


def codes(report, sev=None):
    return {f.code for f in report.findings if sev is None or f.severity == sev}


def test_seed_parses_into_typed_fields():
    s = spec_from_command(SEED)
    assert s.python == "/root/ml-env/bin/python3"
    assert s.env["NCCL_PROTO"] == "LL" and s.env["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"] == "1"
    assert len(s.env) == 7
    assert (s.model_path, s.tp_size, s.mem_fraction_static) == ("/shared/kimi-k2.5-int4", 8, 0.85)
    assert (s.host, s.port, s.trust_remote_code) == ("0.0.0.0", 8000, True)
    assert (
        s.speculative_algorithm,
        s.speculative_num_steps,
        s.speculative_eagle_topk,
        s.speculative_num_draft_tokens,
    ) == ("EAGLE", 3, 4, 5)
    assert s.extra_args == ["--num-continuous-decode-steps", "4", "--disable-custom-all-reduce"]


def test_round_trip_command_and_argv():
    s = spec_from_command(SEED)
    assert spec_from_command(s.command()) == s
    assert spec_from_argv(s.argv(), s.env) == s
    fixed = s.replace(speculative_algorithm="EAGLE3", host="127.0.0.1")
    assert spec_from_command(fixed.command()) == fixed
    assert "--speculative-algorithm EAGLE3" in fixed.command()


def test_argv_forms_aliases_and_bad_values():
    s = spec_from_argv(
        [
            "sglang",
            "serve",
            "--model=m",
            "--speculative-draft-model",
            "d",
            "--tp-size",
            "x",
            "--port",
            "--weird",
            "1",
            "2",
        ]
    )
    assert s.model_path == "m" and s.speculative_draft_model_path == "d"
    assert s.tp_size is None and s.port is None
    assert s.extra_args == ["--tp-size", "x", "--port", "--weird", "1", "2"]  # left for SGLang's parser
    ref = LaunchSpec(model_path="m", tp_size=8, port=1234).argv("reference")
    assert ref[1:4] == ["-m", "kit", "serve"] and "--tp-size" not in ref and "1234" in ref
    # a vLLM line is the same deployment in SGLang's names (kit.vllm.cmdline; kit/tests/vllm)
    assert spec_from_command("python -m vllm.entrypoints.openai.api_server --model m").model_path == "m"
    with pytest.raises(KitInputError):
        spec_from_command("ls -l")


@pytest.mark.parametrize(
    "steps,topk,ndt,code_sev",
    [
        (None, None, None, "info"),  # auto-chosen
        (None, 4, 5, "error"),  # SGLang assert
        (3, None, 4, "error"),  # None > 1 crash
        (3, 1, 6, "warning"),  # overridden to 4
        (3, 4, 5, None),  # the seed's choice is legal
        (2, 2, 8, "error"),  # max 1 + 2 + 1*4 = 7
        (3, 1, 4, None),
    ],
)
def test_spec_params(steps, topk, ndt, code_sev):
    s = LaunchSpec(
        model_path="m",
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="d",
        speculative_num_steps=steps,
        speculative_eagle_topk=topk,
        speculative_num_draft_tokens=ndt,
    )
    found = [f for f in lint(s, parse_flags=False).findings if f.code == "launch.spec_params"]
    assert [f.severity for f in found] == ([code_sev] if code_sev else [])


def test_effective_params_follow_sglang_resolution():
    base = LaunchSpec(speculative_algorithm="EAGLE3")
    assert base.resolved_params("LlamaForCausalLM").label() == "5-4-8"
    assert base.resolved_params("KimiK25ForConditionalGeneration").label() == "3-1-4"
    assert base.replace(speculative_num_steps=4, speculative_eagle_topk=1).resolved_params(None).label() == "4-1-5"


def test_algorithm_with_eagle3_draft(tmp_path):
    d = tmp_path / "draft"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    s = LaunchSpec(
        model_path="m",
        speculative_algorithm="EAGLE",
        speculative_draft_model_path=str(d),
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
    )
    assert "aux.algorithm" in codes(lint(s, parse_flags=False), "error")
    assert "aux.algorithm" not in codes(lint(s.replace(speculative_algorithm="EAGLE3"), parse_flags=False))
    # the seed: draft not on this machine, but its path says eagle3 -> a warning, not silence
    assert "aux.algorithm" in codes(lint(spec_from_command(SEED), parse_flags=False), "warning")


def test_bind_trust_backend_and_missing_draft():
    r = lint(spec_from_command(SEED), parse_flags=False)
    assert {"launch.bind", "launch.trust_remote_code"} <= codes(r, "warning")
    assert any(f.code == "env.nccl_var" and "NCCL_P2P_LEVEL" in f.title for f in r.findings)  # kit.env.nccl's rules
    assert "launch.bind" not in codes(lint(spec_from_command(SEED.rstrip() + " --api-key k"), parse_flags=False))
    s = LaunchSpec(
        model_path="m",
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="d",
        speculative_num_steps=3,
        speculative_eagle_topk=4,
        speculative_num_draft_tokens=8,
        attention_backend="trtllm_mha",
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    )
    # trtllm_mha refuses trees everywhere; SGLANG_ENABLE_SPEC_V2 fails with them only in 0.5.5-0.5.10
    assert [f.severity for f in lint(s, parse_flags=False, sglang_version="0.5.9").by_code("launch.backend")] == [
        "error",
        "error",
    ]
    (early,) = [
        f for f in lint(s, parse_flags=False, sglang_version="0.5.5").by_code("launch.backend") if "V2" in f.title
    ]
    assert "first decode" in early.title  # 0.5.5-0.5.6 start, then fail (sglang #13352, #14077)
    for v in ("0.5.11", "0.5.17", "0.5.23"):
        (f,) = lint(s, parse_flags=False, sglang_version=v).by_code("launch.backend")
        assert "trtllm_mha" in f.title
    nodraft = LaunchSpec(model_path="m", speculative_algorithm="EAGLE3")
    assert "launch.spec_params" in codes(lint(nodraft, parse_flags=False), "error")


def test_mem_from_checkpoint_headers(tmp_path):
    import torch
    from safetensors.torch import save_file

    t = tmp_path / "t"
    t.mkdir()
    save_file({"w": torch.zeros(256, 1024)}, str(t / "model.safetensors"))  # 1 MiB
    (t / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    s = LaunchSpec(model_path=str(t), mem_fraction_static=0.5)
    assert lint(s, parse_flags=False, gpu_memory_gib=1 / 1024).by_code("launch.mem")[0].severity == "error"
    assert lint(s, parse_flags=False, gpu_memory_gib=1.0).by_code("launch.mem") == []
    info = lint(s.replace(mem_fraction_static=None), parse_flags=False, gpu_memory_gib=1.0).by_code("launch.mem")
    assert info[0].severity == "info" and info[0].evidence["target_bytes"] == 1 << 20


@pytest.mark.parametrize("version", ["0.4.4", "0.4.10", "0.5.1", "0.5.8", "0.5.23"])
def test_tp_size_is_read_on_every_release(version):
    """0.4.4-0.5.13's parsers store --tp-size under `tensor_parallel_size`: the spec's tp_size gets it all the same."""
    for flag in ("--tp-size", "--tensor-parallel-size", "--tp"):
        s = spec_from_argv(["python", "-m", "sglang.launch_server", "--model-path", "m", flag, "8"], None, version)
        assert (s.tp_size, s.extra_args) == (8, []), flag
        assert s.flags() == ["--model-path", "m", "--tp-size", "8"]


def _sparse_target(d: Path, nbytes: int) -> Path:
    """A model folder whose one safetensors file declares `nbytes` of BF16 weights (a hole on disk)."""
    import struct

    d.mkdir()
    header = json.dumps({"w": {"dtype": "BF16", "shape": [nbytes // 2], "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + nbytes)
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    return d


def test_mem_divides_the_weights_by_tp_on_older_releases_too(tmp_path):
    """A 140 GiB target at --tp-size 8: 17.5 GiB per GPU on 0.5.1 as on 0.5.23, so no false `launch.mem` error
    on an 80 GiB GPU (read as TP1 it would need 140 GiB on one)."""
    t = _sparse_target(tmp_path / "t", 140 << 30)
    cmd = f"python -m sglang.launch_server --model-path {t} --tp-size 8"
    per_gpu = {}
    for v in ("0.5.1", "0.5.8", "0.5.23"):
        s = spec_from_command(cmd, v)
        [info] = lint(s, parse_flags=False, gpu_memory_gib=80.0, sglang_version=v).by_code("launch.mem")
        assert info.severity == "info" and info.evidence["tp_size"] == 8, v
        per_gpu[v] = info.evidence["weights_per_gpu_gib"]
        full = lint(s.replace(mem_fraction_static=0.85), parse_flags=False, gpu_memory_gib=80.0, sglang_version=v)
        assert full.by_code("launch.mem") == [], v
    assert per_gpu == {"0.5.1": 17.5, "0.5.8": 17.5, "0.5.23": 17.5}


def test_parser_unavailable_is_a_warning_and_the_table_still_checks(monkeypatch, tmp_path):
    """No side environment: `launch.parser` warns what was skipped, the recorded table still rejects `abc`."""
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path))
    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")
    monkeypatch.delenv("KIT_SGLANG_PYTHON", raising=False)
    r = lint(LaunchSpec(model_path="m"), sglang_version="0.5.17")
    [p] = r.by_code("launch.parser")
    assert p.severity == "warning" and p.evidence["table"] == "0.5.17" and p.evidence["skipped"]
    assert not r.errors
    bad = spec_from_command("python -m sglang.launch_server --model-path m --speculative-num-steps abc")
    errs = lint(bad, sglang_version="0.5.17").by_code("launch.flag")
    assert [f.severity for f in errs] == ["error"] and "invalid int value: 'abc'" in errs[0].title
    assert errs[0].evidence["judge"] == "SGLang 0.5.17's flag table"
    later = lint(LaunchSpec(model_path="m"), sglang_version="0.5.99").by_code("launch.parser")[0]
    assert not later.evidence["exact"] and later.evidence["table"] != "0.5.99"


def test_launch_lines_as_people_write_them():
    """The line from an SGLang PR: variables chained with `&&`, a prefix of --speculative-algorithm."""
    text = (
        "SGLANG_ENABLE_SPEC_V2=1 && SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 && python -m sglang.launch_server "
        "--model-path X --speculative-algo EAGLE --speculative-draft-model-path d --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --tp 8"
    )
    spec, found = launch_from_text(text)
    assert (spec.speculative_algorithm, spec.tp_size, spec.speculative_num_steps) == ("EAGLE", 8, 3)
    assert spec.env == {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert [(f.code, f.severity) for f in found] == [("launch.env_scope", "warning")]
    r = lint(spec, parse_flags=False)
    assert "speculation is off" not in " ".join(f.title for f in r.findings)
    assert "--speculative-algorithm EAGLE " in spec.command() + " "  # the kit's command spells it out
    spec, found = launch_from_text("source env.sh; cd /w && python prep.py && sglang serve org/m --config c.yaml")
    assert spec.model_path == "org/m" and spec.extra_args == ["--config", "c.yaml"]
    unparsed = {f.severity: f for f in found if f.code == "launch.unparsed"}
    assert "source env.sh" in unparsed["warning"].title and "--config c.yaml" in unparsed["warning"].title
    assert unparsed["info"].evidence["commands"] == ["python prep.py"]
    with pytest.raises(KitInputError, match="no SGLang launch"):
        launch_from_text("export A=1 && python train.py")


def test_verb_dry_run_json(monkeypatch, tmp_path, capsys):
    from kit.cli import main

    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path))
    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")
    rc = main(
        [
            "launch",
            "--from",
            SEED,
            "--speculative-algorithm",
            "EAGLE3",
            "--host",
            "127.0.0.1",
            "--env",
            "NCCL_DEBUG=INFO",
            "--dry-run",
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the seed's paths are on its GPU host, not here: the launch could not start on this machine
    assert rc == 1 and {f["code"] for f in doc["findings"] if f["severity"] == "error"} == {"launch.path"}
    assert doc["argv"][:3] == ["/root/ml-env/bin/python3", "-m", "sglang.launch_server"]
    i = doc["argv"].index("--speculative-algorithm")
    assert doc["argv"][i + 1] == "EAGLE3" and "--disable-custom-all-reduce" in doc["argv"]
    assert doc["env"]["NCCL_DEBUG"] == "INFO" and doc["env"]["NCCL_PROTO"] == "LL"
    assert "launch.bind" not in {f["code"] for f in doc["findings"]}
    assert main(["launch", "--from", "python -m nope", "--dry-run"]) == 2


def test_doctor_provider():
    from kit.doctor import Deployment, DoctorConfig
    from kit.serving.checks import doctor_checks

    assert doctor_checks(Deployment.build(DoctorConfig(probe_env=False))) == []
    import kit.serving.checks as lc

    orig = lc.flag_findings
    lc.flag_findings = lambda *a, **k: []  # hermetic: SGLang's parser is tested in tests/
    try:
        found = doctor_checks(Deployment.build(DoctorConfig(launch=SEED, probe_env=False)))
    finally:
        lc.flag_findings = orig
    assert {"launch.bind", "aux.algorithm"} <= {f.code for f in found}


def test_local_run_of_the_seed_line_uses_one_gpu_and_the_engine_here(monkeypatch):
    """Notebooks 04/05: `engine="auto"` serves with SGLang only where a GPU is visible and SGLang importable,
    and the seed's 8-GPU line, localized with tp_size=1, starts on one GPU (the lint still sees tp 8)."""
    import importlib.util

    from kit.serving.engines import resolve_engine
    from kit.serving.engines.base import visible_gpus
    from kit.sglang.cmdline import SEED_LAUNCH

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == 0 and resolve_engine("auto") == "reference"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert visible_gpus() == 2
    has_sglang = importlib.util.find_spec("sglang") is not None
    assert resolve_engine("auto") == ("sglang" if has_sglang else "reference")
    assert resolve_engine("reference") == "reference"
    with pytest.raises(KitInputError, match="unknown serving engine"):
        resolve_engine("nope")
    seed = spec_from_command(SEED_LAUNCH)
    local = localize(seed, "sglang", "embedded", "/tmp/draft", port=30001, tp_size=1)
    assert (seed.tp_size, local.tp_size, local.host, local.port) == (8, 1, "127.0.0.1", 30001)
    assert "--tp-size 1" in local.command() and local.speculative_draft_model_path == "/tmp/draft"


def test_sglang_localize_resolves_embedded_and_adds_the_bundles_flags(tmp_path, monkeypatch):
    """Notebooks 04/05 on a GPU host: 'embedded' becomes the converted SmolLM2 directory (not the seed's
    /shared path), and an SGLang installed from the kit's bundle gets the bundle's launch flags (the trimmed
    bundle has no FA3: SGLang's default backend failed to start), a flag the launch sets keeping its value
    where the bundle runs that value too (float16) and losing it where it does not (fa3)."""
    import json
    import sys

    import kit.models
    from kit.serving.engines import get_engine
    from kit.sglang.bundle_site import MANIFEST_MEMBER
    from kit.sglang.cmdline import SEED_LAUNCH

    site = tmp_path / "site"
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    flags = ["--attention-backend", "triton", "--skip-server-warmup", "--dtype", "bfloat16"]
    (site / MANIFEST_MEMBER).write_text(json.dumps({"launch_flags": flags}))
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    monkeypatch.setattr(kit.models, "resolve_target", lambda t: tmp_path / "smollm2")
    spec = spec_from_command(SEED_LAUNCH).replace(
        attention_backend="fa3", extra_args=["--dtype", "float16", "--decode-attention-backend=fa3"]
    )
    assert get_engine("sglang").localize(spec, "embedded")["model_path"] == str(tmp_path / "smollm2")
    local = localize(spec, "sglang", "/models/t", port=30001, log=lambda *a: None)
    assert local.attention_backend == "triton"
    assert local.extra_args == ["--dtype", "float16", "--decode-attention-backend", "triton", "--skip-server-warmup"]
    (site / MANIFEST_MEMBER).unlink()  # a plain SGLang install: the launch as written
    assert get_engine("sglang").required_changes(spec) == ({}, [])


def test_launch_on_a_bundle_installed_sglang_adds_the_bundles_flags_and_says_why(monkeypatch, tmp_path, capsys):
    """`PYTHONPATH=/opt/sglang-site kit launch --from ...` on the H200 started SGLang without the bundle's flags:
    it picked FlashInfer, whose JIT sources the bundle does not carry. The verb adds them (a user's fa3 and
    flashinfer replaced, each named with the reason); `--bundle` adds them where no bundle manifest is found."""
    from kit.cli import main
    from kit.sglang.bundle import RELEASES

    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path))
    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")
    bundle = list(RELEASES["0.5.17"].launch_flags)
    monkeypatch.setattr("kit.sglang.bundle_site.installed_bundle_flags", lambda: bundle)
    written = "python -m sglang.launch_server --model-path /m --attention-backend fa3 --sampling-backend flashinfer"
    main(["launch", "--from", written, "--dry-run", "--sglang-version", "0.5.17"])
    out, err = capsys.readouterr()
    command = out.strip().splitlines()[-1]
    assert command.startswith("python -m sglang.launch_server") and " ".join(bundle) in command
    assert "fa3" not in command and "flashinfer" not in command
    reason = "the kit's SGLang bundle needs it"
    assert f"--attention-backend triton: replaces the launch's fa3, {reason}" in err
    assert f"--sampling-backend pytorch: replaces the launch's flashinfer, {reason}" in err
    assert f"--skip-server-warmup: added, {reason}" in err

    monkeypatch.setattr("kit.sglang.bundle_site.installed_bundle_flags", lambda: [])  # any other install: as written
    plain = ["launch", "--from", written, "--dry-run", "--json", "--sglang-version", "0.5.17"]
    main(plain)
    out, err = capsys.readouterr()
    assert json.loads(out.strip().splitlines()[-1])["argv"][3:] == written.split()[3:] and reason not in err
    main(plain + ["--bundle"])
    argv = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["argv"]
    assert argv[argv.index("--attention-backend") + 1] == "triton" and "--skip-server-warmup" in argv
    assert main(["launch", "--from", written, "--dry-run", "--bundle", "--sglang-version", "0.5.23"]) == 2


def test_servers_sharing_one_gpu_each_get_a_memory_share_and_a_capped_kv_pool():
    """Three SGLang servers on one GPU, each sizing its pool from what is free, ran out of memory at the third."""
    from kit.sglang.cmdline import SEED_LAUNCH

    seed = spec_from_command(SEED_LAUNCH)  # --mem-fraction-static 0.85
    alone = localize(seed, "sglang", "/t", "/d", port=30001, tp_size=1)
    assert alone.mem_fraction_static == 0.85 and "--max-total-tokens" not in alone.extra_args
    shared = [localize(seed, "sglang", "/t", "/d", port=30001, tp_size=1, servers_per_device=n) for n in (3, 4)]
    assert [s.mem_fraction_static for s in shared] == [0.75, 0.75]  # SGLang's budget rule: see the next test
    assert all(s.extra_args.count("--max-total-tokens") == 1 for s in shared)


def test_servers_started_side_by_side_each_pass_sglangs_kv_budget():
    """SGLang 0.5.17's KV budget (`KVCacheConfigurator._profile_available_bytes`): the memory free after its load
    less (1 - fraction) x the memory free before it; servers started at once each see the others' weights and pools
    land in between. A dummy Llama-2-7B on an H100 at a fraction of 0.75 / 3 failed so ("Loaded weights leave no
    GPU memory for the KV cache ... minimum viable 0.4948"). As many as `servers_that_fit` pass at the fraction
    `share_device` gives, in the worst order (every other one loaded and sized first)."""
    from kit.serving.engines import get_engine
    from kit.serving.engines.base import SERVER_RESERVE_BYTES

    sglang, gib = get_engine("sglang"), 2**30
    device, weights = 79.2 * gib, 12.55 * gib + 0.6 * gib  # a dummy Llama-2-7B and its draft

    def budget(servers: int, fraction: float, pool: float) -> float:
        others = (servers - 1) * (weights + pool + SERVER_RESERVE_BYTES)
        return (device - others - weights) - (1 - fraction) * device

    for pool, tokens, want in ((1 * gib, 2048, 3), (5 * gib, 10240, 2)):  # batch 2's pool, batch 16's
        fits = sglang.servers_that_fit(weights, pool, device)
        fraction = sglang.share_device(LaunchSpec(model_path="/t"), fits, tokens).mem_fraction_static
        assert fits == want and budget(fits, fraction, pool) >= pool
    assert budget(3, 0.75 / 3, 1 * gib) < 0  # a share of the fraction each: no KV cache, as on the H100
    ref = localize(LaunchSpec(), "reference", "embedded", port=30001, servers_per_device=3)
    assert ref.mem_fraction_static is None  # the CPU reference server: memory enough for each
