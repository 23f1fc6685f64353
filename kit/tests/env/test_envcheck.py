"""Environment rules (kit.env.checks, kit.env.gpu_arch, kit.sglang.env_vars) on four recorded machines, the probe, the verb.

The GPU machines are recordings in the probe's schema (kit/tests/facts/*.json; no GPU exists here);
the CPU machine's probe and the CLI run for real.

    python -m pytest kit/tests/test_envcheck.py -q
"""

import json
import subprocess
import sys

import pytest

from kit.env.checks import check, facts_rows, load_facts
from kit.env.gpu_arch import arch_cover, family
from kit.env.machine import _collect, gpu_list, parse_smi_query, parse_topo, probe_machine
from kit.findings import KitInputError
from kit.tests.env_fixtures import FACTS_DIR, MACHINES, SEED_LAUNCH, SEED_NCCL_VARS, facts, seed_env_argv


def run_seed(name, **kw):
    env, argv = seed_env_argv()
    return check(facts(name) if isinstance(name, str) else name, env, argv, **kw)


def one(rep, code):
    fs = rep.by_code(code)
    assert len(fs) == 1, [f.title for f in fs]
    return fs[0]


# -- knowledge ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "cc,fam,sm",
    [
        ((9, 0), "Hopper", "sm_90"),
        ((10, 0), "Blackwell datacenter", "sm_100"),
        ((10, 3), "Blackwell datacenter", "sm_103"),
        ((11, 0), "Blackwell Thor", "sm_110"),
        ((12, 0), "Blackwell workstation/consumer", "sm_120"),
        ((12, 1), "Blackwell workstation/consumer", "sm_121"),
    ],
)
def test_families(cc, fam, sm):
    assert family(cc)["family"] == fam and family(cc)["sm"] == sm


def test_arch_cover_same_major_and_ptx_rules():
    assert arch_cover((12, 0), ["sm_90", "sm_120"]) == ("exact", "sm_120")
    assert arch_cover((10, 3), ["sm_90", "sm_100"]) == ("same_major", "sm_100")
    assert arch_cover((12, 0), ["sm_90", "sm_100"]) == ("none", None)  # different major: no cubin runs
    assert arch_cover((12, 0), ["sm_80", "compute_90"]) == ("ptx", "compute_90")
    assert arch_cover((12, 0), ["sm_121"])[0] == "none"  # higher minor does not run


# -- the four machines ----------------------------------------------------------------------
def test_seed_machine_verdicts():
    rep = run_seed("rtxpro6000_8x_pcie")
    g = one(rep, "env.gpu")
    assert "8x" in g.title and "sm_120" in g.title and "Blackwell workstation/consumer" in g.title
    assert g.evidence["memory_mib"] == 97887
    assert one(rep, "env.torch_arch").severity == "info"
    assert one(rep, "env.nccl_version").severity == "info"  # 2.27.5 >= 2.26.2
    car = one(rep, "env.custom_allreduce")
    assert car.severity == "info" and "disables custom all-reduce by itself" in car.title
    assert "only silences" in car.title
    assert one(rep, "env.topology").severity == "warning"
    assert one(rep, "env.iommu").severity == "warning"
    ncc = {f.evidence["var"]: f for f in rep.by_code("env.nccl_var")}
    assert sorted(ncc) == sorted(SEED_NCCL_VARS)
    assert ncc["NCCL_PROTO"].severity == "info" and ncc["NCCL_P2P_LEVEL"].severity == "warning"
    sg = one(rep, "env.sglang_var")
    assert sg.evidence["var"] == "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" and "target's" in sg.evidence["meaning"]
    ab = one(rep, "env.attn_backend")
    assert ab.evidence["default"] == "triton" and ab.evidence["mla_guessed_from_path"]  # Kimi (MLA) on sm_120
    assert rep.exit_code() == 0
    assert rep.facts["label"].startswith("8x RTX PRO 6000")


