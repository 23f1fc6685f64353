"""Probe the machine: GPUs, driver, CUDA, torch, NCCL, packages, topology — facts only, no verdicts.

The facts are one JSON-able dict, so a run on the GPU host can be recorded (`python -m kit env --record
facts.json`) and judged anywhere; the rules are tested on recorded machines (kit/tests/facts/). Each part is
wrapped so a missing tool or field becomes `None` plus an entry in `facts["errors"]`, never a crash:

* torch, in a child process with a timeout (CUDA init can fail, wedge or warn): arch list, CUDA build, NCCL
  version, devices, the P2P matrix and a one-element smoke test per GPU;
* NVML, also in a child: driver, driver CUDA, per-GPU facts and the P2P status matrices;
* `nvidia-smi topo -m` and `--query-gpu`; package versions (`importlib.metadata`, nothing imported);
  /proc/cmdline, IOMMU groups, /dev/shm, the CPU; the NCCL_* / SGLANG_* / CUDA_* environment.

The children run concurrently: `python -m kit env` costs about one torch import (~2 s).

    python -m kit.env.machine            # print this machine's facts as JSON
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from typing import Any

SCHEMA = "kit.env.facts/1"

# distributions whose versions the rules look at, in this order
PACKAGES = tuple(
    """torch triton sglang sgl-kernel sglang-kernel flashinfer-python flashinfer flash-attn flash_attn_3 flash-attn-3
    flash-attn-4 nvidia-cutlass-dsl transformers safetensors nvidia-nccl-cu12 nvidia-nccl-cu13 nvidia-ml-py pynvml
    vllm speculators specforge accelerate packaging""".split()
)
ENV_PREFIXES = ("NCCL_", "SGLANG_", "CUDA_", "TORCH_", "FLASH_ATTN", "FLASHINFER_", "NVIDIA_", "PYTORCH_")
_P2P = "OK CHIPSET_NOT_SUPPORTED GPU_NOT_SUPPORTED IOH_TOPOLOGY_NOT_SUPPORTED DISABLED_BY_REGKEY NOT_SUPPORTED UNKNOWN"
NVML_P2P_STATUS = dict(enumerate(_P2P.split()))  # nvmlGpuP2PStatus_t, 0..6


# children: run with `python -m kit.env.machine torch|nvml`, print one JSON document
def _torch_child() -> dict[str, Any]:
    import warnings

    out: dict[str, Any] = {"ok": False, "error": None, "warnings": []}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import torch
        except Exception as e:  # not installed or broken install
            out["error"] = f"import torch: {type(e).__name__}: {e}"
            return out
        out.update(version=torch.__version__, cuda=torch.version.cuda, hip=getattr(torch.version, "hip", None))
        out.update(arch_list=[], devices=[], smoke=[], nccl=None, p2p=None, cuda_available=False, device_count=0)
        try:
            out["arch_list"] = list(torch.cuda.get_arch_list())
            out["cuda_available"] = bool(torch.cuda.is_available())
            out["device_count"] = n = torch.cuda.device_count() if out["cuda_available"] else 0
            if n:
                torch.cuda.init()  # fires torch's lazy _check_capability/_check_cubins warnings here
            for i in range(n):
                p = torch.cuda.get_device_properties(i)
                d = {"index": i, "name": p.name, "cc": list(torch.cuda.get_device_capability(i))}
                out["devices"].append(
                    dict(d, memory_bytes=int(p.total_memory), sm_count=getattr(p, "multi_processor_count", None))
                )
            if n:
                try:
                    v = torch.cuda.nccl.version()
                    out["nccl"] = ".".join(str(x) for x in (v if isinstance(v, tuple) else (v,))[:3])
                except Exception as e:
                    out["nccl_error"] = f"{type(e).__name__}: {e}"
            if n > 1:
                out["p2p"] = [
                    [i == j or bool(torch.cuda.can_device_access_peer(i, j)) for j in range(n)] for i in range(n)
                ]
            for i in range(n):
                try:
                    ok = (torch.ones(1, device=f"cuda:{i}") + 1).item() == 2.0
                    out["smoke"].append({"index": i, "ok": bool(ok), "error": None})
                except Exception as e:  # "no kernel image is available for execution on the device"
                    out["smoke"].append({"index": i, "ok": False, "error": f"{type(e).__name__}: {e}"[:500]})
            out["flash_attn"] = _flash_attn_smoke(torch) if n else None
            out["ok"] = True
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {e}"[:500]
    out["warnings"] = [str(w.message)[:800] for w in caught]
    return out


def _flash_attn_smoke(torch) -> dict[str, Any] | None:
    """FA2 installed and built for this GPU? Import it and run one tiny fp16 call on cuda:0."""
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        from flash_attn import flash_attn_func

        q = torch.randn(1, 8, 2, 64, device="cuda:0", dtype=torch.float16)
        flash_attn_func(q, q, q)
        torch.cuda.synchronize()
        return {"ok": True, "error": None}
    except Exception as e:  # ImportError of the CUDA extension, "no kernel image", unsupported arch
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:300]}


def device_memory_gib(index: int = 0) -> float | None:
    """Total memory of GPU `index` in GiB, from NVML; None where there is no driver or no such GPU."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library
        return None
    try:
        return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).total / 2**30
    except Exception:  # no such GPU
        return None
    finally:
        pynvml.nvmlShutdown()


