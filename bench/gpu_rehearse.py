"""`kit rehearse` over the seed's setup and its fix, the families, the four fault classes and the corpus, side by side.

Runs on the GPU host with SGLang importable (the kit's bundle on PYTHONPATH: pass `--bundle`), the repository on
PYTHONPATH. Each case is materialised by tests/corpus_cases.py (real configs, sparse safetensors with
each exporter's key names and shapes; the miniature then gets real random tensors); each rehearsal is one
`python -m kit rehearse ... --json` process, so it is the product path that runs.

Side by side: a pool of `--per-gpu` rehearsals on every visible GPU (CUDA_VISIBLE_DEVICES per rehearsal), started
`--stagger-s` apart (ten SGLang startups at once on 16 cores took 142-189 s each, the ones started later 80-130 s),
each with its own --port / --nccl-port, `--mem-fraction` and a KV pool capped by `--max-total-tokens` (both listed
among the plan's changes). SGLang 0.5.17 sizes a server's budget as a fraction of the memory free when *it*
starts, so the fraction is a share of what others left, and the cap keeps each footprint a few GiB: rehearsals
starting together never starve each other. With two or more GPUs the seed and its fix also run at TP
min(launch TP, GPUs) over all of them (`--tp2`, default on), queued first so they start with the GPUs balanced
(SGLang refuses TP over GPUs whose free memory differs by more than 10%).

Order: seed, seed-fix (TP>1 first), the families, the four classes, the corpus. Each rehearsal has
`--case-timeout` s; after `--deadline-s` s from the start the running ones are stopped and the rest reported as
not run. Stopping a rehearsal kills its process group; its SGLang server dies with it (kit.serving.process
supervisor) and the driver then finds any process still carrying the rehearsal's record path in its environment
and kills it by pid. The check after each rehearsal is `--end-check own` (its processes gone and holding no GPU
memory: under concurrency the whole GPU's memory says nothing of one rehearsal); the whole GPUs' memory is
checked once, at the end of the batch, against its level before the first start.

    python bench/gpu_rehearse.py --work /tmp/rh --version 0.5.17 --bundle --out OUT [--only seed seed-fix llama ...]
    python bench/gpu_rehearse.py --work /tmp/rh --dry-run            # CPU: miniatures and plans only

Prints one JSON line per case as it ends ({"case", "rehearsable", "wall_s", "facts", "table", ...}) and a
summary JSON line last; `bench/rehearse_table.py` turns such a JSONL into the doctor-vs-rehearsal-vs-truth table
(`--out OUT` keeps the lines in OUT/rehearse.jsonl and writes that table beside them).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from corpus_cases import (  # noqa: E402
    REHEARSAL_RELEASE,
    build_case,
    load_cases,
    load_classes,
    load_configs,
    rehearsable,
    weight_spec,
    write_sparse_safetensors,
)

LAUNCH = (
    "python3 -m sglang.launch_server --model-path /models/target --tp-size {tp} --speculative-algorithm {alg} "
    "--speculative-draft-model-path /models/draft --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4 --mem-fraction-static 0.85 --context-length 2048"
)  # 2048: within every family draft's trained context, so a healthy family shows the speculative path run
# six target families (+ the MLA draft), each with a draft trained for it (configs from tests/corpus)
FAMILIES = {
    "llama": ("target/llama-3.1-8b-instruct.json", "draft/specforge-llama3-8B-eagle3.exported.json", "midlayer"),
    "qwen3": ("target/qwen3-8b.json", "draft/specforge-qwen3-8b-eagle3.json", "midlayer"),
    "qwen3-moe": ("target/qwen3-30b-a3b.json", "draft/specforge-qwen3-30B-A3B-eagle3.json", "midlayer"),
    "gpt-oss": ("target/gpt-oss-120b.json", "draft/specforge-gpt-oss-120B-eagle3.json", "midlayer"),
    "deepseek-v3": ("target/deepseek-v3.json", "draft/specforge-deepseek-v3-671b-eagle3.exported.json", "midlayer"),
    "kimi-mla": ("target/kimi-k2.5.json", "draft/kimi-k2.6-eagle3.1-mla.json", "kimi_mla"),
    "llama4-newer": (
        "target/llama-4-scout-17b-16e-instruct.json",
        "draft/specforge-llama4-scout-17B-16E-eagle3.json",
        "midlayer",
    ),
}
SEED_LAUNCH = (ROOT / "kit" / "tests" / "data" / "seed_launch.sh").read_text()


# flags every published launch of a family carries: Kimi's processor and tokenizer are remote code
FAMILY_FLAGS = {"kimi-mla": " --trust-remote-code"}


def family_case(name: str, tp: int) -> dict:
    target, draft, layout = FAMILIES[name]
    return {
        "id": name,
        "target": target,
        "draft": {"config": draft, "weights": layout},
        "launch": LAUNCH.format(tp=tp, alg="EAGLE3") + FAMILY_FLAGS.get(name, ""),
        "truth": {
            "verdict": "healthy",
            "release": REHEARSAL_RELEASE,
            "stated": "by construction: the target with a draft trained for it, within its trained context",
        },
    }


def known_cases() -> dict[str, dict]:
    """Every case a batch rehearses, by id, with its truth (verdict, codes, the release it holds for): the seed and
    its fix, the families, the classes and the corpus."""
    seed = {"verdict": "fault", "codes": ["aux.algorithm", "draft.config"], "release": REHEARSAL_RELEASE}
    out = {
        "seed": {"id": "seed", "truth": {**seed, "stated": "a speculators-layout draft launched as EAGLE"}},
        "seed-fix": {"id": "seed-fix", "truth": {"verdict": "healthy", "release": REHEARSAL_RELEASE}},
    }
    out.update((n, {"id": n, **family_case(n, 1)}) for n in FAMILIES)
    return out | {c["id"]: c for c in load_classes() + load_cases()}


def seed_dirs(root: Path, fixed: bool) -> dict:
    """The seed: Kimi-K2.5 target, a speculators-layout draft (layers.0.*, speculators config), its launch with
    --speculative-algorithm EAGLE and the NCCL variables; the fix: the SGLang layout `kit convert` writes, EAGLE3."""
    from kit.checkpoint.layouts import sglang_to_speculators_config

    kimi = load_configs()["target/kimi-k2.5.json"]["config"]
    sg = load_configs()["draft/specforge-kimi-k25-eagle3.json"]["config"]
    (root / "target").mkdir(parents=True, exist_ok=True)
    (root / "target" / "config.json").write_text(json.dumps(kimi))
    d = root / "draft"
    d.mkdir(exist_ok=True)
    spec = weight_spec(sg, "midlayer")
    if fixed:
        cfg = sg
    else:
        cfg = sglang_to_speculators_config(sg, None, kimi["architectures"])
        spec = {k.replace("midlayer.", "layers.0.", 1): v for k, v in spec.items()}
    (d / "config.json").write_text(json.dumps(cfg))
    write_sparse_safetensors(d / "model.safetensors", spec, sg)
    launch = (
        SEED_LAUNCH
        if not fixed
        else SEED_LAUNCH.replace("--speculative-algorithm EAGLE ", "--speculative-algorithm EAGLE3 ")
    )
    (root / "launch.sh").write_text(launch)
    return {"target": str(root / "target"), "draft": str(d), "launch_file": str(root / "launch.sh")}


@dataclass
class Job:
    """One rehearsal: a case's inputs, where it runs (GPUs, ports) and its process once started."""

    case: str
    inputs: dict
    rehearsable: str
    group: str  # seed | family | class | corpus
    truth: str = ""
    tp: int | None = None  # None: the kit's choice on one GPU (TP1 unless the launch asks TP1 anyway)
    gpus: list[int] = field(default_factory=list)
    port: int = 0
    out: str = ""
    proc: subprocess.Popen | None = None
    t0: float = 0.0
    started_at: float = 0.0

    @property
    def width(self) -> int:
        return self.tp or 1

    @property
    def name(self) -> str:
        return self.case if not self.tp or self.tp == 1 else f"{self.case}@tp{self.tp}"


