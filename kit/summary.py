"""Step records: what each notebook concluded, gathered into one `summary.json` per run.

A notebook ends with `kit.summary.record(out_dir, "02_checkpoint_keys", verdict=..., findings=report, figures=[...],
**numbers)`, which writes `<out_dir>/steps/<step>.json`; the demo's `collect(run_dir)` builds `summary.json` (the
steps in order; on top the accept lengths, the speedups over no speculation `{fixed_launch: {median, ci95},
seed_launch: ...}` and a step's `break_even` digest) and a readable `summary.md`. A notebook run by hand in Jupyter
leaves the same trail as the headless demo.

Where runs go: `run_dir(None)` makes a fresh `<runs root>/<time>/`, the root being `$KIT_RUNS_DIR`, else `runs/` at
the top of the kit's checkout (whatever the working directory), else `./runs`; no output lands in the source tree.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kit.measure.machine import brief as machine_brief

RUNS_ENV = "KIT_RUNS_DIR"
CHECKOUT = Path(__file__).resolve().parent.parent


def runs_root() -> Path:
    """$KIT_RUNS_DIR, else runs/ at the top of the kit's checkout, else ./runs (an installed kit)."""
    if os.environ.get(RUNS_ENV):
        return Path(os.environ[RUNS_ENV]).expanduser()
    if (CHECKOUT / "notebooks").is_dir() and (CHECKOUT / "kit").is_dir():
        return CHECKOUT / "runs"
    return Path("runs")


def new_run_dir(root: str | os.PathLike | None = None, exist_ok: bool = True) -> Path:
    """A run folder named by the local time, `<root or runs_root()>/<YYYYmmdd-HHMMSS>/`, created."""
    d = (Path(root) if root is not None else runs_root()) / time.strftime("%Y%m%d-%H%M%S")
    d.mkdir(parents=True, exist_ok=exist_ok)
    return d


def run_dir(out_dir: str | os.PathLike | None) -> Path:
    """A notebook's output folder: `out_dir` as given (created), or a fresh run folder when None."""
    if out_dir is None:
        return new_run_dir()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return Path(out_dir)


def _jsonable(v: Any) -> Any:
    if hasattr(v, "to_dict") and callable(v.to_dict):
        return v.to_dict()
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, float) and v != v:  # NaN is not JSON
        return None
    return v


def record(out_dir: str | os.PathLike, step: str, **data: Any) -> Path:
    p = Path(out_dir) / "steps" / f"{step}.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps({k: _jsonable(v) for k, v in data.items()}, indent=2, default=str))
    tmp.replace(p)
    return p


def load_steps(run_dir: str | os.PathLike) -> dict[str, dict[str, Any]]:
    d = Path(run_dir) / "steps"
    return {p.stem: json.loads(p.read_text()) for p in sorted(d.glob("*.json"))} if d.exists() else {}


def collect(run_dir: str | os.PathLike, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Merge step records into summary.json (+ summary.md); returns the summary dict."""
    run_dir = Path(run_dir)
    steps = load_steps(run_dir)
    accept: dict[str, Any] = {"seed_launch": None, "fixed_launch": None, "oracle": None}
    speedup: dict[str, Any] = {"fixed_launch": None, "seed_launch": None}  # each {median, ci95: [low, high], n}
    machine: dict[str, Any] = {}  # per bench arm: what the host did while it ran (kit.measure.machine)
    lifted: dict[str, Any] = {}  # a step's break-even digest (kit.measure.breakeven.digest)
    for rec in steps.values():
        for table, got in ((accept, rec.get("accept_length") or {}), (speedup, rec.get("speedup"))):
            if isinstance(got, dict):
                table.update((k, v) for k, v in got.items() if k in table and v is not None)
        machine.update(rec.get("machine_watch") or {})
        if rec.get("break_even"):
            lifted["break_even"] = rec["break_even"]
    summary = {"accept_length": accept, "speedup": speedup, "machine_watch": machine, **lifted, **(extra or {}),
               "steps": steps}  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    (run_dir / "summary.md").write_text(render_markdown(summary))
    return summary


def fmt_speedup(s: dict[str, Any] | None) -> str:
    """`1.52x [1.31, 1.70] (n 4 repeats)` from a summary speedup entry (`kit.measure.metrics.launch_speedup`,
    briefly); `inconclusive: <why>` when the run cannot support a headline; n/a when the launch was not benched."""
    if not s or s.get("median") is None:
        return "n/a"
    if s.get("inconclusive"):
        return f"inconclusive: {s['inconclusive']}"
    lo, hi = s.get("ci95") or (None, None)
    ci = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
    unit = f" {s['pairing']}s" if s.get("pairing") else ""
    return f"{s['median']:.2f}x{ci} (n {s.get('n')}{unit})"


def render_markdown(summary: dict[str, Any]) -> str:
    a = summary["accept_length"]
    fmt = lambda v: "n/a" if v is None else f"{v:.2f}"  # noqa: E731
    lines = [
        "# Run summary",
        "",
        "| accept length | value |",
        "|---|---|",
        f"| observed, seed's launch | {fmt(a['seed_launch'])} |",
        f"| observed, fixed launch | {fmt(a['fixed_launch'])} |",
        f"| expected (oracle) | {fmt(a['oracle'])} |",
        "",
        "| speedup over no speculation (paired median, 95% interval) | value |",
        "|---|---|",
        *(
            f"| {name} | {fmt_speedup((summary.get('speedup') or {}).get(key))} |"
            for key, name in (("seed_launch", "seed's launch"), ("fixed_launch", "fixed launch"))
        ),
        "",
        *(f"- {label}: {machine_brief(m)}" for label, m in (summary.get("machine_watch") or {}).items()),
        "",
    ]
    if sentence := (summary.get("break_even") or {}).get("sentence"):
        lines += [f"**Where EAGLE-3 pays on this GPU** (measured costs, `bench/gpu_breakeven.py`): {sentence}", ""]
    for name, rec in summary["steps"].items():
        findings = (rec.get("findings") or {}).get("findings", [])
        lines += [
            f"## {name}",
            *([f"**Verdict:** {rec['verdict']}"] if rec.get("verdict") else []),
            *(f"- `{f['severity']}` `{f['code']}` {f['title']}" for f in findings if f["severity"] != "info"),
            *(f"- figure: {fig}" for fig in rec.get("figures") or []),
            "",
        ]
    return "\n".join(lines)