def _nvml_child() -> dict[str, Any]:
    out: dict[str, Any] = {"ok": False, "error": None, "driver": None, "cuda_driver": None, "devices": [], "p2p": None}
    step = "import pynvml"
    try:
        import pynvml

        step = "nvmlInit"
        pynvml.nvmlInit()
    except Exception as e:
        out["error"] = f"{step}: {type(e).__name__}: {e}"
        return out

    def _s(x):
        return x.decode() if isinstance(x, bytes) else x

    def _try(fn, *a):
        try:
            return fn(*a)
        except Exception:
            return None

    out["driver"] = _s(_try(pynvml.nvmlSystemGetDriverVersion))
    cv = _try(pynvml.nvmlSystemGetCudaDriverVersion_v2) or _try(pynvml.nvmlSystemGetCudaDriverVersion)
    out["cuda_driver"] = f"{cv // 1000}.{cv % 1000 // 10}" if cv else None
    n = _try(pynvml.nvmlDeviceGetCount) or 0
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
    max_links = getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)
    for i, h in enumerate(handles):
        mem = _try(pynvml.nvmlDeviceGetMemoryInfo, h)
        plim = _try(pynvml.nvmlDeviceGetPowerManagementLimit, h)
        pci = _try(pynvml.nvmlDeviceGetPciInfo, h)
        links = sum(_try(pynvml.nvmlDeviceGetNvLinkState, h, k) == 1 for k in range(max_links))
        cc = _try(pynvml.nvmlDeviceGetCudaComputeCapability, h)
        d = {"index": i, "name": _s(_try(pynvml.nvmlDeviceGetName, h)), "cc": list(cc) if cc else None}
        d.update(memory_bytes=int(mem.total) if mem else None, power_limit_w=plim / 1000 if plim else None)
        out["devices"].append(dict(d, pci_bus_id=_s(pci.busId) if pci else None, nvlinks_active=links))

    def p2p(i: int, j: int, idx: int) -> str:
        status = _try(pynvml.nvmlDeviceGetP2PStatus, handles[i], handles[j], idx) if i != j else None
        return "X" if i == j else NVML_P2P_STATUS.get(status, "UNKNOWN")

    if n > 1:
        out["p2p"] = {}
        for key in ("nvlink", "read", "write"):
            idx = getattr(pynvml, f"NVML_P2P_CAPS_INDEX_{key.upper()}", None)
            if idx is not None:
                out["p2p"][key] = [[p2p(i, j, idx) for j in range(n)] for i in range(n)]
    out["ok"] = True
    _try(pynvml.nvmlShutdown)
    return out


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topo(text: str) -> dict[str, Any] | None:
    """`nvidia-smi topo -m` -> {"gpus": ["GPU0", ...], "matrix": [[cell]], "numa": [..]}; None if no GPU rows."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    # the header is the first line naming GPU0 that is not itself a row (rows start at column 0)
    header = next((ln for ln in lines if re.search(r"\bGPU0\b", ln) and not re.match(r"^GPU\d+\s", ln)), None)
    if header is None:
        return None
    cols = [c.strip() for c in (header.split("\t") if "\t" in header else re.split(r"\s{2,}", header)) if c.strip()]
    gpus = [c for c in cols if re.fullmatch(r"GPU\d+", c)]
    numa_col = cols.index("NUMA Affinity") if "NUMA Affinity" in cols else None
    matrix, numa = [], []
    for ln in lines:
        m = re.match(r"^(GPU\d+)\s+(.*)$", ln)
        if not m or m.group(1) not in gpus or len(matrix) >= len(gpus):
            continue
        rest = m.group(2)
        cells = [c.strip() for c in rest.split("\t")] if "\t" in rest else rest.split()
        cells = [c for c in cells if c != ""]
        matrix.append(cells[: len(gpus)])
        numa.append(cells[numa_col] if numa_col is not None and len(cells) > numa_col else None)
    if not matrix or any(len(r) != len(gpus) for r in matrix):
        return None
    return {"gpus": gpus, "matrix": matrix, "numa": numa}


SMI_QUERY = "index,name,compute_cap,memory.total,power.limit,driver_version,pci.bus_id"


def parse_smi_query(text: str) -> list[dict[str, Any]]:
    """`nvidia-smi --query-gpu=SMI_QUERY --format=csv,noheader,nounits` -> one dict per GPU."""

    def num(x):
        try:
            return float(x)
        except ValueError:
            return None

    rows = []
    for f in ([x.strip() for x in ln.split(",")] for ln in text.strip().splitlines()):
        if len(f) >= 7 and f[0].isdigit():
            cc = [int(p) for p in f[2].split(".")] if re.fullmatch(r"\d+\.\d+", f[2]) else None
            mem = None if num(f[3]) is None else int(num(f[3]) * 2**20)
            row = {"index": int(f[0]), "name": f[1], "cc": cc, "memory_bytes": mem, "power_limit_w": num(f[4])}
            rows.append(dict(row, driver=f[5], pci_bus_id=f[6]))
    return rows


def _child(part: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "kit.env.machine", part]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _collect(proc: subprocess.Popen, timeout: float, name: str, errors: dict) -> dict | None:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, 9)
        proc.communicate()
        errors[name] = f"timed out after {timeout:.0f} s (a wedged GPU or driver?)"
        return None
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        errors[name] = f"child exited {proc.returncode}: {(err or out).strip()[-300:]}"
        return None


def _run(cmd: list[str], timeout: float) -> tuple[str | None, str | None]:
    if shutil.which(cmd[0]) is None:
        return None, f"{cmd[0]} not found"
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (subprocess.TimeoutExpired, OSError) as e:
        return None, f"{' '.join(cmd)}: {type(e).__name__}"
    if r.returncode != 0:
        return None, f"{' '.join(cmd)}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[-200:]}"
    return r.stdout, None


def package_versions() -> tuple[dict[str, str | None], dict[str, list[str]]]:
    """Installed versions of PACKAGES (None = absent) and sglang's declared requirements; one scan."""
    import importlib.metadata as md

    found: dict[str, Any] = {}
    for dist in md.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        found.setdefault(name, dist)
    versions = {p: getattr(found.get(p.lower().replace("_", "-")), "version", None) for p in PACKAGES}
    requires = {
        p: [r for r in (found[p].requires or []) if "extra ==" not in r]
        for p in ("sglang", "sgl-kernel", "sglang-kernel", "flashinfer-python")
        if p in found
    }
    return versions, requires