def materialise(case: dict, root: Path) -> dict:
    """The case's target, draft and launch file under root (kept when an earlier run built them)."""
    root.mkdir(parents=True, exist_ok=True)
    if any(root.iterdir()):
        return {"target": str(root / "target"), "draft": str(root / "draft"), "launch_file": str(root / "launch.sh")}
    return build_case(case, root)


def seed_rehearsable(inputs: dict) -> str:
    """The kit's rule (kit.rehearsal.runner.not_rehearsable) on the seed's folders, in rehearsable()'s words."""
    from kit.hf import HFConfig
    from kit.rehearsal.runner import not_rehearsable
    from kit.sglang.cmdline import find_launch

    target = Path(inputs["target"])
    found = find_launch(Path(inputs["launch_file"]).read_text(), version=REHEARSAL_RELEASE)
    why = not_rehearsable(
        HFConfig.of(json.loads((target / "config.json").read_text())), found, REHEARSAL_RELEASE, target
    )
    return f"no: {why}" if why else "yes"


def build_jobs(work: Path, family_tp: int) -> list[Job]:
    """Every case, materialised under work/<case>/in, in the order the issue needs them."""
    jobs: list[Job] = []
    for name in ("seed", "seed-fix"):
        a = seed_dirs(work / name / "in", fixed=name == "seed-fix")
        truth = "aux.algorithm, draft.config" if name == "seed" else "healthy"
        jobs.append(Job(name, a, seed_rehearsable(a), "seed", truth))
    for name in FAMILIES:
        c = family_case(name, family_tp)
        jobs.append(Job(name, materialise(c, work / name / "in"), rehearsable(c), "family", "healthy"))
    for group, cases in (("class", load_classes()), ("corpus", load_cases())):
        for c in cases:
            a = materialise(c, work / c["id"] / "in")
            t = c["truth"]
            truth = t["verdict"] if t["verdict"] == "healthy" else ", ".join(t.get("codes") or [t["verdict"]])
            ok = rehearsable(c) if c.get("launch") else "no: the case has no launch"
            jobs.append(Job(c["id"], a, ok, group, truth))
    return jobs


