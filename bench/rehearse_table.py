"""The doctor-vs-rehearsal-vs-truth table of a `bench/gpu_rehearse.py` JSONL: one row per case, markdown and JSON.

Per case: the truth (the corpus's, at the release it holds for), doctor's errors at the rehearsal's release, what
real SGLang showed (started, or its exception line; the layers the target captured; the width of the hidden states
reaching the draft and whether `fc` took them; spec_verify_ct per request; checkpoint tensors the loader skipped /
draft parameters it never filled), each finding marked confirmed / refuted / new / not reached, and the wall time.
Agreement with doctor is one question; the other is whether the rehearsal ended as the truth says at the rehearsed
release (a fault: it did not start, or a finding was confirmed or new). The truth comes from the case's data
(gpu_rehearse.known_cases: tests/corpus, the families, the seed), a fault fixed in a later release (`fixed_in`)
counting as healthy from there; a row that differs carries its explanation from the case's data: why a rehearsal
cannot show that truth (`truth.rehearsal`, or the case's `xfail`), or a corrected corpus config (`corrects`) whose
codes the run's doctor column still names (the run judged the file before the correction). A dry-run JSONL gives
the plans only.

    python bench/rehearse_table.py RESULTS.jsonl [--out DIR]      # DIR: the JSONL's folder unless given

Writes OUT/rehearse_table.md and OUT/rehearse_table.json and prints the markdown, then one summary line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpu_rehearse import REHEARSAL_RELEASE, known_cases, load_configs

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


def truth_at(truth: dict, release: str) -> str:
    """healthy or fault: what the case's truth says at `release` (a fault `fixed_in` a release up to it: healthy)."""
    from kit.sglang.versions import Version

    fixed = truth.get("fixed_in")
    if fixed and not Version.parse(release) < Version.parse(fixed):
        return "healthy"
    return "healthy" if truth["verdict"] in ("healthy", "ok") else "fault"


def explanation(case: dict, doctor_errors: list[str]) -> str | None:
    """Why a rehearsal of this case may end otherwise than its truth, from the case's data (None: nothing says)."""
    why = case["truth"].get("rehearsal") or case.get("xfail")
    if why:
        return why
    for name in (case.get("target"), (case.get("draft") or {}).get("config")):
        fix = load_configs().get(name or "", {}).get("provenance", {}).get("corrects")
        if fix and set(fix["codes"]) & set(doctor_errors):
            return f"the run judged {name} before its correction: {fix['why']}"
    return None


