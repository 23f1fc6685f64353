"""`python -m kit oracle`: the accept length a draft *should* get, measured offline on CPU.

The target runs once over its own greedy continuation (teacher forcing) through the kit's engine
(`kit.reference.target.RaggedTarget` on fp32 products, `ORACLE_PLAN`), capturing the aux states in the same
pass; the draft extends over the whole sequence; at every position the draft tree is expanded as SGLang would
(`kit.reference.speculate.draft_trees`) and we count how many of the target's next greedy tokens it holds.

Reported (SGLang's definitions, bonus token included):
* `accept_length`: the decode walk (after the prefill token: accept, jump, repeat), the server log's `accept len`;
* `meta_accept_length`: completion_tokens / spec_verify_ct as in `/generate` meta_info;
* `position_accept_length`: the mean over every position (less noisy, not what SGLang shows);
* `depth_rates[d]`: share of positions whose first d+1 draft tokens were all accepted;
* `histogram`: accepted draft tokens per verify step of the walk.

Fault switches reproduce the seed: `--no-aux-capture` (single final state, fc bypassed), `--algorithm EAGLE`
(aux off + target head), `--layer-shift 1`, `--drop-keys-version V [--drop-keys-layout speculators]` (the keys
that release's loader drops silently; `kit.sglang.loader.DROPS_SPECULATORS_KEYS` is one).

    python -m kit oracle [--draft DIR] [--speculative-num-steps 3 --speculative-eagle-topk 1 ...] [--json]
    python -m kit oracle --hidden-states CAPTURE_DIR --draft DIR [--target T]   # on captured target states
    python -m kit oracle --token-path CAPTURE_DIR --draft DIR [--target T]      # this forward on that capture's text
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Self

import torch

from kit import config as kconfig
from kit.checkpoint.load_sim import dropped_keys
from kit.config import opt
from kit.findings import KitInputError
from kit.models import cache_dir, chat_ids, files_id, result_path, target_id, write_cache_json
from kit.prompts import builtin_prompts, interleave_kinds, load_prompts_jsonl
from kit.reference.captured import Capture, EmbeddingTarget, read_capture, write_capture
from kit.reference.draft_io import load_draft
from kit.reference.speculate import Wiring, capture_points_for, draft_trees, prepare_draft, walk_tree
from kit.reference.target import MODULE_PATH, Piece, RaggedTarget, decoder_of
from kit.sglang.loader import DROPS_SPECULATORS_KEYS
from kit.sglang.params import SpecParams

HELP = "expected accept length of a draft (offline teacher forcing, SGLang tree rules, fault switches)"


@dataclass
class OracleConfig:
    target: str = opt("target: 'embedded' or a local HF model dir", "embedded")
    draft: str | None = opt("draft dir (default: the kit's shipped demo draft)")
    quick: bool = opt("fewer, shorter prompts", False)
    prompts: str | None = opt("JSONL prompt file (default: built-in eval prompts)")
    kind: str | None = opt("built-in prompt kind: chat, code, math")
    num_prompts: int = opt("prompts used (first N)", 8)
    max_new_tokens: int = opt("greedy continuation length", 64)
    spec: SpecParams = field(default_factory=lambda: SpecParams(3, 1, 4))
    aux_capture: bool = opt("fused aux states (--no-aux-capture: single final state)", True)
    layer_shift: int = opt("shift every capture point by this many layers", 0)
    algorithm: str = opt("EAGLE3, or EAGLE/NEXTN to replay that launch", "EAGLE3")
    drop_keys_version: str | None = opt("drop the keys this SGLang version's loader drops")
    drop_keys_layout: str = opt(
        "key names of the checkpoint served: sglang (as saved) or speculators (layers.0.*)",
        "sglang",
        choices=["sglang", "speculators"],
    )
    compare: bool = opt("also run the seed's faults side by side", False)
    hidden_states: str | None = opt(
        "capture folder (kit.reference.captured): run the draft on these target states instead of a target forward; "
        "--target then supplies only the embedding and head"
    )
    token_path: str | None = opt(
        "capture folder whose token ids (prompt + continuation) the target's forward runs on instead of its own "
        "greedy continuation: the server's text scored with this forward's states"
    )
    save_states: str | None = opt("also write this run's target states as a capture folder (for --hidden-states)")
    json: bool = opt("print one JSON document as the last line", False)


@dataclass
class OracleResult:
    """The oracle under one wiring (figures: the module docstring); `to_dict` leaves the walk out, adds two rates."""

    params: str  # SpecParams.label() of the resolved parameters
    wiring: str  # Wiring.describe()
    prompts: int  # prompts given (those with a continuation too short to verify are not measured)
    verify_steps: int  # verify steps of the decode walk
    accept_length: float
    meta_accept_length: float
    position_accept_length: float
    depth_rates: list
    histogram: dict  # accepted draft tokens -> verify steps (string keys once written)
    positions: int  # positions with the full draft depth ahead (position_accept_length, depth_rates)
    target_tokens: int
    target_time_s: float
    draft_steps: int
    draft_time_s: float
    accept_lengths: list = field(default_factory=list)  # per verify step of the decode walk (not written)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("accept_lengths")
        d["target_tokens_per_s"] = round(self.target_tokens / self.target_time_s, 1) if self.target_time_s else None
        d["draft_steps_per_s"] = round(self.draft_steps / self.draft_time_s, 1) if self.draft_time_s else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        """From its written entry (the derived rates dropped; `accept_lengths` reads as empty)."""
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass
class OracleSkipped:
    """A wiring `run_captured` could not measure: the capture lacks the target states it reads."""

    skipped: str  # why
    wiring: str  # Wiring.describe()

    to_dict = asdict


@dataclass
class OracleRun:
    """What `run_config` returns, caches and `kit oracle --json` prints: one result per wiring replayed
    (`to_dict`: keys in this order, the optional ones only when set)."""

    _OPTIONAL = ("reference_generation_s", "hidden_states", "token_path")

    draft: str  # the draft dir
    params: str  # SpecParams.label() of the resolved parameters
    reference_generation_s: float | None = None  # seconds to generate the target's continuations (None: a capture)
    hidden_states: dict[str, Any] | None = None  # a capture run: {"path", "source", "points"}
    token_path: str | None = None  # the capture folder whose text the target forward ran on (--token-path)
    results: dict[str, OracleResult | OracleSkipped] = field(default_factory=dict)  # wiring name -> result

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"draft": self.draft, "params": self.params}
        d |= {k: getattr(self, k) for k in self._OPTIONAL if getattr(self, k) is not None}
        d["results"] = {name: r.to_dict() for name, r in self.results.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Self:
        results = {
            name: OracleSkipped(**r) if "skipped" in r else OracleResult.from_dict(r)
            for name, r in d.get("results", {}).items()
        }
        return cls(d["draft"], d["params"], *(d.get(k) for k in cls._OPTIONAL), results=results)

    def written(self) -> OracleRun:
        """This run as a cached read returns it (through JSON: string keys, lists)."""
        return OracleRun.from_dict(json.loads(json.dumps(self.to_dict())))


# The module's own fp32 products on every machine, never a measured GEMM plan: cached results must not depend on
# whether this machine was quiet enough to measure a plan when the oracle first ran.
ORACLE_PLAN = MODULE_PATH


def continuations(target, tok, prompt_texts: list[str], max_new_tokens: int) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, the target's greedy continuation) per prompt, decoded together on `ORACLE_PLAN`; cached under
    $KIT_CACHE_DIR/oracle-refs by the target's weights, the prompt ids and the length."""
    from kit.reference.speculate import BatchDecoder, decode_all

    rows = [chat_ids(tok, p) for p in prompt_texts]
    ident = getattr(getattr(target, "config", None), "_name_or_path", "") or type(target).__name__
    n = sum(p.numel() for p in target.parameters())
    w = float(target.get_output_embeddings().weight[:4].detach().sum())
    blob = json.dumps({"t": ident, "n": n, "w": w, "rows": rows, "m": max_new_tokens})
    f = cache_dir() / "oracle-refs" / (hashlib.sha256(blob.encode()).hexdigest()[:16] + ".json")
    if f.exists():
        return [(r, c) for r, c in json.loads(f.read_text())]
    seqs = decode_all(BatchDecoder(target, plan=ORACLE_PLAN), rows, max_new_tokens, tok.eos_token_id)
    out = [(r, s.tokens) for r, s in zip(rows, seqs)]
    write_cache_json(f, out)
    return out