def visible_gpus() -> list[int]:
    """GPU indices this process may give out (CUDA_VISIBLE_DEVICES when set, else nvidia-smi's list)."""
    from kit.rehearsal.runner import gpu_count

    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [int(x) for x in env.split(",") if x.strip().isdigit()]
    return list(range(gpu_count()))


def kit_argv(job: Job, opts) -> list[str]:
    """`python -m kit rehearse` for one job: the user's inputs, its GPUs and ports, the batch's memory settings."""
    from kit import config as kconfig
    from kit.rehearsal.runner import RehearsalConfig

    cfg = RehearsalConfig(
        target=job.inputs["target"],
        draft=job.inputs["draft"],
        launch_file=job.inputs["launch_file"],
        out=job.out,
        dry_run=opts.dry_run,
        sglang_version=opts.version,
        bundle=opts.bundle,
        timeout=max(30.0, opts.case_timeout - 45),  # room for the requests and the stop inside the case timeout
        mem_fraction=opts.mem_fraction,
        max_total_tokens=opts.max_total_tokens,
        tp=job.tp,
        cuda_visible_devices=",".join(map(str, job.gpus)),
        port=job.port,
        nccl_port=job.port + 1,
        end_check="own",
        json=True,
    )
    return [sys.executable, "-m", "kit", "rehearse", *kconfig.to_argv(cfg)]


