"""Several GPUs on one host: P2P matrix, topology, SGLang's custom all-reduce, and an NCCL all-reduce smoke test.

Why: on PCIe-only rigs (8x RTX PRO 6000: NODE/SYS, no NVLink) tensor parallelism lives or dies by NCCL's
transport; P2P through an IOMMU/ACS-enabled root complex hangs the first all-reduce (GPUs at 100%, no progress).
The rules read the probe's facts; the smoke test runs the real thing with a time limit, so bad NCCL variables
show up as a failed or slow run, not a hang: one process per GPU (spawned in a child `python -m
kit.env.multigpu` in its own process group, killed whole on timeout), every result checked against the exact
sum, busbw = algbw * 2(n-1)/n as nccl-tests reports it, under the launch's NCCL_* and CUDA_VISIBLE_DEVICES,
multicast off and NCCL_DEBUG=INFO (the transport per channel). `backend="gloo"` runs it on CPU (the tests).

    python -m kit env --allreduce --launch "NCCL_P2P_LEVEL=SYS python -m sglang.launch_server ..."
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

from kit.env.machine import SMI_TO_NCCL_PATH, full_nvlink, gpu_list, topo_pairs
from kit.findings import Code, Finding

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "env: notebook 01"
CUSTOM_ALLREDUCE = Code(
    "env.custom_allreduce",
    SECTION,
    "warning / info",
    "SGLang's custom all-reduce on this host: off by itself on > 2 PCIe-only GPUs "
    "(`--disable-custom-all-reduce` only silences it); warning for 2 PCIe GPUs without P2P, or the flag "
    "on NVLink",
    "per the title",
)
ENV_P2P = Code(
    "env.p2p",
    SECTION,
    "warning / info",
    "CUDA P2P (torch `can_device_access_peer`, NVML READ/WRITE) between all GPUs; warning for pairs without it",
    "BIOS IOMMU/ACS, `iommu=pt`, `pci=noacs`",
)
TOPOLOGY = Code(
    "env.topology",
    SECTION,
    "warning / info",
    "`nvidia-smi topo -m` classes; warning when NODE/PHB/SYS pairs lie beyond NCCL's default P2P level (PXB)",
    "raise `NCCL_P2P_LEVEL` only after the smoke test passes",
)
ENV_IOMMU = Code(
    "env.iommu",
    SECTION,
    "warning",
    "IOMMU active (groups exposed, no `iommu=pt/off`) on a PCIe multi-GPU host: the known P2P hang cause",
    "`iommu=pt`, disable ACS, check `lspci -vvv \\| grep ACSCtl`",
)
ALLREDUCE = Code(
    "env.allreduce",
    SECTION,
    "error / info",
    "NCCL all-reduce smoke test (one process per GPU, exact sums, bus bandwidth) passed or was skipped (<"
    " 2 GPUs); error on timeout (hang), failure or wrong sums",
    "`NCCL_P2P_DISABLE=1` to confirm a P2P problem, fix ACS/IOMMU",
)
ALLREDUCE_TRANSPORT = Code(
    "env.allreduce_transport",
    SECTION,
    "warning",
    "NCCL used host shared memory for every channel, no P2P",
    "expected beyond the P2P level; else check P2P/IOMMU",
)

SIZES = (4 << 10, 1 << 20, 16 << 20, 64 << 20)
# NVLink multicast off in NCCL, torch symmetric memory and NVSHMEM: on shared multi-GPU hosts a program
# that uses it can take the host's GPUs out of service; every smoke test and launched server gets these
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SGLANG_CAR_WORLD_SIZES = (2, 4, 6, 8)  # custom_all_reduce.py _SUPPORTED_WORLD_SIZES


def custom_allreduce_findings(facts: dict, tp: int | None, argv: list[str]) -> list[Finding]:
    n = tp or len(gpu_list(facts))
    if n < 2:
        return []
    nvl, flag = full_nvlink(facts), "--disable-custom-all-reduce" in argv
    ev = {"world_size": n, "full_nvlink": nvl, "disable_custom_all_reduce": flag}
    if n not in SGLANG_CAR_WORLD_SIZES:
        title = f"SGLang custom all-reduce off: world size {n} not in {SGLANG_CAR_WORLD_SIZES}; NCCL carries it"
        return [CUSTOM_ALLREDUCE(title, evidence=ev, severity="info")]
    if nvl is False and n > 2:
        title = f"PCIe-only with {n} GPUs: SGLang disables custom all-reduce by itself (NCCL carries it)"
        title += "; --disable-custom-all-reduce only silences the warning" if flag else ""
        fix = "pass --disable-custom-all-reduce to silence 'Custom allreduce is disabled because it's not supported on "
        fix += "more than two PCIe-only GPUs'"
        return [CUSTOM_ALLREDUCE(title, evidence=ev, severity="info", fix="" if flag else fix)]
    p2p = (facts.get("torch") or {}).get("p2p")
    if nvl is False and n == 2 and p2p is not None and not all(all(r) for r in p2p) and not flag:
        title = "2 PCIe GPUs without P2P: SGLang's custom all-reduce needs peer access "
        title += "('peer access is not supported between these two devices')"
        return [CUSTOM_ALLREDUCE(title, evidence=ev, fix="pass --disable-custom-all-reduce")]
    if nvl and flag:
        title = "--disable-custom-all-reduce on an NVLink machine turns off SGLang's faster small-message all-reduce"
        return [CUSTOM_ALLREDUCE(title, evidence=ev, fix="drop the flag unless it was added to work around a bug")]
    return []


def p2p_findings(facts: dict) -> list[Finding]:
    t = (facts.get("torch") or {}).get("p2p")
    nv = (facts.get("nvml") or {}).get("p2p") or {}
    if not t and not nv:
        return []
    bad = [(i, j) for i, j in itertools.combinations(range(len(t or [])), 2) if not (t[i][j] and t[j][i])]
    # NVML answers UNKNOWN for some capabilities over NVLink (H200: read UNKNOWN, write OK, while NCCL runs
    # P2P/IPC on every channel): only a definite status (NOT_SUPPORTED, DISABLED_BY_REGKEY, ...) is a negative
    nv_bad = {
        cap: sorted({c for row in nv[cap] for c in row} - {"X", "OK", "UNKNOWN"})
        for cap in ("read", "write")
        if cap in nv
    }
    nv_bad = {k: v for k, v in nv_bad.items() if v}
    n = len(t or nv.get("read") or [])
    ev = {"pairs_without_p2p": bad[:16], "n_pairs_without": len(bad), "nvml_read_write": nv_bad or "OK"}
    if not bad and not nv_bad:
        return [ENV_P2P(f"CUDA P2P available between all {n} GPUs", evidence=ev, severity="info")]
    geforce = any("GeForce" in (d["name"] or "") for d in gpu_list(facts))
    title = f"CUDA P2P missing for {len(bad) or 'some'} GPU pairs; NCCL uses host shared memory there"
    title += " (expected on GeForce with the stock driver)" if geforce else ""
    fix = "check BIOS IOMMU/ACS (iommu=pt or off, pci=noacs / setpci ECAP_ACS+6.w=0000); NVML status "
    return [ENV_P2P(title, evidence=ev, fix=fix + "DISABLED_BY_REGKEY points at driver registry keys")]


def topology_findings(facts: dict) -> list[Finding]:
    pairs = topo_pairs(facts)
    if not pairs:
        return []
    counts = {k: len(v) for k, v in pairs.items()}
    far = ", ".join(f"{n} {k}" for k, n in counts.items() if SMI_TO_NCCL_PATH.get(k) in ("PHB", "SYS"))
    if not far:
        kind = "NVLink" if set(counts) == {"NV"} else "PCIe switch / NVLink"
        title = f"topology: every GPU pair is {kind}-connected; NCCL's default P2P level covers it"
        return [TOPOLOGY(title, evidence={"pairs": counts}, severity="info")]
    title = (
        f"topology: {far} GPU pairs lie beyond NCCL's default P2P level (PXB), so NCCL uses host shared memory there"
    )
    fix = "leave it (correct, slower) or raise NCCL_P2P_LEVEL to PHB/SYS only after the all-reduce smoke test passes "
    return [TOPOLOGY(title, evidence={"pairs": counts}, fix=fix + "under it and is faster")]


def iommu_findings(facts: dict) -> list[Finding]:
    if len(gpu_list(facts)) < 2 or full_nvlink(facts):
        return []
    s = facts.get("system") or {}
    flags = re.findall(r"\b(?:intel_iommu|amd_iommu|iommu|pci)=\S+", s.get("cmdline") or "")
    ev = {"cmdline_flags": flags, "iommu_groups": s.get("iommu_groups")}
    if any(f in ("iommu=pt", "iommu=off", "intel_iommu=off", "amd_iommu=off") for f in flags):
        title = "IOMMU passthrough/off on the kernel command line (good for PCIe P2P)"
        return [ENV_IOMMU(title, evidence=ev, severity="info")]
    if s.get("iommu_groups"):
        title = f"IOMMU active ({s['iommu_groups']} groups) on a PCIe multi-GPU host: P2P through it is the known NCCL hang cause"
        fix = "kernel iommu=pt (or off); disable ACS on root and switch ports (BIOS, pci=noacs or setpci ... ECAP_ACS+6.w=0000); "
        return [ENV_IOMMU(title, evidence=ev, fix=fix + "check with `sudo lspci -vvv | grep ACSCtl`")]
    title = "no IOMMU groups exposed; ACS state needs root (`sudo lspci -vvv | grep ACSCtl`)"
    return [ENV_IOMMU(title, evidence=ev, severity="info")]


def multi_gpu_findings(facts: dict, tp: int | None = None, argv: list[str] | None = None) -> list[Finding]:
    return (
        custom_allreduce_findings(facts, tp, argv or [])
        + p2p_findings(facts)
        + topology_findings(facts)
        + iommu_findings(facts)
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, backend: str, sizes: list[int], iters: int) -> None:
    import torch
    import torch.distributed as dist

    dev = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend, rank=rank, world_size=world, init_method=f"tcp://127.0.0.1:{port}")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    expect = world * (world + 1) / 2
    rows = []
    for nbytes in sizes:
        x = torch.full((max(nbytes // 4, 1),), float(rank + 1), dtype=torch.float32, device=dev)
        dist.all_reduce(x)
        sync()
        ok = torch.tensor([int(bool(torch.all(x == expect)))], device=dev)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)  # every rank must have the exact sum
        y = torch.ones_like(x)
        sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(y)
        sync()
        dt = (time.perf_counter() - t0) / iters
        algbw = nbytes / dt / 1e9
        row = {"bytes": nbytes, "ok": bool(ok.item()), "time_us": round(dt * 1e6, 1), "algbw_gbs": round(algbw, 6)}
        rows.append(dict(row, busbw_gbs=round(algbw * 2 * (world - 1) / world, 6)))
    if rank == 0:
        print("KIT_ALLREDUCE " + json.dumps({"world": world, "backend": backend, "sizes": rows}), flush=True)
    dist.destroy_process_group()


def smoke_env(launch_env: dict[str, str] | None = None) -> dict[str, str]:
    """The variables the smoke test applies on top of os.environ: the launch's NCCL_*/CUDA_VISIBLE_DEVICES,
    NCCL_DEBUG=INFO (to read the transport) and MULTICAST_OFF (NVLink multicast stays off)."""
    env = {k: v for k, v in (launch_env or {}).items() if k.startswith("NCCL_") or k == "CUDA_VISIBLE_DEVICES"}
    env.update(NCCL_DEBUG="INFO", **MULTICAST_OFF)
    return env


def allreduce_smoke(
    nprocs: int | None = None,
    launch_env: dict[str, str] | None = None,
    sizes: tuple[int, ...] = SIZES,
    iters: int = 5,
    timeout_s: float = 120.0,
    backend: str = "nccl",
) -> dict[str, Any]:
    """Run the all-reduce in a killable child; returns {"status": ok|failed|timeout|skipped, ...}."""
    applied = smoke_env(launch_env)
    if nprocs is None:
        from kit.env.machine import probe_machine

        nprocs = len(gpu_list(probe_machine(timeout=min(timeout_s, 60))))
    if nprocs < 2:
        return {"status": "skipped", "nprocs": nprocs, "reason": f"{nprocs} GPU(s): needs 2 or more"}
    env = {**os.environ, **applied}
    cmd = [sys.executable, "-m", "kit.env.multigpu", "--nprocs", str(nprocs), "--backend", backend]
    cmd += ["--iters", str(iters), "--port", str(_free_port()), "--sizes", *map(str, sizes)]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: NCCL INFO output must never block the ranks
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the spawned ranks share the child's process group
            proc.wait()
            rc, status = None, "timeout"
        log.seek(0)
        text = log.read()
    res: dict[str, Any] = {"status": status, "nprocs": nprocs, "backend": backend, "returncode": rc}
    res.update(
        elapsed_s=round(time.perf_counter() - t0, 2), timeout_s=timeout_s, env_applied=applied, log_tail=text[-2000:]
    )
    m = re.search(r"^KIT_ALLREDUCE (.*)$", text, re.M)
    if m:
        res.update(json.loads(m.group(1)))
    res["transports"] = {t: len(re.findall(rf"via {t}\b", text)) for t in ("P2P", "SHM", "NET")}
    if status == "ok" and not all(r["ok"] for r in res.get("sizes", [])):
        res["status"] = "wrong_sum"
    return res


def smoke_if_possible(
    facts: dict, launch_env: dict[str, str] | None = None, run: bool = True, live: bool = True, timeout_s: float = 120.0
) -> dict[str, Any]:
    """The smoke test on this machine's GPUs, or a 'skipped' result saying why (what notebook 01 shows)."""
    n = len(gpu_list(facts))
    if n < 2:
        return {"status": "skipped", "nprocs": n, "reason": f"{n} GPU(s) — single GPU / no GPU: skipped"}
    if not live:
        return {"status": "skipped", "nprocs": n, "reason": "recorded facts of another machine: run it there"}
    if not run:
        return {"status": "skipped", "nprocs": n, "reason": "not requested (allreduce=False)"}
    return allreduce_smoke(nprocs=n, launch_env=launch_env, timeout_s=timeout_s)