def accepted(tokens: list[int], parents: list[int], truth: list[int]) -> int:
    """Draft tokens accepted by greedy verification when the target's next tokens are `truth`."""
    return len(walk_tree(tokens, parents, lambda node, depth: truth[depth] if depth < len(truth) else None))


def evaluate(target, draft, seqs, params: SpecParams, wiring: Wiring = Wiring()) -> OracleResult:
    """Run the oracle over (prompt_ids, continuation) pairs."""
    return evaluate_each(target, draft, seqs, params, {"requested": wiring})["requested"]


def target_features(target, seqs, point_sets: list[list[int] | None]) -> tuple[list[list], float]:
    """Per capture point set, per sequence, the draft's features [N, H * len(points)] (None: the final post-norm
    state), from one teacher-forced `RaggedTarget` pass capturing the union of the sets; and its seconds."""
    L = target.config.get_text_config().num_hidden_layers
    union = sorted({p for pts in point_sets for p in (pts if pts is not None else [L])})
    runner = RaggedTarget(target, union, ORACLE_PLAN)
    t0 = time.perf_counter()
    seqs_all = [list(prompt) + list(cont) for prompt, cont in seqs]
    pieces = [Piece(runner.new_kv(len(S)), S, logits="last") for S in seqs_all]
    feats = [f for _, f in runner.forward(pieces)]
    H = feats[0].shape[-1] // len(union)

    def cols(f, pts: list[int]) -> torch.Tensor:  # the states at `pts`, cut from the union's features
        return torch.cat([f[:, union.index(p) * H : (union.index(p) + 1) * H] for p in pts], -1)

    with torch.inference_mode():
        final = [decoder_of(target).norm(cols(f, [L])) for f in feats] if None in point_sets else None
    return [final if pts is None else [cols(f, pts) for f in feats] for pts in point_sets], time.perf_counter() - t0


