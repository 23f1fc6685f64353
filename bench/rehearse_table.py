"""The doctor-vs-rehearsal table of a `bench/gpu_rehearse.py` JSONL: one row per case, markdown and JSON.

Per case: doctor's errors at the rehearsal's release, what real SGLang showed (started, or its exception line;
the layers the target captured; the width of the hidden states reaching the draft and whether `fc` took them;
spec_verify_ct per request; checkpoint tensors the loader skipped / draft parameters it never filled), each
finding marked confirmed / refuted / new / not reached, and the wall time. A dry-run JSONL gives the plans only.

    python bench/rehearse_table.py RESULTS.jsonl [--out docs/results/h200_rehearse]
    python bench/gpu_rehearse.py --table RESULTS.jsonl [--table-out DIR]      # the same

Writes OUT/rehearse_table.md and OUT/rehearse_table.json and prints the markdown, then one summary line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SHOWN = ("confirmed", "refuted", "new", "not reached", "timed out")  # "not rehearsed": codes a rehearsal cannot observe


def read_rows(path: Path) -> tuple[list[dict], dict | None]:
    """(case rows, the run's summary line or None); lines that are not JSON are skipped."""
    rows, summary = [], None
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "case" in d:
            rows.append(d)
        elif "cases" in d:
            summary = d
    return rows, summary


def fc_used(f: dict) -> str:
    width, fc_in, hidden = ((f.get(k) or [None])[0] for k in ("draft_input_width", "draft_fc_in", "draft_hidden"))
    if width is None:
        return "—"
    if fc_in is not None:
        return "yes" if fc_in == width else f"no (fc takes {fc_in})"
    if hidden is not None:
        return "no: bypassed" if width == hidden else "yes"
    return "?"


def case_row(r: dict) -> dict:
    """The table's fields of one JSONL row."""
    f = r.get("facts") or {}
    errors = sorted({d.split(":")[0] for d in r.get("doctor") or [] if d.endswith(":error")})
    out = {
        "case": r["case"],
        "truth": r.get("truth", ""),
        "doctor_errors": errors,
        "tp": r.get("tp"),
        "wall_s": r.get("wall_s"),
    }
    if "table" not in r:
        out["status"] = r.get("error") or (
            "planned (dry run)" if "plan_changes" in r else f"not rehearsable: {r.get('rehearsable')}"
        )
        return out
    exc = next((o["title"] for o in r.get("observed") or [] if o["title"].startswith("SGLang did not start")), None)
    timed_out = next((o["title"] for o in r.get("observed") or [] if o["code"] == "rehearse.timeout"), None)
    lw = f.get("load_weights") or []
    out.update(
        status="timed out" if timed_out else "started" if f.get("started") else "did not start",
        exception=exc.removeprefix("SGLang did not start: ") if exc else timed_out,
        captured=f.get("captured"),
        hidden_width=(f.get("draft_input_width") or [None])[0],
        fc_used=fc_used(f),
        verify_ct=f.get("spec_verify_ct"),
        dropped=sum(len(x.get("skipped") or []) for x in lw) if lw else None,
        unfilled=sum(len(x.get("unfilled") or []) for x in lw) if lw else None,
        findings={t["code"]: t["verdict"] for t in r["table"]},
        agreed=None if timed_out else not any(t["verdict"] in ("refuted", "new") for t in r["table"]),
        clean=f.get("clean", f.get("gpu_memory_returned")),
    )
    return out


def _cell(v) -> str:
    if v is None or v == [] or v == "":
        return "—"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v).replace("|", "\\|")


def markdown(rows: list[dict]) -> str:
    lines = [
        "| case | truth | doctor errors | TP | SGLang | captured | width | fc | verify_ct | dropped / unfilled | "
        "findings | agreed | clean | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        tp = c.get("tp") or {}
        tp_s = f"{tp['rehearsal']} (launch {tp['launch']})" if tp else "—"
        sg = c["status"] + (": `" + c["exception"][:160].replace("`", "'") + "`" if c.get("exception") else "")
        fnd = "; ".join(f"{k}: {v}" for k, v in (c.get("findings") or {}).items() if v in SHOWN)
        dropped = "—" if c.get("dropped") is None else f"{c['dropped']} / {c['unfilled']}"
        agreed = {True: "yes", False: "**no**"}.get(c.get("agreed"), "—")
        lines.append(
            f"| `{c['case']}` | {_cell(c['truth'])} | {_cell(c['doctor_errors'])} | {tp_s} | {_cell(sg)} | "
            f"{_cell(c.get('captured'))} | {_cell(c.get('hidden_width'))} | {_cell(c.get('fc_used'))} | "
            f"{_cell(c.get('verify_ct'))} | {dropped} | {_cell(fnd)} | {agreed} | {_cell(c.get('clean'))} | "
            f"{_cell(c.get('wall_s'))} |"
        )
    return "\n".join(lines)


def summary_line(rows: list[dict], run: dict | None) -> str:
    timed_out = [c["case"] for c in rows if c["status"] == "timed out"]
    ran = [c for c in rows if "agreed" in c and c["case"] not in timed_out]
    bad = [c["case"] for c in ran if not c["agreed"]]
    walls = [c["wall_s"] for c in ran if c.get("wall_s") is not None]
    planned = sum(1 for c in rows if c["status"] == "planned (dry run)")
    s = (
        f"{len(rows)} cases ({sum(not c['status'].startswith('not rehearsable') for c in rows)} rehearsable), "
        f"{len(ran)} rehearsed, {len(ran) - len(bad)} agreed, {len(bad)} disagreements"
        f"{' (' + ', '.join(bad) + ')' if bad else ''}, max wall {max(walls) if walls else '—'} s"
    )
    if timed_out:
        s += f", {len(timed_out)} timed out ({', '.join(timed_out)})"
    if planned:
        s += f", {planned} planned (dry run)"
    if run:
        if run.get("not_run"):
            s += f"; not run (deadline): {', '.join(run['not_run'])}"
        if run.get("batch_wall_s") is not None:
            s += f"; batch {run['batch_wall_s']} s on GPUs {run.get('gpus')} x {run.get('per_gpu')}"
        mem = run.get("gpu_memory_batch")
        if mem:
            s += f"; GPU memory {mem['before_mib']} -> {mem['after_mib']} MiB (returned: {mem['returned']})"
    return s


def write_table(jsonl: Path, out: Path) -> str:
    raw, run = read_rows(jsonl)
    rows = [case_row(r) for r in raw]
    md = markdown(rows)
    line = summary_line(rows, run)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rehearse_table.md").write_text(md + "\n\n" + line + "\n")
    (out / "rehearse_table.json").write_text(json.dumps({"summary": line, "run": run, "rows": rows}, indent=1) + "\n")
    return md + "\n\n" + line


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jsonl")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "docs" / "results" / "h200_rehearse"))
    a = p.parse_args()
    print(write_table(Path(a.jsonl), Path(a.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