def test_seed_machine_with_old_nccl_and_wrong_wheel():
    fx = facts("rtxpro6000_8x_pcie")
    fx["torch"]["nccl"] = "2.25.1"
    fx["torch"]["arch_list"] = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    fx["torch"]["cuda"] = "12.6"
    fx["packages"]["triton"] = "3.2.0"
    fx["packages"]["sgl-kernel"] = "0.3.21+cu130"
    rep = run_seed(fx)
    nv = one(rep, "env.nccl_version")
    assert nv.severity == "error" and "2.26.2" in nv.title
    assert one(rep, "env.torch_arch").severity == "error"
    assert any(f.severity == "error" and "12.8" in f.title for f in rep.by_code("env.torch_cuda"))
    assert one(rep, "env.triton").severity == "error"
    assert one(rep, "env.sgl_kernel_lane").severity == "warning"
    assert rep.exit_code() == 1


def test_b200_verdicts():
    rep = run_seed("b200_8x_nvlink")
    assert "sm_100 (Blackwell datacenter)" in one(rep, "env.gpu").title
    assert one(rep, "env.custom_allreduce").severity == "warning"  # the flag turns off a faster path
    assert one(rep, "env.topology").severity == "info"
    assert not rep.by_code("env.iommu")  # NVLink: not the PCIe P2P risk
    ncc = {f.evidence["var"]: f for f in rep.by_code("env.nccl_var")}
    assert ncc["NCCL_P2P_LEVEL"].severity == "info" and "NVLink" in ncc["NCCL_P2P_LEVEL"].title
    assert one(rep, "env.attn_backend").evidence["default"] == "flashinfer"  # MLA on sm_100


def test_h200_verdicts():
    rep = run_seed("h200_1x")
    assert "sm_90 (Hopper)" in one(rep, "env.gpu").title
    assert one(rep, "env.gpu_count").severity == "error"  # --tp-size 8 on one GPU
    assert not rep.by_code("env.custom_allreduce") and not rep.by_code("env.topology")
    assert one(rep, "env.attn_backend").evidence["default"] == "fa3"  # MLA on Hopper
    assert one(rep, "env.driver").severity == "info"
    rep2 = check(facts("h200_1x"), {}, ["--tp-size", "1", "--attention-backend", "trtllm_mha"])
    assert one(rep2, "env.attn_backend").severity == "error"  # sm_100-only kernel on sm_90


def test_cpu_machine_still_checks_packages_and_variables():
    rep = run_seed("cpu_only")
    assert one(rep, "env.no_gpu").severity == "info"
    assert "CPU-only" in one(rep, "env.torch").title
    assert any(f.evidence["package"] == "transformers" for f in rep.by_code("env.package"))
    assert len(rep.by_code("env.nccl_var")) == 6 and rep.by_code("env.sglang_var")
    assert rep.exit_code() == 0


def test_thor_and_gb10_rules():
    fx = facts("h200_1x")
    for part in ("nvml", "torch", "smi"):
        devs = fx[part]["devices"] if part != "smi" else fx[part]["gpus"]
        devs[0]["cc"] = [11, 0]
        devs[0]["name"] = "NVIDIA Thor"
    fx["torch"]["cuda"] = "12.9"
    rep = check(fx)
    assert "Blackwell Thor" in one(rep, "env.gpu").title
    assert any(f.severity == "error" and "13.0" in f.title for f in rep.by_code("env.torch_cuda"))
    for part in ("nvml", "torch", "smi"):
        (fx[part]["devices"] if part != "smi" else fx[part]["gpus"])[0]["cc"] = [12, 1]
    fx["torch"]["arch_list"], fx["torch"]["cuda"] = ["sm_90", "sm_120"], "12.8"
    rep = check(fx)
    assert one(rep, "env.torch_arch").severity == "warning"  # sm_120 cubin on 12.1: same major
    assert any(f.severity == "warning" for f in rep.by_code("env.torch_cuda"))


def test_driver_rules():
    fx = facts("rtxpro6000_8x_pcie")
    fx["nvml"]["driver"], fx["nvml"]["cuda_driver"] = "570.20", "12.8"
    assert one(check(fx), "env.driver").severity == "error"  # below 570.26 for CUDA 12.8
    fx["nvml"]["driver"], fx["torch"]["cuda"] = "575.51.03", "13.0"
    fx["nvml"]["cuda_driver"] = "12.9"
    assert "supports CUDA 12.9" in one(check(fx), "env.driver").title