def evaluate_each(
    target, draft, seqs, params: SpecParams, wirings: dict[str, Wiring], capture=None
) -> dict[str, OracleResult]:
    """The oracle per named wiring over the same (prompt_ids, continuation) pairs, the target's features from one
    shared pass or from `capture` (a `kit.reference.captured.Capture`; `target` then only embedding and head)."""
    p = params.resolved()
    keep = [i for i, (_, cont) in enumerate(seqs) if len(cont) >= 2]  # a verify step needs two tokens
    if not keep:
        raise KitInputError("oracle: no continuation long enough to measure (raise --max-new-tokens)")
    measured = [seqs[i] for i in keep]
    drafts = {name: prepare_draft(draft, target, w) for name, w in wirings.items()}
    points = {name: capture_points_for(drafts[name], target, w) for name, w in wirings.items()}
    if capture is None:
        per_set, t_target = target_features(target, measured, list(points.values()))
    else:
        per_set = [[feats[i] for i in keep] for feats in map(capture.features, points.values())]
        t_target = 0.0
    return {
        name: _walk(drafts[name], measured, feats, p, w, t_target, len(seqs))
        for (name, w), feats in zip(wirings.items(), per_set)
    }


def save_capture(target, draft, seqs, out, wiring: Wiring = Wiring()) -> None:
    """Write the target states the oracle reads for `draft` under `wiring`, and the final state, over `seqs`, as a
    capture folder (`kit.reference.captured`)."""
    pts = capture_points_for(draft, target, wiring) or []
    (aux, final), _ = target_features(target, seqs, [pts, None])
    cfg = target.config.get_text_config()
    source = f"kit engine ({getattr(cfg, '_name_or_path', '') or type(target).__name__}, fp32)"
    ids, lens = [list(p) + list(c) for p, c in seqs], [len(p) for p, _ in seqs]
    write_capture(out, Capture(source, cfg.num_hidden_layers, cfg.hidden_size, pts, ids, lens, aux, final))


