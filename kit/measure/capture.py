"""`kit launch --capture-hidden DIR`: the target's hidden states captured inside the user's own SGLang server.

Why: the oracle's expected accept length needs the target's states at the draft's capture points along the
target's greedy path. The kit computes them itself when the target fits one machine; a 1T-parameter TP8 target
only runs in the serving stack that already holds it. This module runs the user's launch once more, with the
recorder `kit.serving.capture_hook` on SGLang's path, sends a bounded set of prompts one at a time (greedy), and
writes DIR in the format of `kit.reference.captured`, which `kit oracle --hidden-states DIR --draft D` reads.

What changes in the launch (each change printed with its reason, `plan_capture`): speculation off (the target
alone, greedy), CUDA graphs off and torch.compile off (Python hooks must see every forward), the radix cache off
(a shared chat-template prefix would skip its states), chunked prefill larger than the longest request, the
overlap scheduler off (each decode forward is the previous token's), and the recorder on PYTHONPATH with its
environment. Nothing of it exists in a launch that does not ask for a capture.

Capture points: the draft's own (`eagle_config.eagle_aux_hidden_state_layer_ids` through
`kit.checkpoint.aux_ids.capture_points`: SGLang's rule for the target's class, and the oracle's reading where the
two differ, as for Kimi-K2.5's class), plus the final post-norm state.
Its size is bounded before the start: tokens x (points + 1) x hidden x 4 bytes.

    python -m kit launch --model-path T --speculative-algorithm EAGLE3 --speculative-draft-model-path D \\
        --capture-hidden runs/cap --num-prompts 24 --max-new-tokens 128
    python -m kit oracle --hidden-states runs/cap --draft D --target T
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.findings import KitInputError
from kit.measure.verdict import SERVER_CAPTURE
from kit.serving.after_import import install_as_sitecustomize
from kit.serving.launch import Change, drop_option, recorder_first

CHUNKS = ".chunks"
SITE = ".site"
# launch flags that would route forwards around the recorder's Python hooks, or skip states
SPECULATIVE_PREFIX = "--speculative-"


@dataclass
class CapturePlan:
    spec: Any  # kit.serving.launch.LaunchSpec: the launch as it runs for the capture
    changes: list[Change]
    out: str
    points: list[int]
    num_hidden_layers: int
    hidden_size: int
    prompt_ids: list[list[int]]
    max_new_tokens: int
    version: str
    target_dir: str
    draft_dir: str | None
    notes: list[str] = field(default_factory=list)

    @property
    def max_tokens(self) -> int:
        return token_bound(self.prompt_ids, self.max_new_tokens)

    @property
    def max_bytes(self) -> int:
        """The most the capture's states take: tokens x (points + final) x hidden x 4 bytes (float32)."""
        return self.max_tokens * (len(self.points) + 1) * self.hidden_size * 4

    def render(self, engine: str = "sglang") -> str:
        lines = [
            f"capture of the target's hidden states on SGLang {self.version}: points {self.points} + the final "
            f"state, {len(self.prompt_ids)} prompts x up to {self.max_new_tokens} new tokens, one at a time, greedy",
            f"  bounded size: {self.max_tokens} tokens x {len(self.points) + 1} x {self.hidden_size} x 4 bytes = "
            f"{self.max_bytes / 2**20:.1f} MiB, written to {self.out}",
            "changes:",
        ]
        lines += [f"  {c.flag}: {c.original!r} -> {c.new!r}  ({c.reason})" for c in self.changes]
        lines += [f"note: {n}" for n in self.notes]
        lines += ["command:", "  " + self.spec.command(engine)]
        return "\n".join(lines)


def token_bound(prompt_ids: list[list[int]], max_new_tokens: int) -> int:
    """The most tokens a capture records: every prompt plus its new tokens."""
    return sum(len(p) + max_new_tokens for p in prompt_ids)