def case_row(r: dict, case: dict | None = None, release: str = REHEARSAL_RELEASE) -> dict:
    """The table's fields of one JSONL row; `case`: its corpus entry (truth, configs), `release`: the rehearsed one."""
    f = r.get("facts") or {}
    errors = sorted({d.split(":")[0] for d in r.get("doctor") or [] if d.endswith(":error")})
    truth = (case or {}).get("truth") or {"verdict": "healthy" if r.get("truth") == "healthy" else "fault"}
    out = {
        "case": r["case"],
        "truth": r.get("truth", ""),
        "truth_release": truth.get("release"),
        "truth_fixed_in": truth.get("fixed_in"),
        "truth_at_rehearsal": truth_at(truth, release),
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
    if not timed_out:
        fault = not f.get("started") or any(t["verdict"] in ("confirmed", "new") for t in r["table"])
        out["outcome"] = "fault" if fault else "healthy"
        out["matches_truth"] = out["outcome"] == out["truth_at_rehearsal"]
        if not out["matches_truth"]:
            out["explanation"] = explanation(case, errors) if case else None
    return out


def _cell(v) -> str:
    if v is None or v == [] or v == "":
        return "—"
    if isinstance(v, list):
        return ", ".join(map(str, v))
    return str(v).replace("|", "\\|")


def markdown(rows: list[dict]) -> str:
    lines = [
        "| case | truth (release) | doctor errors | TP | SGLang | captured | width | fc | verify_ct | dropped / unfilled | "
        "findings | agreed | truth matched | clean | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        tp = c.get("tp") or {}
        tp_s = f"{tp['rehearsal']} (launch {tp['launch']})" if tp else "—"
        sg = c["status"] + (": `" + c["exception"][:160].replace("`", "'") + "`" if c.get("exception") else "")
        fnd = "; ".join(f"{k}: {v}" for k, v in (c.get("findings") or {}).items() if v in SHOWN)
        dropped = "—" if c.get("dropped") is None else f"{c['dropped']} / {c['unfilled']}"
        agreed, matched = ({True: "yes", False: "**no**"}.get(c.get(k), "—") for k in ("agreed", "matches_truth"))
        truth = f"{_cell(c['truth'])} ({c['truth_release']})" if c.get("truth_release") else _cell(c["truth"])
        if c.get("truth_fixed_in"):
            truth += f", fixed in {c['truth_fixed_in']}"
        lines.append(
            f"| `{c['case']}` | {truth} | {_cell(c['doctor_errors'])} | {tp_s} | {_cell(sg)} | "
            f"{_cell(c.get('captured'))} | {_cell(c.get('hidden_width'))} | {_cell(c.get('fc_used'))} | "
            f"{_cell(c.get('verify_ct'))} | {dropped} | {_cell(fnd)} | {agreed} | {matched} | "
            f"{_cell(c.get('clean'))} | {_cell(c.get('wall_s'))} |"
        )
    differ = [c for c in rows if c.get("matches_truth") is False]
    if differ:
        lines += ["", "Rows that end otherwise than their truth:", ""]
        lines += [f"- `{c['case']}`: {c.get('explanation') or '**unexplained**'}" for c in differ]
    return "\n".join(lines)


def summary_line(rows: list[dict], run: dict | None) -> str:
    timed_out = [c["case"] for c in rows if c["status"] == "timed out"]
    ran = [c for c in rows if "agreed" in c and c["case"] not in timed_out]
    bad = [c["case"] for c in ran if not c["agreed"]]
    differ = [c for c in ran if not c["matches_truth"]]
    unexplained = [c["case"] for c in differ if not c.get("explanation")]
    walls = [c["wall_s"] for c in ran if c.get("wall_s") is not None]
    planned = sum(1 for c in rows if c["status"] == "planned (dry run)")
    s = (
        f"{len(ran)} rehearsed: {len(ran) - len(bad)} agree with doctor, {len(ran) - len(differ)} match the truth, "
        f"{len(differ)} differ ({'unexplained: ' + ', '.join(unexplained) if unexplained else 'each explained'})"
        f"; {len(rows)} cases ({sum(not c['status'].startswith('not rehearsable') for c in rows)} rehearsable), "
        f"{len(bad)} disagreements with doctor{' (' + ', '.join(bad) + ')' if bad else ''}, "
        f"max wall {max(walls) if walls else '—'} s"
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


def table_rows(jsonl: Path) -> tuple[list[dict], dict | None]:
    """(the table's rows, the run's summary line) of a JSONL, each row judged against its case's truth."""
    raw, run = read_rows(jsonl)
    cases, release = known_cases(), (run or {}).get("version") or REHEARSAL_RELEASE
    return [case_row(r, cases.get(r["case"]), release) for r in raw], run


def write_table(jsonl: Path, out: Path) -> str:
    rows, run = table_rows(jsonl)
    md = markdown(rows)
    line = summary_line(rows, run)
    out.mkdir(parents=True, exist_ok=True)
    (out / "rehearse_table.md").write_text(md + "\n\n" + line + "\n")
    (out / "rehearse_table.json").write_text(json.dumps({"summary": line, "run": run, "rows": rows}, indent=1) + "\n")
    return md + "\n\n" + line


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jsonl")
    p.add_argument("--out", default=None, help="where the table goes (default: the JSONL's folder)")
    a = p.parse_args()
    print(write_table(Path(a.jsonl), Path(a.out) if a.out else Path(a.jsonl).parent))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