def _walk(d, seqs, feats_per_seq, p: SpecParams, wiring: Wiring, t_target: float, prompts: int) -> OracleResult:
    """The draft tree at every position of every sequence, then SGLang's decode walk over the accepted counts."""
    per_pos, walk, hist = [], [], {}
    t_draft, meta_tokens, n_tok, n_steps = 0.0, 0, 0, 0
    for (prompt, cont), feats in zip(seqs, feats_per_seq):
        S = list(prompt) + list(cont)
        n, N = len(prompt), len(S)
        t1 = time.perf_counter()
        with torch.inference_mode():
            dev = feats.device
            logits, aux, kv = d(
                torch.tensor([S[1:]], device=dev), feats[None, : N - 1], torch.arange(N - 1, device=dev)[None]
            )
        roots = list(range(n, N - 1))  # position of the last verified token
        last = [r - 1 for r in roots]
        trees = draft_trees(d, logits[0, last], aux[0, last], kv, prefix_len=roots, pos=last, p=p)
        t_draft += time.perf_counter() - t1
        n_tok += N
        n_steps += len(roots) * p.speculative_num_steps
        acc = {r: accepted(tk, pa, S[r + 1 : r + 1 + p.speculative_num_steps]) for r, (tk, pa, _) in zip(roots, trees)}
        per_pos += [a for r, a in acc.items() if r + p.speculative_num_steps < N]  # full depth available
        # the decode walk: the prefill token is S[n]; each verify step emits accepted + bonus
        r = n
        meta_tokens += 1
        while r < N - 1:
            a = acc[r]
            kept = min(a + 1, N - 1 - r)
            walk.append(kept)
            hist[a] = hist.get(a, 0) + 1
            meta_tokens += kept
            r += a + 1
    depth = [round(sum(a > j for a in per_pos) / max(len(per_pos), 1), 4) for j in range(p.speculative_num_steps)]
    return OracleResult(
        params=p.label(),
        wiring=wiring.describe(),
        prompts=prompts,
        verify_steps=len(walk),
        accept_length=round(sum(walk) / len(walk), 4),
        meta_accept_length=round(meta_tokens / len(walk), 4),
        position_accept_length=round(1 + sum(per_pos) / max(len(per_pos), 1), 4),
        depth_rates=depth,
        histogram={int(k): v for k, v in sorted(hist.items())},
        positions=len(per_pos),
        target_tokens=n_tok,
        target_time_s=round(t_target, 3),
        draft_steps=n_steps,
        draft_time_s=round(t_draft, 3),
        accept_lengths=walk,
    )


def wiring_from_config(cfg: OracleConfig, draft_dir) -> Wiring:
    dropped = dropped_keys(draft_dir, cfg.drop_keys_version, cfg.drop_keys_layout) if cfg.drop_keys_version else ()
    return Wiring(
        aux_capture=cfg.aux_capture, layer_shift=cfg.layer_shift, dropped_keys=dropped, algorithm=cfg.algorithm.upper()
    )


def seed_faults(draft_dir) -> dict[str, Wiring]:
    """The seed's three faults, each alone, plus correct wiring."""
    out = {
        "correct": Wiring(),
        "aux capture off": Wiring(aux_capture=False),
        "capture shifted +1": Wiring(layer_shift=1),
        "launched as EAGLE": Wiring(algorithm="EAGLE"),
    }
    with contextlib.suppress(KitInputError):
        dropped = dropped_keys(draft_dir, DROPS_SPECULATORS_KEYS, "speculators")
        out[f"keys dropped ({DROPS_SPECULATORS_KEYS}, speculators names)"] = Wiring(dropped_keys=dropped)
    return out


def prompt_rows(cfg: OracleConfig, ids_ok: bool = False) -> list[dict]:
    """The first cfg.num_prompts rows of the JSONL file (with `ids_ok` a row may carry "input_ids") or of the
    built-in eval prompts (kinds interleaved when none is named)."""
    rows = load_prompts_jsonl(cfg.prompts, ids_ok) if cfg.prompts else builtin_prompts(cfg.kind)
    if cfg.prompts is None and cfg.kind is None:
        rows = interleave_kinds(rows)
    return rows[: cfg.num_prompts]


def prompt_texts(cfg: OracleConfig) -> list[str]:
    return [r["prompt"] for r in prompt_rows(cfg)]