def row_of(job: Job, report: dict | None, wall: float, error: str | None = None) -> dict:
    row: dict = {
        "case": job.name,
        "group": job.group,
        "truth": job.truth,
        "rehearsable": job.rehearsable,
        "gpus": job.gpus,
        "port": job.port,
        "started_at_s": round(job.started_at, 1),
        "wall_s": round(wall, 1),
    }
    if error:
        row["error"] = error
    if report is None:
        return row
    plan = report["plan"]
    row["tp"] = {"rehearsal": plan["tp"], "launch": plan["user_tp"]}
    row["doctor"] = [d["code"] + ":" + d["severity"] for d in report["doctor"]]
    row["plan_changes"] = [f"{c['flag']}={c['new']}" for c in plan["changes"]]
    if "facts" in report:
        row.update(facts=report["facts"], table=report["table"], observed=report["observed"])
    return row


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def stop_job(job: Job) -> list[int]:
    """Stop a rehearsal that outran its time: SIGTERM then SIGKILL to the kit process's group (its SGLang server
    follows: the supervisor reacts to its parent's death), then kill by pid whatever still carries the
    rehearsal's record in its environment. Returns those pids."""
    from kit.rehearsal.runner import RECORD_NAME, own_processes

    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(job.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            job.proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            pass
    record = str(Path(job.out).resolve() / RECORD_NAME)
    deadline = time.monotonic() + 25  # the supervisor's grace (10 s) before it SIGKILLs the server group
    left = own_processes(record)
    while left and time.monotonic() < deadline:
        time.sleep(1)
        left = own_processes(record)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return left


def finish(job: Job, timed_out: str | None) -> dict:
    wall = time.monotonic() - job.t0
    log = Path(job.out).with_suffix(".log")
    if timed_out:
        left = stop_job(job)
        row = row_of(job, None, wall, f"{timed_out}; stopped (leftover pids killed: {left})")
        row["log_tail"] = _tail(log)
        row["facts"] = {"started": None, "clean": not left, "end_check": "own", "own_processes_left": left}
        return row
    report = None
    for line in reversed(_tail(log, 2_000_000).splitlines()):
        if line.startswith("{"):
            try:
                report = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    if report is None:
        row = row_of(job, None, wall, f"kit rehearse exited {job.proc.returncode} without a report")
        row["log_tail"] = _tail(log)
        return row
    return row_of(job, report, wall)


def run_batch(jobs: list[Job], opts, gpus: list[int], emit) -> tuple[list[dict], list[Job]]:
    """Run the jobs `opts.per_gpu` at a time per GPU, in order (a job waits for room on all its GPUs, and
    nothing starts past it meanwhile, so the TP>1 jobs queued first start first); returns (rows, not run)."""
    t_start = time.monotonic()
    load = {g: 0 for g in gpus}
    pending, running, rows = list(jobs), [], []
    port = opts.base_port
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)}
    stopping: list[tuple[Job, threading.Thread]] = []  # outran their time: stopped in parallel, GPUs held meanwhile
    stagger = 0.0 if opts.dry_run else opts.stagger_s
    last_start = -float("inf")

    def retire(job: Job, why: str | None) -> None:
        rows.append(finish(job, why))
        emit(rows[-1])

    while pending or running or stopping:
        now = time.monotonic()
        late = now - t_start > opts.deadline_s
        for job in list(running):
            over = now - job.t0 > opts.case_timeout
            if job.proc.poll() is not None:
                running.remove(job)
                retire(job, None)
                for g in job.gpus:
                    load[g] -= 1
            elif over or late:
                running.remove(job)
                th = threading.Thread(target=retire, args=(job, "case timeout" if over else "batch deadline"))
                th.start()
                stopping.append((job, th))
        for job, th in list(stopping):
            if not th.is_alive():
                stopping.remove((job, th))
                for g in job.gpus:
                    load[g] -= 1
        left = opts.deadline_s - (time.monotonic() - t_start)
        while pending and left > opts.min_start_s and time.monotonic() - last_start >= stagger:
            job = pending[0]
            free = sorted((g for g in gpus if load[g] < opts.per_gpu), key=lambda g: (load[g], g))
            if len(free) < job.width:
                break
            pending.pop(0)
            job.gpus = sorted(free[: job.width])
            job.port, port = port, port + 10
            job.out = str(Path(opts.work) / job.case / ("rehearsal" if job.width == 1 else f"rehearsal-tp{job.width}"))
            Path(job.out).parent.mkdir(parents=True, exist_ok=True)
            job.t0 = last_start = time.monotonic()
            job.started_at = job.t0 - t_start
            with open(Path(job.out).with_suffix(".log"), "w") as log:
                job.proc = subprocess.Popen(
                    kit_argv(job, opts), env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                )
            running.append(job)
            for g in job.gpus:
                load[g] += 1
        if pending and not running and not stopping and left <= opts.min_start_s:
            break
        time.sleep(0.5)
    return rows, pending