def allreduce_findings(res: dict[str, Any]) -> list[Finding]:
    st = res.get("status")
    ev = {k: res.get(k) for k in ("nprocs", "backend", "elapsed_s", "transports", "env_applied") if k in res}
    if st == "skipped":
        return [ALLREDUCE(f"all-reduce smoke test skipped: {res.get('reason')}", evidence=ev, severity="info")]
    if st == "timeout":
        title = f"all-reduce did not finish in {res.get('timeout_s'):.0f} s: a hang (the IOMMU/ACS P2P symptom on PCIe "
        fix = "retry with NCCL_P2P_DISABLE=1 to confirm a P2P problem, then fix ACS/IOMMU; a GPU reset may be needed after a hang"
        return [ALLREDUCE(title + "rigs: GPUs busy, no progress)", evidence=ev, fix=fix)]
    if st in ("failed", "wrong_sum"):
        tail = (res.get("log_tail") or "").strip().splitlines()[-3:]
        what = "returned wrong sums" if st == "wrong_sum" else f"failed (exit {res.get('returncode')})"
        fix = "read the NCCL WARN lines; unset the NCCL_* variables one by one to find the culprit"
        return [ALLREDUCE(f"all-reduce smoke test {what}", evidence={**ev, "log_tail": tail}, fix=fix)]
    rows = res.get("sizes", [])
    bw = ", ".join(f"{r['bytes'] >> 10} KiB {r['busbw_gbs']:.3g} GB/s" for r in rows)
    title = f"all-reduce OK on {res.get('nprocs')} ranks ({res.get('backend')}), sums exact; busbw {bw}"
    out = [ALLREDUCE(title, evidence={**ev, "sizes": rows}, severity="info")]
    tr = res.get("transports") or {}
    if res.get("backend") == "nccl" and tr.get("SHM") and not tr.get("P2P"):
        title = "NCCL chose host shared memory (SHM) for every channel, no P2P"
        fix = "expected beyond the default P2P level (NODE/SYS pairs) or with NCCL_P2P_DISABLE=1; otherwise check P2P/IOMMU"
        out.append(ALLREDUCE_TRANSPORT(title, evidence={"transports": tr}, fix=fix))
    return out


def _main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="worker side of allreduce_smoke (one process per rank)")
    p.add_argument("--nprocs", type=int, required=True)
    p.add_argument("--backend", default="nccl")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    a = p.parse_args(argv)
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(a.nprocs, a.port, a.backend, a.sizes, a.iters), nprocs=a.nprocs, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