def capture_points(draft_dir: str | os.PathLike, target_cfg, version: str) -> tuple[list[int], list[str]]:
    """The points of the draft's ids (kit.checkpoint.aux_ids): as SGLang wires them for this target class, and as
    the oracle reads them (the Llama "+1" rule, `kit.reference.speculate.capture_points_for`); both are captured,
    so `kit oracle --hidden-states` finds its points whichever the class's rule is. Returns (points, notes)."""
    from kit.checkpoint.aux_ids import capture_points as points_of
    from kit.hf import HFConfig
    from kit.sglang.draft_config import read_draft_config

    f = Path(draft_dir) / "config.json"
    try:
        dcfg = read_draft_config(HFConfig.of(json.loads(f.read_text())))
    except (OSError, ValueError) as e:
        raise KitInputError(f"{f}: cannot read the draft's config ({e})") from None
    L = int(target_cfg.text["num_hidden_layers"])
    wired = points_of("sglang", dcfg.aux_layer_ids, L, target_cfg.architecture, version)
    read = points_of("sglang", dcfg.aux_layer_ids, L, "LlamaForCausalLM", version)
    notes = (
        []
        if wired == read
        else [f"SGLang wires points {wired} for {target_cfg.architecture}, the oracle reads {read}: both are captured"]
    )
    return sorted(set(wired) | set(read)), notes


def prompt_ids(target_dir: str | os.PathLike, prompts: str | None, num_prompts: int) -> list[list[int]]:
    """The oracle's prompts (`kit.reference.oracle.prompt_rows`: built-in eval prompts or a JSONL file) as token
    ids: a row's "input_ids" as they are (a target whose tokenizer is a stand-in), checked against the target's
    vocabulary; a text row as one user turn in the target's chat template (`kit.models.chat_ids`). The tokenizer
    is loaded only when a text row needs it."""
    from kit.hf import HFConfig
    from kit.models import chat_ids, load_tokenizer
    from kit.reference.oracle import OracleConfig, prompt_rows

    rows = prompt_rows(OracleConfig(prompts=prompts, num_prompts=num_prompts), ids_ok=True)
    vocab = HFConfig.of(json.loads((Path(target_dir) / "config.json").read_text())).text.get("vocab_size")
    for r in rows:
        if vocab is not None and "input_ids" in r and max(r["input_ids"]) >= int(vocab):
            raise KitInputError(
                f"--prompts {prompts}: row {r['id']} has token id {max(r['input_ids'])}, past the target's "
                f"vocab_size {vocab}"
            )
    tok = load_tokenizer(target_dir) if any("input_ids" not in r for r in rows) else None
    return [list(r["input_ids"]) if "input_ids" in r else chat_ids(tok, r["prompt"]) for r in rows]