def test_sglang_requirements_and_fa3():
    fx = facts("rtxpro6000_8x_pcie")
    fx["packages"]["transformers"] = "5.24.0"
    fx["packages"]["flash_attn_3"] = "3.0.0b1"
    rep = check(fx)
    req = one(rep, "env.sglang_requires")
    assert "transformers==4.57.1" in req.title
    assert any("FlashAttention-3" in f.title for f in rep.by_code("env.flash_attn"))


def test_launch_value_wins_over_probed_environment():
    fx = facts("cpu_only")
    fx["env"] = {"NCCL_PROTO": "bogus", "NCCL_DEBUG": "WARN"}
    rep = check(fx, {"NCCL_PROTO": "LL"}, [])
    v = {f.evidence["var"]: f for f in rep.by_code("env.nccl_var")}
    assert v["NCCL_PROTO"].severity == "info" and v["NCCL_PROTO"].evidence["source"] == "launch"
    assert v["NCCL_DEBUG"].evidence["source"] == "launch"  # judged together with the launch's variables
    rep = check(fx)
    assert {f.evidence["var"]: f for f in rep.by_code("env.nccl_var")}["NCCL_PROTO"].severity == "error"


# -- probe and parsing ----------------------------------------------------------------------
TOPO_SAMPLE = (
    "\x1b[4m\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNODE\tSYS\tNODE\t0-63,128-191\t0\t\tN/A\n"
    "GPU1\tNODE\t X \tSYS\tNODE\t0-63,128-191\t0\t\tN/A\n"
    "GPU2\tSYS\tSYS\t X \tSYS\t64-127,192-255\t1\t\tN/A\n"
    "NIC0\tNODE\tNODE\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
)


def test_parse_topo_and_smi_query():
    t = parse_topo(TOPO_SAMPLE)
    assert t["gpus"] == ["GPU0", "GPU1", "GPU2"]
    assert t["matrix"][0] == ["X", "NODE", "SYS"] and t["numa"] == ["0", "0", "1"]
    assert parse_topo("No devices were found") is None
    rows = parse_smi_query("0, NVIDIA H200, 9.0, 143771, 700.00, 580.95.05, 00000000:18:00.0\n")
    assert rows[0]["cc"] == [9, 0] and rows[0]["memory_bytes"] == 143771 * 2**20 and rows[0]["power_limit_w"] == 700.0


def test_recorded_topo_text_parses_to_recorded_matrix():
    for name in MACHINES[:3]:
        fx = facts(name)
        assert parse_topo(fx["smi"]["topo_raw"]) == fx["smi"]["topo"], name


def test_probe_on_this_machine_never_crashes():
    f = probe_machine(timeout=60)
    assert f["schema"] == "kit.env.facts/1"
    assert f["torch"] is not None and f["torch"]["version"]  # CPU torch is installed here
    assert isinstance(gpu_list(f), list)
    json.dumps(f)  # recordable
    assert dict(facts_rows(f))["torch"] == f["torch"]["version"]


def test_probe_child_timeout_becomes_unknown():
    errors = {}
    p = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert _collect(p, 0.5, "torch", errors) is None
    assert "timed out" in errors["torch"] and p.poll() is not None
    rep = check({"schema": "kit.env.facts/1", "torch": None, "nvml": None, "errors": errors})
    assert one(rep, "env.probe").severity == "warning" and one(rep, "env.no_gpu")


# -- verb ------------------------------------------------------------------------------------
def kit(*args, **kw):
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=120, **kw)