def run_config(cfg: OracleConfig, log=print) -> OracleRun:
    """Load target + draft, generate references once, evaluate the requested wiring(s)."""
    from kit.reference.llama import load_engine_target

    if cfg.hidden_states is not None:
        return run_captured(cfg, log)
    if cfg.quick and cfg.num_prompts == 8 and cfg.max_new_tokens == 64:
        cfg = replace(cfg, num_prompts=6, max_new_tokens=48)
    cfg.spec.resolved()  # bad parameters fail before any model work
    if cfg.target not in (None, "", "embedded"):  # and so do paths that do not exist
        kconfig.local_path(cfg.target, "--target", "a model directory or 'embedded'")
    draft_dir = _draft_dir(cfg, log)
    texts = prompt_texts(cfg)
    cached = _result_path(cfg, draft_dir, texts)
    fresh = cfg.save_states or cfg.token_path  # a capture is written, or read, by a run: never the cache
    if cached.exists() and not fresh:
        log(f"cached: {cached}")
        return OracleRun.from_dict(json.loads(cached.read_text()))
    target, tok = load_engine_target(cfg.target)
    draft = load_draft(draft_dir, target_model=target)
    t0 = time.perf_counter()
    seqs = token_path_seqs(cfg.token_path) if cfg.token_path else continuations(target, tok, texts, cfg.max_new_tokens)
    gen_s = time.perf_counter() - t0
    runs = seed_faults(draft_dir) if cfg.compare else {"requested": wiring_from_config(cfg, draft_dir)}
    if cfg.save_states:
        save_capture(target, draft, seqs, cfg.save_states)
        log(f"target states written to {cfg.save_states}")
    results = evaluate_each(target, draft, seqs, cfg.spec, runs)
    for name, r in results.items():
        log(f"{name:42s} accept length {r.accept_length:.3f}  ({r.wiring})")
    doc = OracleRun(
        draft=str(draft_dir),
        params=cfg.spec.resolved().label(),
        reference_generation_s=round(gen_s, 2),
        token_path=cfg.token_path,
        results=dict(results),
    ).written()
    if not cfg.token_path:
        write_cache_json(cached, doc.to_dict())
    return doc


def token_path_seqs(path: str) -> list[tuple[list[int], list[int]]]:
    """(prompt, continuation) ids of a capture folder (`--token-path`): another server's text scored with the
    forward here, so a gap between the two oracles splits into the text's share and the states'."""
    return read_capture(kconfig.local_path(path, "--token-path", "a capture folder")).seqs()


def run_captured(cfg: OracleConfig, log=print) -> OracleRun:
    """The oracle on a capture folder's target states, no target forward; a wiring whose states the capture
    lacks (a shifted point, no final state) is reported skipped."""
    cfg.spec.resolved()
    cap = read_capture(kconfig.local_path(cfg.hidden_states, "--hidden-states", "a capture folder"))
    draft_dir = _draft_dir(cfg, log)
    target = EmbeddingTarget(cfg.target, cap.num_hidden_layers)  # the embedding and head, read alone
    draft = load_draft(draft_dir, target_model=target)
    runs = seed_faults(draft_dir) if cfg.compare else {"requested": wiring_from_config(cfg, draft_dir)}
    results: dict[str, OracleResult | OracleSkipped] = {}
    for name, w in runs.items():
        try:
            results[name] = evaluate_each(target, draft, cap.seqs(), cfg.spec, {name: w}, capture=cap)[name]
        except KitInputError as e:
            if len(runs) == 1:
                raise
            results[name] = OracleSkipped(skipped=str(e), wiring=w.describe())
    for name, r in results.items():
        log(f"{name:42s} " + (r.skipped if isinstance(r, OracleSkipped) else f"accept length {r.accept_length:.3f}"))
    return OracleRun(
        draft=str(draft_dir),
        params=cfg.spec.resolved().label(),
        hidden_states={"path": str(cfg.hidden_states), "source": cap.source, "points": cap.points},
        results=results,
    ).written()


def _draft_dir(cfg: OracleConfig, log) -> Path:
    if cfg.draft is not None:
        return Path(kconfig.local_path(cfg.draft, "--draft", "a draft directory"))
    from kit.models import shipped_draft

    draft_dir = shipped_draft()
    log(f"shipped draft: {draft_dir}")
    return draft_dir


def _result_path(cfg: OracleConfig, draft_dir, texts: list[str]):
    """Where this run's results are cached ($KIT_CACHE_DIR/oracle-results), keyed by the settings, the target,
    the draft's files, the prompt texts and this package's source."""
    from kit.models import resolve_target  # looked up at call time (tests replace it)

    key = {
        "cfg": {k: v for k, v in asdict(cfg).items() if k != "json"},
        "target": target_id(resolve_target(cfg.target)),
        "draft": files_id(draft_dir),
        "texts": texts,
    }
    return result_path("oracle-results", key, list(Path(__file__).parent.glob("*.py")))


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, OracleConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(OracleConfig, args)
    doc = run_config(cfg, log=(lambda *_: None) if cfg.json else print)
    if cfg.json:
        print(json.dumps(doc.to_dict()))
    else:
        for name, r in doc.results.items():
            if isinstance(r, OracleSkipped):
                print(f"{name}: skipped: {r.skipped}")
                continue
            print(
                f"{name}: accept length {r.accept_length} (meta {r.meta_accept_length}, all positions "
                f"{r.position_accept_length}), depth rates {r.depth_rates}, histogram {r.histogram}"
            )
    return 0
