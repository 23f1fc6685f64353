"""Benchmark: the per-release rule tables' size on disk and `kit doctor`'s time per deployment, warm.

Every listed SGLang release (kit.sglang.releases) has its own flag, capture, loader and quant rows; this
prints what they weigh (bytes per file, rows stored whole vs as `same_as`, distinct flag actions) and how
long `kit doctor` takes per deployment of the corpus (tests/corpus, each case's own release; side
environments off, as in tests/corpus_cases.py) once the tables are loaded: every case run once to warm,
then timed. Target: <= 1 s per deployment on a 2-core CPU. Prints one JSON document (last line).

    python bench/bench_doctor_releases.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _run import emit  # noqa: E402


def table_sizes() -> dict:
    from kit.sglang import capture, flags, loader, quant, releases

    out = {}
    for name, path in [
        ("flags", flags.TABLE_PATH),
        ("capture", capture.TABLE_PATH),
        ("loader", loader.TABLE_PATH),
        ("quant", quant.TABLE_PATH),
        ("releases", releases.RELEASES_PATH),
    ]:
        doc = json.loads(path.read_text())
        stored = doc.get("versions") or {}
        rows = {v: stored[r["same_as"]] if "same_as" in r else r for v, r in stored.items()}
        out[name] = {
            "bytes": path.stat().st_size,
            "rows": len(rows) if rows else len(doc["releases"]),
            "same_as_rows": sum("same_as" in r for r in stored.values()),
            **({"distinct_actions": len(doc["actions"])} if "actions" in doc else {}),
            **({"missing_rows": sorted(v for v, r in rows.items() if "missing" in r)} if name == "flags" else {}),
        }
    out["total_bytes"] = sum(v["bytes"] for v in out.values())
    return out


def doctor_times(repeat: int) -> dict:
    from tests.corpus_cases import load_cases, run_case

    cases = load_cases()
    t0 = time.perf_counter()
    for c in cases:  # warm: tables, parsers, imports
        run_case(c)
    cold = time.perf_counter() - t0
    per = []
    for _ in range(repeat):
        for c in cases:
            t = time.perf_counter()
            run_case(c)
            per.append((time.perf_counter() - t, c["id"], c.get("sglang_version")))
    secs = [p[0] for p in per]
    slow = max(per)
    return {
        "cases": len(cases),
        "first_pass_s": round(cold, 2),
        "warm_mean_s": round(statistics.mean(secs), 3),
        "warm_median_s": round(statistics.median(secs), 3),
        "warm_max_s": round(slow[0], 3),
        "slowest_case": slow[1],
        "slowest_release": slow[2],
        "releases": sorted({c.get("sglang_version") or "default" for c in cases}),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    out = {"cpus": os.cpu_count(), "tables": table_sizes(), "doctor": doctor_times(args.repeat)}
    out["target_met"] = out["doctor"]["warm_max_s"] <= 1.0
    emit(out)


if __name__ == "__main__":
    main()