def plan_capture(
    spec,
    capture_hidden: str,
    prompts: str | None = None,
    num_prompts: int = 8,
    max_new_tokens: int = 64,
    sglang_version: str | None = None,
    port: int | None = None,
) -> CapturePlan:
    """The launch `spec` changed for a capture into `capture_hidden` (nothing is started or written)."""
    from kit.hf import HFConfig
    from kit.models import resolve_target
    from kit.sglang.flags import COMPILE_ON, graphs_off, table_for
    from kit.sglang.versions import default_release, importable_version

    version = sglang_version or importable_version() or default_release()
    if num_prompts < 1 or max_new_tokens < 1:
        raise KitInputError("--num-prompts and --max-new-tokens must be >= 1 for a capture")
    out = Path(capture_hidden)
    if out.exists() and any(out.iterdir()) and not (out / "capture.json").exists():
        raise KitInputError(f"--capture-hidden {out}: exists and is not a capture folder; choose another")
    target_dir = resolve_target(spec.model_path)
    target_cfg = HFConfig.of(json.loads((target_dir / "config.json").read_text()))
    draft = spec.speculative_draft_model_path
    if not draft:
        raise KitInputError(
            "--capture-hidden: the launch names no draft (--speculative-draft-model-path): its config gives the "
            "capture points"
        )
    if not (Path(draft) / "config.json").is_file():
        raise KitInputError(f"--speculative-draft-model-path {draft}: no config.json there (a local draft folder)")
    points, notes = capture_points(draft, target_cfg, version)
    ids = prompt_ids(target_dir, prompts, num_prompts)
    longest = max(len(p) for p in ids) + max_new_tokens
    opts = table_for(version).by_option()
    changes: list[Change] = []
    clear = {f: None for f in ("speculative_algorithm", "speculative_draft_model_path", "speculative_draft_model_revision",
                               "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
                               "speculative_draft_attention_backend")}  # fmt: skip
    for name in clear:
        if getattr(spec, name) is not None:
            changes.append(Change("--" + name.replace("_", "-"), getattr(spec, name), None, "the target alone, greedy"))
    extra = list(spec.extra_args)
    for a in [a.split("=", 1)[0] for a in extra if a.startswith(SPECULATIVE_PREFIX)]:
        o = opts.get(a)
        extra, old = drop_option(extra, a, bool(o is None or o.get("nargs") != 0))
        if old is not None:
            changes.append(Change(a, old, None, "the target alone, greedy"))
    graphs = graphs_off(version)
    wanted = [
        *[(graphs[i], graphs[i + 1] if i + 1 < len(graphs) and not graphs[i + 1].startswith("--") else None)
          for i in range(len(graphs)) if graphs[i].startswith("--")],
        ("--disable-radix-cache", None),
        ("--disable-overlap-schedule", None),
    ]  # fmt: skip
    reasons = {
        "--disable-radix-cache": "a prefix served from the radix cache skips its states (the chat template's)",
        "--disable-overlap-schedule": "each decode forward carries the token sampled by the one before",
    }
    for opt, value in wanted:
        if opt not in opts:
            continue
        extra, old = drop_option(extra, opt, value is not None)
        extra += [opt] if value is None else [opt, value]
        if str(old) != str(value or True):
            changes.append(
                Change(opt, old, value or True, reasons.get(opt, "every forward through Python: the hooks see it"))
            )
    for opt in (o for o in COMPILE_ON if o in opts):
        extra, old = drop_option(extra, opt, False)
        if old is not None:
            changes.append(Change(opt, True, None, "every forward through Python: the hooks see it"))
    chunk = spec.chunked_prefill_size
    new_chunk = chunk if chunk is not None and (chunk == -1 or chunk >= longest) else max(longest, 8192)
    if new_chunk != chunk:
        changes.append(
            Change(
                "--chunked-prefill-size", chunk, new_chunk, f"one prefill forward per prompt ({longest} tokens at most)"
            )
        )
    out_abs = out.resolve()
    site = out_abs / SITE
    pp = recorder_first(str(site), spec.env, changes)
    from kit.serving.capture_hook import BUDGET_ENV, CAPTURE_ENV, POINTS_ENV

    env = {
        **spec.env,
        "PYTHONPATH": pp,
        CAPTURE_ENV: str(out_abs / CHUNKS),
        POINTS_ENV: ",".join(map(str, points)),
        # the bound plus the warm-up and closing requests (`send_requests`)
        BUDGET_ENV: str(token_bound(ids, max_new_tokens) + len(warmup_ids(ids)) + WARMUP_TOKENS + 1),
    }
    changes.append(Change(CAPTURE_ENV, None, env[CAPTURE_ENV], f"the recorder's chunks (points {points} + final)"))
    new = spec.replace(**clear, extra_args=extra, chunked_prefill_size=new_chunk, env=env)
    if port is not None:
        new = new.replace(port=port)
    if (spec.tp_size or 1) > 1:
        notes.append(f"TP{spec.tp_size}: rank 0 writes the states (they are whole on every rank after the all-reduce)")
    return CapturePlan(
        spec=new,
        changes=changes,
        out=str(out_abs),
        points=points,
        num_hidden_layers=int(target_cfg.text["num_hidden_layers"]),
        hidden_size=int(target_cfg.text["hidden_size"]),
        prompt_ids=ids,
        max_new_tokens=max_new_tokens,
        version=version,
        target_dir=str(target_dir),
        draft_dir=str(draft),
        notes=notes,
    )


def install_recorder(plan: CapturePlan) -> None:
    """The recorder as `sitecustomize.py` in the plan's site folder; an empty chunk folder beside it."""
    out = Path(plan.out)
    site, chunks = out / SITE, out / CHUNKS
    shutil.rmtree(chunks, ignore_errors=True)
    chunks.mkdir(parents=True)
    site.mkdir(parents=True, exist_ok=True)
    install_as_sitecustomize(Path(__file__).parents[1] / "serving" / "capture_hook.py", site)


WARMUP_TOKENS = 8


