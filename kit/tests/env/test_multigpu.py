"""Multi-GPU rules (P2P, topology, custom all-reduce, IOMMU) on recorded machines, and the all-reduce smoke test.

The smoke test runs for real here with the gloo backend on 2 CPU processes (same worker code, same
killable child, same timeout path); the NCCL run needs >= 2 GPUs (`gpu` mark). The transport-warning
test feeds a constructed result because no NCCL log can be produced on this machine.

    python -m pytest kit/tests/test_multigpu.py -q
"""

import pytest

from kit.env.multigpu import (
    allreduce_findings,
    allreduce_smoke,
    custom_allreduce_findings,
    iommu_findings,
    multi_gpu_findings,
    p2p_findings,
    smoke_env,
    topology_findings,
)
from kit.tests.env_fixtures import facts


def codes(fs):
    return {f.code: f for f in fs}


def test_seed_machine_rules():
    fx = facts("rtxpro6000_8x_pcie")
    fs = codes(multi_gpu_findings(fx, 8, ["--disable-custom-all-reduce"]))
    assert fs["env.custom_allreduce"].severity == "info"
    assert fs["env.custom_allreduce"].evidence["full_nvlink"] is False
    assert fs["env.p2p"].severity == "info"
    assert fs["env.topology"].severity == "warning" and fs["env.topology"].evidence["pairs"] == {"NODE": 12, "SYS": 16}
    assert fs["env.iommu"].severity == "warning"
    # without the flag the finding tells how to silence SGLang's warning
    car = custom_allreduce_findings(fx, 8, [])[0]
    assert "--disable-custom-all-reduce" in car.fix


def test_two_pcie_gpus_without_p2p_need_the_flag():
    fx = facts("rtxpro6000_8x_pcie")
    fx["torch"]["p2p"] = [[True, False], [False, True]]
    f = custom_allreduce_findings(fx, 2, [])
    assert f and f[0].severity == "warning" and "peer access" in f[0].title
    assert custom_allreduce_findings(fx, 2, ["--disable-custom-all-reduce"]) == []


def test_partial_p2p_and_geforce_note():
    fx = facts("rtxpro6000_8x_pcie")
    fx["torch"]["p2p"][0][5] = fx["torch"]["p2p"][5][0] = False
    fx["nvml"]["p2p"]["read"][0][5] = "DISABLED_BY_REGKEY"
    f = p2p_findings(fx)[0]
    assert f.severity == "warning" and f.evidence["pairs_without_p2p"] == [(0, 5)]
    assert f.evidence["nvml_read_write"] == {"read": ["DISABLED_BY_REGKEY"]}
    for d in fx["nvml"]["devices"]:
        d["name"] = "NVIDIA GeForce RTX 5090"
    assert "GeForce" in p2p_findings(fx)[0].title


def test_nvlink_and_single_gpu_machines():
    b = codes(multi_gpu_findings(facts("b200_8x_nvlink"), 8, []))
    assert "env.custom_allreduce" not in b and b["env.topology"].severity == "info" and "env.iommu" not in b
    assert multi_gpu_findings(facts("h200_1x"), 1, []) == []
    assert multi_gpu_findings(facts("cpu_only"), None, []) == []


def test_two_h200_nvlink_recorded():
    # recorded on a 2x H200 (NV18): NVML says read UNKNOWN / write OK while NCCL ran P2P/IPC on every channel
    fx = facts("h200_2x_nvlink")
    f = codes(multi_gpu_findings(fx, 2, []))
    assert f["env.p2p"].severity == "info" and f["env.topology"].severity == "info"
    assert "env.custom_allreduce" not in f  # on, as SGLang 0.5.17 logged ("All Reduce config: ... multicast = False")
    off = custom_allreduce_findings(fx, 2, ["--disable-custom-all-reduce"])
    assert off and off[0].severity == "warning"
    fx["nvml"]["p2p"]["read"][0][1] = "NOT_SUPPORTED"
    assert p2p_findings(fx)[0].severity == "warning"


def test_iommu_passthrough_is_fine():
    fx = facts("rtxpro6000_8x_pcie")
    fx["system"]["cmdline"] += " amd_iommu=on iommu=pt"
    assert iommu_findings(fx)[0].severity == "info"
    assert topology_findings(facts("cpu_only")) == []


def test_smoke_env_keeps_multicast_off():
    env = smoke_env({"NCCL_PROTO": "LL", "NCCL_NVLS_ENABLE": "1", "SGLANG_X": "1", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["NCCL_PROTO"] == "LL" and env["NCCL_DEBUG"] == "INFO"
    assert "SGLANG_X" not in env and env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_allreduce_smoke_gloo_runs_and_checks_sums():
    res = allreduce_smoke(
        nprocs=2, backend="gloo", sizes=(4096, 1 << 20), iters=2, timeout_s=90, launch_env={"NCCL_PROTO": "LL"}
    )
    assert res["status"] == "ok", res.get("log_tail")
    assert [r["bytes"] for r in res["sizes"]] == [4096, 1 << 20]
    assert all(r["ok"] and r["busbw_gbs"] > 0 for r in res["sizes"])
    assert res["env_applied"]["NCCL_NVLS_ENABLE"] == "0"
    f = allreduce_findings(res)
    assert len(f) == 1 and f[0].code == "env.allreduce" and f[0].severity == "info" and "sums exact" in f[0].title


def test_allreduce_smoke_timeout_is_killed_and_reported():
    res = allreduce_smoke(nprocs=2, backend="gloo", timeout_s=0.5)
    assert res["status"] == "timeout" and res["elapsed_s"] < 10
    f = allreduce_findings(res)[0]
    assert f.severity == "error" and "hang" in f.title and "NCCL_P2P_DISABLE=1" in f.fix


def test_allreduce_skipped_below_two_gpus():
    res = allreduce_smoke(nprocs=1)
    assert res["status"] == "skipped"
    assert allreduce_findings(res)[0].severity == "info"


def test_shm_only_transport_warns():
    res = {"status": "ok", "nprocs": 8, "backend": "nccl", "sizes": [], "transports": {"P2P": 0, "SHM": 16, "NET": 0}}
    assert any(f.code == "env.allreduce_transport" for f in allreduce_findings(res))


def _cuda_count():
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:
        return 0


@pytest.mark.gpu
@pytest.mark.skipif(_cuda_count() < 2, reason="needs 2 CUDA GPUs")
def test_nccl_allreduce_on_gpus():
    res = allreduce_smoke(nprocs=2, backend="nccl", timeout_s=180)
    assert res["status"] == "ok", res.get("log_tail")
    assert all(r["ok"] for r in res["sizes"])