def test_cli_env_replay_record_and_bad_input(tmp_path):
    r = kit("env", "--facts", str(FACTS_DIR / "rtxpro6000_8x_pcie.json"), "--launch", SEED_LAUNCH, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert {f["evidence"]["var"] for f in doc["findings"] if f["code"] == "env.nccl_var"} == set(SEED_NCCL_VARS)
    assert doc["facts"]["label"].startswith("8x RTX PRO 6000")
    out = tmp_path / "facts.json"
    r = kit("env", "--record", str(out))
    assert r.returncode == 0 and "env.no_gpu" in r.stdout
    assert load_facts(str(out))["schema"] == "kit.env.facts/1"
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = kit("env", "--facts", str(bad))
    assert r.returncode == 2 and "not a kit facts file" in r.stderr and "Traceback" not in r.stderr
    with pytest.raises(KitInputError):
        load_facts(str(tmp_path / "missing.json"))


def test_doctor_provider_reports_each_seed_nccl_variable():
    from kit.doctor import Deployment, DoctorConfig
    from kit.env.checks import doctor_checks

    fs = doctor_checks(Deployment.build(DoctorConfig(launch=SEED_LAUNCH, probe_env=True)))
    verdicts = {f.evidence["var"]: f.severity for f in fs if f.code == "env.nccl_var"}
    assert sorted(verdicts) == sorted(SEED_NCCL_VARS)  # exactly one verdict per variable
    assert verdicts["NCCL_PROTO"] == "info" and verdicts["NCCL_P2P_LEVEL"] == "warning"
    assert any(f.code == "env.no_gpu" for f in fs)
    unprobed = doctor_checks(Deployment.build(DoctorConfig(launch=SEED_LAUNCH, probe_env=False)))
    assert {f.code for f in unprobed} == {"env.nccl_var", "env.sglang_var"}


def test_flash_attn_not_built_for_arch_is_an_error():
    fx = facts("rtxpro6000_8x_pcie")
    fx["torch"]["flash_attn"] = {"ok": False, "error": "RuntimeError: CUDA error: no kernel image is available"}
    f = [x for x in check(fx).by_code("env.flash_attn") if x.severity == "error"]
    assert f and "FLASH_ATTN_CUDA_ARCHS" in f[0].fix


def test_fp8_target_on_sm120_with_deepgemm_warns():
    cfg = {"model_type": "deepseek_v3", "quantization_config": {"quant_method": "fp8"}}
    rep = check(facts("rtxpro6000_8x_pcie"), {}, ["--tp-size", "8"], target_config=cfg)
    assert one(rep, "env.deepgemm").severity == "warning"
    assert one(rep, "env.attn_backend").evidence["default"] == "triton"  # MLA from the config, not the path
    rep = check(facts("rtxpro6000_8x_pcie"), {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}, [], target_config=cfg)
    assert not rep.by_code("env.deepgemm")


def test_cuda_visible_devices_uses_torchs_view():
    fx = facts("rtxpro6000_8x_pcie")
    fx["env"] = {"CUDA_VISIBLE_DEVICES": "0,1"}
    fx["torch"]["devices"] = fx["torch"]["devices"][:2]
    assert len(gpu_list(fx)) == 2
    assert one(check(fx, {}, ["--tp-size", "8"]), "env.gpu_count").severity == "error"


def test_sglang_vars_checked_against_that_releases_source(tmp_path, monkeypatch):
    # a tiny stand-in for a cached release: srt/environ.py declares, another file references by name
    root = tmp_path / "sglang-src" / "9.9.9" / "sglang"
    (root / "srt").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "srt" / "environ.py").write_text(
        "class Envs:\n    SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN = EnvBool(False)\n"
    )
    (root / "srt" / "comm.py").write_text('X = os.getenv("SGLANG_SKIP_P2P_CHECK", "0")\n')
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    from kit.sglang.env_vars import release_vars, sglang_findings

    release_vars.cache_clear()
    env = {
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "on",
        "SGLANG_SKIP_P2P_CHECK": "1",
        "SGLANG_ENABLE_SPEC_V2": "1",
    }
    v = {f.evidence["var"]: f for f in sglang_findings(env, "9.9.9")}
    assert v["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"].severity == "warning"  # EnvBool rejects "on"
    assert (
        v["SGLANG_SKIP_P2P_CHECK"].severity == "info"
        and v["SGLANG_SKIP_P2P_CHECK"].evidence["declared"] == "referenced"
    )
    assert v["SGLANG_ENABLE_SPEC_V2"].severity == "warning" and "not read" in v["SGLANG_ENABLE_SPEC_V2"].title
    assert sglang_findings(env, "0.0.0-not-cached")[0].evidence.get("declared") is None  # unknown release: explain only
    release_vars.cache_clear()
