"""What else the machine did while a benchmark measured: load, CPU steal, GPU clocks, other GPU processes.

A speedup is a ratio of two clocks; work the benchmark did not start slows whichever arm it lands on. `Watch`
samples the host every half second in a thread while `kit bench` runs (into the run's `machine.jsonl`), and
`by_label` pools the samples inside each arm's request windows: `others_cores` (cores busy outside the
benchmark's process tree: /proc/stat busy time minus the tree's CPU time), `load1`, `steal_pct` (CPU time
the hypervisor gave other guests) and, on NVIDIA GPUs (NVML), each SM clock against its maximum and the
GPU processes that are not the benchmark's. Linux reads; elsewhere the CPU fields are None.

`busy_reason(summary)` names what was enough to disturb a timing, else None; `kit.measure.metrics.inconclusive`
then withholds the speedup headline (other work changes the arms' relative costs, which pairing cannot cancel).

    with Watch(out_dir / "machine.jsonl"):
        ...measure...
    per_label = by_label(read_samples(path), records)
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

INTERVAL_S = 0.5
# what counts as a disturbed run: other work using a quarter of the host's cores on average (at least half a
# core: one busy core on a 2-core laptop is a disturbed run, on a 16-core GPU host it is not), 2% steal, SM
# clocks under 90% of their maximum, or any other process on the GPU
OTHERS_SHARE, OTHERS_MIN, STEAL_PCT, CLOCK_SHARE = 0.25, 0.5, 2.0, 0.9


def _cpu_jiffies() -> tuple[int, int, int] | None:
    """(busy, steal, total) jiffies of all CPUs since boot, from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    total = sum(v[:8])  # guest time is already counted in user
    return total - idle, v[7] if len(v) > 7 else 0, total