def _system(errors: dict) -> dict[str, Any]:
    s: dict[str, Any] = dict.fromkeys(("cmdline", "iommu_groups", "shm_bytes", "cpu_vendor", "cpu_model"))
    try:
        s["cmdline"] = open("/proc/cmdline").read().strip()
    except OSError as e:
        errors["cmdline"] = str(e)
    with contextlib.suppress(OSError):  # absent directory: no IOMMU groups exposed (or not Linux)
        s["iommu_groups"] = len(os.listdir("/sys/kernel/iommu_groups"))
    try:
        s["shm_bytes"] = shutil.disk_usage("/dev/shm").total
    except OSError as e:
        errors["shm"] = str(e)
    with contextlib.suppress(OSError):
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("vendor_id") and not s["cpu_vendor"]:
                s["cpu_vendor"] = ln.split(":", 1)[1].strip()
            elif ln.startswith("model name") and not s["cpu_model"]:
                s["cpu_model"] = ln.split(":", 1)[1].strip()
    return s


def probe_machine(timeout: float = 60.0, label: str | None = None) -> dict[str, Any]:
    """Read this machine. Never raises for a missing GPU/tool: unknowns are None, reasons in 'errors'."""
    t0 = time.perf_counter()
    errors: dict[str, str] = {}
    kids = {"torch": _child("torch"), "nvml": _child("nvml")}
    topo_text, errors["nvidia-smi topo"] = _run(["nvidia-smi", "topo", "-m"], timeout)
    cmd = ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv,noheader,nounits"]
    query_text, errors["nvidia-smi query"] = _run(cmd, timeout)
    errors = {k: v for k, v in errors.items() if v}
    versions, requires = package_versions()
    system = _system(errors)
    torch_f = _collect(kids["torch"], timeout, "torch", errors)
    nvml_f = _collect(kids["nvml"], timeout, "nvml", errors)
    errors.update((name, f["error"]) for name, f in (("torch", torch_f), ("nvml", nvml_f)) if f and f.get("error"))
    return {
        "schema": SCHEMA,
        "label": label or platform.node(),
        "probed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {
            "os": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "cpu_vendor": system.pop("cpu_vendor"),
            "cpu_model": system.pop("cpu_model"),
        },
        "packages": versions,
        "requires": requires,
        "torch": torch_f,
        "nvml": nvml_f,
        "smi": {
            "gpus": parse_smi_query(query_text) if query_text else [],
            "topo": parse_topo(topo_text) if topo_text else None,
            "topo_raw": topo_text,
        },
        "system": system,
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "errors": errors,
        "probe_s": round(time.perf_counter() - t0, 2),
    }