def summarize(rows: list[dict]) -> dict:
    timed_out = [r["case"] for r in rows if any(t["verdict"] == "timed out" for t in r.get("table") or [])]
    ran = [r for r in rows if "table" in r and r["case"] not in timed_out]
    bad = {
        r["case"]: [f"{t['code']}:{t['verdict']}" for t in r["table"] if t["verdict"] in ("refuted", "new")]
        for r in ran
        if any(t["verdict"] in ("refuted", "new") for t in r["table"])
    }
    return {
        "cases": len(rows),
        "rehearsed": len(ran),
        "planned": sum(1 for r in rows if "plan_changes" in r and "table" not in r),
        "started": sum(1 for r in ran if r["facts"].get("started")),
        "agreed": len(ran) - len(bad),
        "disagreements": bad,
        "failed_to_run": [r["case"] for r in rows if r.get("error")],
        "timed_out": timed_out,
        "max_wall_s": max((r["wall_s"] for r in ran), default=None),
        "every_rehearsal_clean": all(r.get("facts", {}).get("clean") is not False for r in rows if "facts" in r),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", required=True, help="where the cases, miniatures and logs go")
    p.add_argument("--version", default=None, help="SGLang release (default: the installed one)")
    p.add_argument(
        "--bundle",
        action="store_true",
        help="add the kit bundle's launch flags even when the importable SGLang is not bundle-installed "
        "(a bundle-installed one gets them always, from its manifest)",
    )
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--tp", type=int, default=1, help="TP of the family launches")
    p.add_argument("--only", nargs="*", default=None, help="case ids to run (default: all)")
    p.add_argument("--per-gpu", type=int, default=5, help="rehearsals at once on one GPU")
    p.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: the visible ones; dry run: 2)")
    p.add_argument("--tp2", action=argparse.BooleanOptionalAction, default=None, help="seed and fix at TP>1 too")
    p.add_argument("--mem-fraction", type=float, default=0.2, help="--mem-fraction-static of each rehearsal")
    p.add_argument("--max-total-tokens", type=int, default=16384, help="KV pool cap of each rehearsal (tokens)")
    p.add_argument("--case-timeout", type=float, default=240.0, help="seconds one rehearsal may take")
    p.add_argument("--deadline-s", type=float, default=510.0, help="seconds for the whole batch")
    p.add_argument("--min-start-s", type=float, default=75.0, help="start nothing with less time than this left")
    p.add_argument(
        "--stagger-s",
        type=float,
        default=8.0,
        help="seconds between two starts (a start's imports and graph capture are CPU-bound; dry run: 0)",
    )
    p.add_argument("--base-port", type=int, default=31000, help="first rehearsal's port (each takes 10)")
    p.add_argument(
        "--out",
        default=None,
        help="also write here: rehearse.jsonl (every line printed), the table of bench/rehearse_table.py and the "
        "reports of the seed and its fix",
    )
    opts = p.parse_args()
    from kit.rehearsal.runner import gpu_memory_used

    gpus = visible_gpus()
    if opts.gpus is not None:
        gpus = list(range(opts.gpus)) if not gpus else gpus[: opts.gpus]
    if not gpus and opts.dry_run:
        gpus = [0, 1]  # plan as on the two-GPU host
    if not gpus:
        p.error("no GPU visible (use --dry-run on a machine without one)")
    work = Path(opts.work)
    jobs = [j for j in build_jobs(work, opts.tp) if not opts.only or j.case in opts.only]
    tp2 = opts.tp2 if opts.tp2 is not None else len(gpus) >= 2
    if tp2 and len(gpus) >= 2:
        wide = [Job(j.case, j.inputs, j.rehearsable, j.group, j.truth, tp=len(gpus)) for j in jobs if j.group == "seed"]
        jobs = wide + jobs
    skipped = [j for j in jobs if j.rehearsable != "yes"]
    jobs = [j for j in jobs if j.rehearsable == "yes"]

    out = Path(opts.out) if opts.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "rehearse.jsonl").write_text("")

    def emit(row: dict) -> None:
        line = json.dumps(row, default=str)
        print(line, flush=True)
        if out:
            with open(out / "rehearse.jsonl", "a") as f:
                f.write(line + "\n")

    for j in skipped:
        emit(row_of(j, None, 0.0) | {"wall_s": None})
    mem_before = gpu_memory_used()
    t0 = time.monotonic()
    rows, not_run = run_batch(jobs, opts, gpus, emit)
    for j in not_run:
        emit(row_of(j, None, 0.0, "not run: batch deadline") | {"wall_s": None})
    from kit.sglang.versions import importable_version

    summary = summarize(rows)
    summary.update(
        batch_wall_s=round(time.monotonic() - t0, 1),
        gpus=gpus,
        per_gpu=opts.per_gpu,
        not_rehearsable=[j.case for j in skipped],
        not_run=[j.name for j in not_run],
        version=opts.version or importable_version() or REHEARSAL_RELEASE,
        end_check="per rehearsal: its own processes gone and holding no GPU memory (nvidia-smi compute apps); "
        "per batch: every GPU's memory back to its level before the first start",
    )
    if mem_before is not None:
        from kit.rehearsal.runner import settled_memory

        after = settled_memory(mem_before, wait=30)
        summary["gpu_memory_batch"] = {
            "before_mib": mem_before,
            "after_mib": after,
            "returned": None if after is None else all(a <= b + 64 for a, b in zip(after, mem_before)),
        }
    emit(summary)
    if out:
        for j in jobs:
            report = Path(j.out) / "report.json" if j.out else None
            if j.case in ("seed", "seed-fix") and report and report.exists():
                shutil.copy(report, out / f"{j.case}{'' if j.width == 1 else f'-tp{j.width}'}.report.json")
        # the table is bench/rehearse_table.py's, run as its own command (it reads this module's cases)
        table = Path(__file__).with_name("rehearse_table.py")
        done = subprocess.run([sys.executable, str(table), str(out / "rehearse.jsonl")], capture_output=True, text=True)
        print((done.stdout.strip().splitlines() or [done.stderr.strip()])[-1], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
