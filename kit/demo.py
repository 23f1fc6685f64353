"""`python -m kit demo`: the main job — the numbered notebooks, executed headless, in order.

On the embedded default (SmolLM2-135M target, the kit's shipped demo draft or, with `--train-draft`, one trained
on this CPU, and the CPU reference server) the run replays the seed's story, names its faults and measures what
the fix buys (the fixed and the seed's launch's speedup over no speculation, each with a 95% interval); with
`--target/--draft/--launch` it runs the same pipeline on a user's own files. Everything lands in
`runs/<timestamp>/`: the executed notebooks, figures, `steps/*.json`, `summary.json` and `summary.md`.
Notebooks 01-03 run side by side (`SIDE_BY_SIDE`), their output printed one after another; 04 and 05 run alone.

    python -m kit demo                      # the seed replayed on the embedded default
    python -m kit demo --quick              # smaller settings (what the tests run)
    python -m kit demo --target T --draft D --launch "python -m sglang.launch_server ..."
    python -m kit demo --gpu                # the same story on real SGLang (GPU host, bundle installed): kit/demo_gpu.py
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import io
import json
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kit import config as kconfig
from kit.config import opt
from kit.findings import KitInputError

HELP = "run the notebooks headless on the embedded default (or your files) into runs/<timestamp>/"

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"


@dataclass
class DemoConfig:
    target: str | None = opt("target model dir or config.json (default: embedded SmolLM2)")
    draft: str | None = opt("draft checkpoint dir (default: the kit's shipped demo draft)")
    launch: str | None = opt("your SGLang launch command (default: the seed's)")
    runs_dir: str | None = opt(
        "parent directory of the run folder (default: $KIT_RUNS_DIR, else runs/ at the checkout's top)"
    )
    quick: bool = opt("small settings: fewer prompts and tokens, quick draft", False)
    train_draft: bool = opt(
        "train the demo draft on this CPU (minutes, then cached) instead of using the shipped one", False
    )
    only: list[str] | None = opt("run only notebooks whose name contains one of these")
    gpu: bool = opt("on a GPU host with the SGLang bundle: the seed's story on real SGLang", False)
    quiet_check: bool = opt("before benchmarking, wait up to 60 s for a quiet machine (kit bench --quiet-check)", False)
    breakeven: str | None = opt(
        "a breakeven.json of bench/gpu_breakeven.py: the summary (and notebook 05) say from "
        "what target size EAGLE-3 pays on that GPU"
    )


def notebook_paths(only: list[str] | None = None) -> list[Path]:
    nbs = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if only:
        nbs = [p for p in nbs if any(o in p.name for o in only)]
    return nbs


def notebook_parameters(cfg: DemoConfig, out_dir: Path) -> dict:
    """Parameters injected into every notebook (each notebook ignores those it does not declare)."""
    params = dict(out_dir=str(out_dir), quick=cfg.quick, train_draft=cfg.train_draft, quiet_check=cfg.quiet_check)
    given = {k: getattr(cfg, k) for k in ("target", "draft", "launch", "breakeven")}
    return params | {k: v for k, v in given.items() if v is not None}


def declared_parameters(nb_path: Path) -> set[str]:
    """Names assigned in the notebook's `parameters` cell, so we inject only what it declares."""
    nb = json.loads(nb_path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code" and "parameters" in cell.get("metadata", {}).get("tags", []):
            tree = ast.parse("".join(cell["source"]))
            return {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    raise KitInputError(f"{nb_path}: no cell tagged 'parameters'")


# notebook metadata JupyterLab adds on save that the committed notebooks do not carry
_SAVED_ONLY_METADATA = ("language_info", "widgets")
_SAVED_ONLY_CELL_METADATA = ("execution", "scrolled")


def strip_saved_outputs(model: dict, path: str, contents_manager, **kwargs) -> None:
    """Jupyter pre-save hook (`jupyter_server_config.py`): the kit's own notebooks are saved without outputs,
    execution counts and session metadata, byte for byte as committed, so `git status` stays clean."""
    if model.get("type") != "notebook":
        return
    if (Path(contents_manager.root_dir) / path).resolve().parent != NOTEBOOKS.resolve():
        return
    nb = model["content"]
    for key in _SAVED_ONLY_METADATA:
        nb.get("metadata", {}).pop(key, None)
    for cell in nb["cells"]:
        for key in _SAVED_ONLY_CELL_METADATA:
            cell.get("metadata", {}).pop(key, None)
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None


class _CellEcho:
    """A running cell's stdout, indented under the step line, so a long step shows its progress as it runs."""

    def __init__(self, stream=None):
        self.stream, self.at_line_start = stream or sys.stdout, True

    def write(self, text: str) -> int:
        for piece in text.splitlines(keepends=True):
            if self.at_line_start and piece.strip():
                self.stream.write("      ")
            self.stream.write(piece)
            self.at_line_start = piece.endswith("\n")
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def _ipc_kernel_manager():
    """A kernel manager over Unix sockets (no warning that a TCP kernel runs unencrypted), each kernel with its own
    socket prefix: jupyter_client numbers ipc sockets from 1 per prefix, so kernels started at once would collide."""
    from jupyter_client.manager import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kw):
            ip = os.path.join(tempfile.gettempdir(), f"kit-kernel-{uuid.uuid4().hex[:12]}")
            super().__init__(transport="ipc", ip=ip, **kw)

    return IPCKernelManager


def execute_notebook(nb_path: Path, out_dir: Path, params: dict, timeout_s: int = 1800, echo=None) -> Path:
    import papermill as pm

    # papermill warns about every parameter it cannot type-infer (a launch command with '='): injected correctly
    logging.getLogger("papermill").setLevel(logging.ERROR)
    declared = declared_parameters(nb_path)
    out_nb = out_dir / nb_path.name
    pm.execute_notebook(
        str(nb_path),
        str(out_nb),
        cwd=str(out_dir),
        kernel_name="python3",
        parameters={k: v for k, v in params.items() if k in declared},
        progress_bar=False,
        request_save_on_cell_execute=True,
        execution_timeout=timeout_s,
        stdout_file=echo,
        kernel_manager_class=_ipc_kernel_manager(),
    )
    return out_nb


def prefetch(cfg: DemoConfig) -> list[threading.Thread]:
    """Fill in the background, while the first notebooks run, what later ones would wait for on a first run: the
    embedded target converted from its GGUF (notebook 02) and SGLang's parser side environment and daemon (04's
    lint). Both are lock-protected (a notebook arriving first waits for the one build) and a failure is left for
    the notebook to report. Both run niced, so the notebooks keep the cores; where Linux groups the scheduler by
    session (`sched_autogroup_enabled`) they share them with the 01-03 kernels, which time nothing."""
    from kit.models import embedded_dir
    from kit.sglang.parser import warm

    jobs = [("parser", warm)]
    if cfg.target is None:  # the embedded default
        jobs.insert(0, ("target", embedded_dir))

    def fill(job) -> None:
        with contextlib.suppress(OSError, AttributeError):  # on Linux this thread, and its children
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        with contextlib.suppress(Exception):  # the notebook that needs it meets the same error and reports it
            job()

    threads = [threading.Thread(target=fill, args=(job,), name=f"kit-demo-{name}", daemon=True) for name, job in jobs]
    for t in threads:
        t.start()
    return threads


# Notebooks that start no server and time nothing a figure shows run side by side: mostly single-threaded imports
# and model loads (01 ~7 s, 02 ~8 s, 03 ~20 s cached on a 2-core EPYC). 04 and 05 start servers and run alone
# (04 beside them measured no faster cached, and slower uncached: its lint waited on the niced parser build).
SIDE_BY_SIDE = ("01_", "02_", "03_")


def notebook_groups(nbs: list[Path]) -> list[list[Path]]:
    """Consecutive notebooks in SIDE_BY_SIDE form one group run at once; every other notebook is its own group."""
    groups: list[list[Path]] = []
    for nb in nbs:
        side = nb.name.startswith(SIDE_BY_SIDE)
        if side and groups and groups[-1][0].name.startswith(SIDE_BY_SIDE):
            groups[-1].append(nb)
        else:
            groups.append([nb])
    return groups


def _run_group(group: list[Path], run_dir: Path, params: dict, index: dict[Path, int], total: int) -> dict:
    """Execute a group's notebooks at once, the first echoing live and the others' output printed when each is done
    (the terminal reads as one notebook after another): {path: seconds or the exception it raised}."""
    held = {nb: io.StringIO() for nb in group[1:]}
    t0 = time.perf_counter()

    def one(nb: Path):
        try:
            execute_notebook(nb, run_dir, params, echo=_CellEcho(held.get(nb)))
        except Exception as e:  # noqa: BLE001  (reported in notebook order by the caller)
            return e
        return round(time.perf_counter() - t0, 1)

    for nb in group:
        beside = f" (beside {group[0].name})" if nb is not group[0] else ""
        print(f"[{index[nb]}/{total}] {nb.name} ...{beside}", flush=True)
    with ThreadPoolExecutor(len(group), thread_name_prefix="kit-demo-nb") as pool:
        futures = {nb: pool.submit(one, nb) for nb in group}
        out = {}
        for nb in group:
            out[nb] = futures[nb].result()
            if nb in held:
                sys.stdout.write(held[nb].getvalue())
            if not isinstance(out[nb], Exception):
                print(f"[{index[nb]}/{total}] {nb.name} done in {out[nb]} s", flush=True)
    return out


def run_demo(cfg: DemoConfig) -> Path:
    from kit.measure.machine import brief as machine_brief
    from kit.summary import collect, fmt_speedup, new_run_dir

    for p, label in ((cfg.target, "--target"), (cfg.draft, "--draft")):
        if p is not None and not Path(p).exists():
            raise KitInputError(f"{p}: {label} path does not exist")
    nbs = notebook_paths(cfg.only)
    if not nbs:
        raise KitInputError(f"{NOTEBOOKS}: no notebooks to run")
    run_dir = new_run_dir(cfg.runs_dir, exist_ok=False)
    params = notebook_parameters(cfg, run_dir.resolve())
    prefetch(cfg)
    timings = {}
    print(f"kit demo: {len(nbs)} notebooks -> {run_dir}", flush=True)
    index = {nb: i for i, nb in enumerate(nbs, 1)}
    for group in notebook_groups(nbs):
        for nb, got in _run_group(group, run_dir, params, index, len(nbs)).items():
            if isinstance(got, Exception):  # papermill raises PapermillExecutionError with the failing cell
                msg = str(got).strip().splitlines()
                print(
                    f"kit demo: {nb.name} failed: {msg[-1] if msg else got}\n"
                    f"  the executed notebook with the failing cell is {run_dir / nb.name};"
                    f" open it, or rerun just this step with --only {nb.name[:2]}",
                    file=sys.stderr,
                )
                collect(run_dir, {"failed": nb.name, "timings_s": timings})
                raise SystemExit(1)
            timings[nb.stem] = got
    summary = collect(run_dir, {"timings_s": timings, "config": kconfig.to_dict(cfg)})
    a = summary["accept_length"]
    print(
        f"kit demo: accept length seed_launch={a['seed_launch']} fixed_launch={a['fixed_launch']} oracle={a['oracle']}"
    )
    sp = summary["speedup"]
    print(
        f"kit demo: speedup over no speculation seed_launch={fmt_speedup(sp['seed_launch'])}"
        f" fixed_launch={fmt_speedup(sp['fixed_launch'])}"
    )
    if any((v or {}).get("inconclusive") for v in sp.values()):
        print("kit demo: the accept lengths above do not depend on the clock: they are this run's verdict")
    for label, m in (summary.get("machine_watch") or {}).items():
        print(f"kit demo: {label}: {machine_brief(m)}")
    print(f"kit demo: summary -> {run_dir / 'summary.md'}")
    return run_dir


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, DemoConfig)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = kconfig.from_namespace(DemoConfig, args)
    if cfg.breakeven is not None:  # checked before any work; the notebooks run elsewhere, so an absolute path
        from kit.measure.breakeven import load

        load(cfg.breakeven)
        cfg = dataclasses.replace(cfg, breakeven=str(Path(cfg.breakeven).resolve()))
    if cfg.gpu:
        from kit.demo_gpu import run_gpu_demo

        run_gpu_demo(cfg)
    else:
        run_demo(cfg)
    return 0