def write_facts(facts: dict, path) -> None:
    """Record facts as JSON (temp file then rename: no half-written recording on failure)."""
    path = str(path)
    with open(path + ".tmp", "w") as fh:
        json.dump(facts, fh, indent=1, default=str)
    os.replace(path + ".tmp", path)


# reading facts (the rules' view; works on live and recorded facts alike)
def gpu_list(facts: dict) -> list[dict[str, Any]]:
    """One dict per GPU: index, name, cc (tuple), memory_mib, power_limit_w — NVML first, then torch, then smi."""
    nv = (facts.get("nvml") or {}).get("devices") or []
    tv = (facts.get("torch") or {}).get("devices") or []
    sv = (facts.get("smi") or {}).get("gpus") or []
    # NVML and nvidia-smi ignore CUDA_VISIBLE_DEVICES; when it is set, torch's view is what a server gets
    masked = bool(tv) and "CUDA_VISIBLE_DEVICES" in (facts.get("env") or {})
    base = tv if masked else (nv or tv or sv)
    out = []
    for i, d in enumerate(base):
        t = tv[i] if i < len(tv) and not masked else {}
        s = sv[i] if i < len(sv) and not masked else {}
        cc, name, mem = (d.get(k) or t.get(k) or s.get(k) for k in ("cc", "name", "memory_bytes"))
        g = {"index": d.get("index", i), "name": name, "cc": tuple(cc) if cc else None}
        g.update(
            memory_mib=round(mem / 2**20) if mem else None,
            power_limit_w=d.get("power_limit_w") or s.get("power_limit_w"),
        )
        out.append(dict(g, nvlinks_active=d.get("nvlinks_active")))
    return out


def driver_version(facts: dict) -> str | None:
    nv = facts.get("nvml") or {}
    sv = (facts.get("smi") or {}).get("gpus") or []
    return nv.get("driver") or (sv[0].get("driver") if sv else None)


def nccl_version(facts: dict) -> str | None:
    """torch's NCCL, else the nvidia-nccl wheel's version."""
    pk = facts.get("packages") or {}
    return (facts.get("torch") or {}).get("nccl") or pk.get("nvidia-nccl-cu13") or pk.get("nvidia-nccl-cu12")


# nvidia-smi topo cells -> the NCCL path type they correspond to (NCCL's own names)
SMI_TO_NCCL_PATH = {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}


def topo_pairs(facts: dict) -> dict[str, list[tuple[int, int]]] | None:
    """GPU pairs (i<j) grouped by `nvidia-smi topo -m` cell class: 'NV' (any NV#), PIX, PXB, PHB, NODE, SYS."""
    topo = (facts.get("smi") or {}).get("topo")
    if not topo:
        return None
    m = topo["matrix"]
    pairs: dict[str, list[tuple[int, int]]] = {}
    for i, j in itertools.combinations(range(len(m)), 2):
        pairs.setdefault("NV" if m[i][j].startswith("NV") else m[i][j], []).append((i, j))
    return pairs


def full_nvlink(facts: dict) -> bool | None:
    """SGLang's test (custom_all_reduce_utils.is_full_nvlink): NVML NVLINK P2P status OK for every pair."""
    p2p = ((facts.get("nvml") or {}).get("p2p") or {}).get("nvlink")
    if p2p:
        return all(c in ("X", "OK") for row in p2p for c in row)
    pairs = topo_pairs(facts)
    return set(pairs) == {"NV"} if pairs else None


def _main(argv: list[str]) -> int:
    child = {"torch": _torch_child, "nvml": _nvml_child}.get(argv[0] if argv else "")
    print(json.dumps(child()) if child else json.dumps(probe_machine(), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