class _Gpus:
    """NVML handles, or nothing where there is no NVIDIA driver."""

    def __init__(self):
        self.nvml, self.handles = None, []
        with contextlib.suppress(Exception):  # no driver, no library: no GPU facts
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    def read(self, tree: set[int]) -> dict[str, Any]:
        if not self.handles:
            return {}
        n = self.nvml
        clock, clock_max, others = [], [], set()
        for h in self.handles:
            clock.append(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
            clock_max.append(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
            procs = n.nvmlDeviceGetComputeRunningProcesses(h) + n.nvmlDeviceGetGraphicsRunningProcesses(h)
            others |= {p.pid for p in procs if p.pid not in tree}
        return {"sm_clock_mhz": clock, "sm_clock_max_mhz": clock_max, "gpu_other_procs": len(others)}

    def close(self) -> None:
        if self.handles:
            self.nvml.nvmlShutdown()


class Watch:
    """Samples the host every `interval_s` in a daemon thread from `__enter__` to `__exit__` into `samples`, and
    appends each as one JSON line to `path` when given (`t` is the sample's end, `dt` the span it covers)."""

    def __init__(self, path: str | os.PathLike | None = None, interval_s: float = INTERVAL_S):
        self.path, self.interval_s = Path(path) if path is not None else None, interval_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kit-machine-watch", daemon=True)

    def _tree(self):
        import psutil

        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
        cpu = 0.0
        for p in procs:
            with contextlib.suppress(psutil.Error):  # ended between the listing and the read
                cpu += sum(p.cpu_times()[:2])  # user + system
        return {p.pid for p in procs}, cpu

    def _loop(self) -> None:
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        gpus = _Gpus()
        prev_t, prev_cpu, (_, prev_tree_cpu) = time.time(), _cpu_jiffies(), self._tree()
        try:
            stopped = False
            while not stopped:  # the last sample, at the stop, covers the tail (a short run gets one)
                stopped = self._stop.wait(self.interval_s)
                t, cpu, (tree, tree_cpu) = time.time(), _cpu_jiffies(), self._tree()
                dt = t - prev_t
                s: dict[str, Any] = {"t": round(t, 3), "dt": round(dt, 3), "cpus": os.cpu_count()}
                s["load1"] = round(os.getloadavg()[0], 2)
                if cpu and prev_cpu and cpu[2] > prev_cpu[2]:
                    busy_s = (cpu[0] - prev_cpu[0]) / hz
                    s["others_cores"] = round(max(0.0, busy_s - (tree_cpu - prev_tree_cpu)) / dt, 3)
                    s["steal_pct"] = round(100 * (cpu[1] - prev_cpu[1]) / (cpu[2] - prev_cpu[2]), 2)
                s.update(gpus.read(tree))
                self.samples.append(s)
                if self.path is not None:
                    with self.path.open("a") as f:
                        f.write(json.dumps(s) + "\n")
                prev_t, prev_cpu, prev_tree_cpu = t, cpu, tree_cpu
        finally:
            gpus.close()

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def read_samples(path: str | os.PathLike) -> list[dict[str, Any]]:
    p = Path(path)
    return [json.loads(ln) for ln in p.read_text().splitlines() if ln.strip()] if p.exists() else []


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Samples' figures: mean/max of each CPU one, the SM clock's median/min/max rated, most other GPU procs; or None."""
    if not samples:
        return None
    out: dict[str, Any] = {"samples": len(samples), "cpus": max((s.get("cpus") or 0) for s in samples) or None}
    for key in ("others_cores", "load1", "steal_pct"):
        xs = [s[key] for s in samples if s.get(key) is not None]
        if xs:
            out[key] = {"mean": round(statistics.fmean(xs), 2), "max": round(max(xs), 2)}
    clocks = [min(s["sm_clock_mhz"]) for s in samples if s.get("sm_clock_mhz")]
    if clocks:
        rated = max(max(s["sm_clock_max_mhz"]) for s in samples if s.get("sm_clock_max_mhz"))
        out["sm_clock_mhz"] = {"median": round(statistics.median(clocks)), "min": min(clocks), "max_rated": rated}
        out["gpu_other_procs"] = max(s.get("gpu_other_procs", 0) for s in samples)
    return out


def by_label(samples: list[dict[str, Any]], records: Iterable[Any]) -> dict[str, dict[str, Any] | None]:
    """`summarize` per arm label over the samples whose span overlaps one of that arm's measured requests
    (`t_start` to `t_start + e2e`); an arm's windows interleaved with other arms' keep only its own share."""
    windows: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        if r.label is not None and not r.warmup and r.t_start and r.e2e:
            windows.setdefault(r.label, []).append((r.t_start, r.t_start + r.e2e))
    return {
        label: summarize([s for s in samples if any(a < s["t"] and s["t"] - s["dt"] < b for a, b in ws)])
        for label, ws in windows.items()
    }


def busy_reason(summary: dict[str, Any] | None) -> str | None:
    """What disturbed the machine during the samples, in one phrase, or None when it looked quiet."""
    if not summary:
        return None
    said = []
    oc, st = summary.get("others_cores") or {}, summary.get("steal_pct") or {}
    cpus = summary.get("cpus") or os.cpu_count() or 1  # the watched host's, else this one's
    if oc.get("mean", 0) >= max(OTHERS_MIN, OTHERS_SHARE * cpus):
        load = (summary.get("load1") or {}).get("max")
        said.append(
            f"other work used {oc['mean']:.1f} cores on average (up to {oc['max']:.1f}; load average up to {load})"
        )
    if st.get("mean", 0) >= STEAL_PCT:
        said.append(f"the hypervisor stole {st['mean']:.1f}% of CPU time (up to {st['max']:.1f}%)")
    ck = summary.get("sm_clock_mhz")
    if ck and ck["median"] < CLOCK_SHARE * ck["max_rated"]:
        said.append(f"GPU SM clock at {ck['median']} MHz of {ck['max_rated']} (median; min {ck['min']})")
    if summary.get("gpu_other_procs"):
        said.append(f"{summary['gpu_other_procs']} other process(es) on the GPU")
    return "; ".join(said) or None


def brief(summary: dict[str, Any] | None) -> str:
    """One line for a figure or a table: cores used by others, load, steal, SM clock."""
    if not summary:
        return "machine: not watched"
    shown = {"others_cores": "others {:.1f} cores", "load1": "load {:.1f}", "steal_pct": "steal {:.1f}%"}
    parts = [fmt.format(summary[key]["mean"]) for key, fmt in shown.items() if summary.get(key)]
    if ck := summary.get("sm_clock_mhz"):
        parts.append(f"SM {ck['median']}/{ck['max_rated']} MHz, {summary.get('gpu_other_procs', 0)} other GPU procs")
    return "machine: " + ", ".join(parts)


def wait_quiet(timeout_s: float = 60.0, window_s: float = 3.0) -> str | None:
    """Watch the host in windows of `window_s` until one is quiet (`busy_reason` None) or `timeout_s` has
    passed; returns what the last window saw when none was quiet (`--quiet-check` before measuring)."""
    deadline, reason = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        with Watch() as w:
            time.sleep(window_s)
        reason = busy_reason(summarize(w.samples))
        if reason is None:
            return None
    return reason