def warmup_ids(ids: list[list[int]]) -> list[int]:
    """The warm-up request's prompt: the first prompt's first half (no prompt of the run, so assembly skips it)."""
    return ids[0][: max(1, len(ids[0]) // 2)]


def send_requests(
    base_url: str, ids: list[list[int]], max_new_tokens: int, engine: str = "sglang", timeout_s: float = 600.0
):
    """A short warm-up request (a first request compiles kernels), then each prompt by token ids, one at a time,
    greedy, through the kit's client, then a one-token request whose prefill makes the recorder write the last
    request's decode forwards. Returns (a record per prompt, seconds the prompts took)."""
    import asyncio
    from types import SimpleNamespace

    import httpx

    from kit.measure.client import run_sync, send_one

    def opts(n: int):
        return SimpleNamespace(max_new_tokens=n, temperature=0.0, ignore_eos=False, stream=False)

    async def run():
        recs = []
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as c:
            await send_one(c, base_url, "sglang", warmup_ids(ids), opts(WARMUP_TOKENS), None, engine=engine)
            t0 = time.perf_counter()
            for p in ids:
                recs.append(await send_one(c, base_url, "sglang", p, opts(max_new_tokens), None, engine=engine))
            secs = time.perf_counter() - t0
            await send_one(c, base_url, "sglang", ids[0][:1], opts(1), None, engine=engine)
            await asyncio.sleep(0.5)
        return recs, secs

    return run_sync(run())


def read_chunks(chunk_dir: str | os.PathLike) -> tuple[list[dict], list[dict]]:
    """(forwards in order, the recorder's other index lines: attach, errors, budget)."""
    import torch

    d = Path(chunk_dir)
    index = d / "index.jsonl"
    forwards, events = [], []
    if not index.exists():
        return forwards, events
    for line in index.read_text().splitlines():
        try:
            obs = json.loads(line)
        except ValueError:
            continue
        if obs.get("kind") != "chunk":
            events.append(obs)
            continue
        forwards += torch.load(d / obs["file"], map_location="cpu", weights_only=True)
    return forwards, events


def assemble(
    forwards: list[dict],
    requests: list[tuple[list[int], list[int] | None]],
    points: list[int],
    num_hidden_layers: int,
    hidden_size: int,
    source: str,
):
    """The recorder's forwards -> a `kit.reference.captured.Capture`, one request after another: its prefill is
    the first extend forward (after the previous request's) whose ids are the prompt; its decode forwards follow,
    one token each, the tokens sampled before (checked against the reply's `output_ids`). The reply's last token
    is never fed to the target, so its row is zeros (the oracle reads rows [0, N-1)). A request whose prefill
    is missing (the budget) is left out and named in `notes`."""
    import torch

    from kit.reference.captured import Capture

    ids_out, lens, aux, final, notes = [], [], [], [], {"missing": [], "mismatch": []}
    k = len(points) * hidden_size
    i = 0
    for r, (prompt, output) in enumerate(requests):
        j = next(
            (j for j in range(i, len(forwards)) if forwards[j]["mode"] == "EXTEND" and forwards[j]["ids"].tolist() == prompt),
            None,
        )  # fmt: skip
        if j is None:
            notes["missing"].append(r)
            continue
        rows = [forwards[j]]
        want = None if output is None else len(output) - 1
        i = j + 1
        while i < len(forwards) and forwards[i]["mode"] == "DECODE" and (want is None or len(rows) - 1 < want):
            rows.append(forwards[i])
            i += 1
        fed = [int(t) for f in rows[1:] for t in f["ids"].tolist()]
        if output is not None and fed != [int(t) for t in output[: len(fed)]]:
            notes["mismatch"].append(r)
        seq = list(prompt) + (fed + [int(output[len(fed)])] if output is not None and len(output) > len(fed) else fed)
        a = torch.cat([_wide(f["aux"]) if f["aux"] is not None else torch.zeros(len(f["ids"]), 0) for f in rows])
        h = torch.cat([_wide(f["final"]) for f in rows])
        pad = len(seq) - a.shape[0]
        if pad:
            a = torch.cat([a, a.new_zeros(pad, k)])
            h = torch.cat([h, h.new_zeros(pad, hidden_size)])
        ids_out.append(seq)
        lens.append(len(prompt))
        aux.append(a.contiguous())
        final.append(h.contiguous())
    return Capture(
        source=source,
        num_hidden_layers=num_hidden_layers,
        hidden_size=hidden_size,
        points=list(points),
        ids=ids_out,
        prompt_lens=lens,
        aux=aux,
        final=final,
        notes={**notes, "last_row": "zeros: the last token is never fed to the target"},
    )


def _remove_partial(out: Path, existed: bool) -> None:
    """A failed capture leaves nothing: the recorder's folders, and the output folder when the run made it."""
    shutil.rmtree(out / CHUNKS, ignore_errors=True)
    shutil.rmtree(out / SITE, ignore_errors=True)
    if not existed and out.exists() and not any(out.iterdir()):
        out.rmdir()


def _wide(t):
    """float32 for the server's half-precision states; a wider dtype stays as it is."""
    import torch

    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def run_capture(plan: CapturePlan, engine: str = "sglang", ready_timeout: float = 900.0, log=print) -> dict:
    """Start the plan's server with the recorder, send the prompts, stop it, assemble the capture folder and remove
    the recorder's chunks. Returns a summary (tokens, bytes, seconds, tok/s while capturing)."""
    from kit.reference.captured import write_capture
    from kit.serving.capture_hook import ARMED
    from kit.serving.process import ServerProcess

    out = Path(plan.out)
    existed = out.exists()
    install_recorder(plan)
    t0 = time.monotonic()
    server = ServerProcess.from_spec(plan.spec, engine=engine, on_line=None)
    summary: dict[str, Any] = {"out": plan.out, "points": plan.points, "max_bytes": plan.max_bytes}
    try:
        with server:
            server.wait_ready(ready_timeout)
            summary["startup_s"] = round(time.monotonic() - t0, 1)
            (out / CHUNKS / ARMED).touch()
            log(f"kit launch: capturing {len(plan.prompt_ids)} requests at {server.base_url}")
            recs, secs = send_requests(server.base_url, plan.prompt_ids, plan.max_new_tokens, engine, ready_timeout)
            summary["requests_s"] = round(secs, 2)
    except BaseException:
        _remove_partial(out, existed)
        raise
    finally:
        summary["server_log_tail"] = server.tail(20)
    bad = [r.error for r in recs if not r.ok]
    completion = sum(r.completion_tokens or 0 for r in recs if r.ok)
    summary["output_tok_per_s"] = round(completion / max(summary["requests_s"], 1e-9), 1)
    forwards, events = read_chunks(Path(plan.out) / CHUNKS)
    errors = [e for e in events if e.get("kind") == "error"]
    if not any(e.get("kind") == "attached" for e in events):
        _remove_partial(out, existed)
        raise KitInputError(
            f"--capture-hidden: the recorder never attached to the target ({errors[:1] or 'no record'}); "
            f"server log: {' | '.join(server.tail(5))}"
        )
    requests = [(p, r.output_ids if r.ok else None) for p, r in zip(plan.prompt_ids, recs)]
    from kit.sglang.versions import importable_version

    cap = assemble(
        forwards,
        [q for q in requests if q[1] is not None],
        plan.points,
        plan.num_hidden_layers,
        plan.hidden_size,
        f"{SERVER_CAPTURE} (SGLang {importable_version() or plan.version}, {Path(plan.target_dir).name})",
    )
    cap.notes.update({"failed_requests": bad, "recorder_errors": errors[:5], "launch": plan.spec.command(engine)})
    write_capture(plan.out, cap)
    shutil.rmtree(Path(plan.out) / CHUNKS, ignore_errors=True)
    shutil.rmtree(Path(plan.out) / SITE, ignore_errors=True)
    size = sum(f.stat().st_size for f in Path(plan.out).iterdir() if f.is_file())
    summary.update(
        {
            "requests": len(cap.ids),
            "tokens": sum(len(s) for s in cap.ids),
            "bytes": size,
            "seconds": round(time.monotonic() - t0, 1),
            "missing": cap.notes["missing"],
            "mismatch": cap.notes["mismatch"],
            "failed_requests": bad,
        }
    )
    return summary


def main_capture(spec, cfg, engine: str = "sglang", log=None) -> int:
    """`kit launch --capture-hidden`: plan, print the plan and the bound, run, print the summary."""
    log = log or (lambda *a: print(*a, file=sys.stderr))
    plan = plan_capture(spec, cfg.capture_hidden, cfg.prompts, cfg.num_prompts, cfg.max_new_tokens, cfg.sglang_version)
    print(plan.render(engine))
    if cfg.dry_run:
        return 0
    summary = run_capture(plan, engine, cfg.ready_timeout, log=log)
    summary.pop("server_log_tail", None)
    print(json.dumps(summary) if cfg.json else f"kit launch: capture written to {plan.out}: {summary}")
    return 0
