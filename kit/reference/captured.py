"""Target hidden states captured along the target's greedy path: one folder format, and the oracle's input from it.

Why: a target too big for one machine (Kimi-K2.5: ~1T parameters, TP8) has its states captured by the serving
stack that holds it; every producer writes this one format and the oracle runs the draft on it as on the kit's own
forward. Besides the folder it needs only the target's embedding (and head, for `EAGLE`) from its checkpoint.

Folder layout (`write_capture` / `read_capture`):

    capture.json        {"format": 1, "source": "...", "num_hidden_layers": L, "hidden_size": H,
                         "points": [p, ...], "final": true, "requests": [{"prompt_len": n, "tokens": N}, ...]}
    states.safetensors  r{i}.ids   [N] int64: prompt + greedy continuation
                        r{i}.aux   [N, len(points) * H]: the residual entering layer p, per point, concatenated
                        r{i}.final [N, H]: the post-norm last hidden state (present when "final")

How to run:

    python -m kit oracle --save-states runs/states               # the kit's engine writes a capture (embedded)
    python -m kit oracle --hidden-states runs/states --draft D   # the oracle on a capture
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from kit.findings import KitInputError

FORMAT = 1
META, STATES = "capture.json", "states.safetensors"


@dataclass
class Capture:
    """A capture in memory: per request the token ids, the prompt length and the state tensors."""

    source: str
    num_hidden_layers: int
    hidden_size: int
    points: list[int]
    ids: list[list[int]]
    prompt_lens: list[int]
    aux: list  # per request [N, len(points) * H]
    final: list | None = None  # per request [N, H]
    notes: dict = field(default_factory=dict)

    def seqs(self) -> list[tuple[list[int], list[int]]]:
        """(prompt ids, continuation ids) per request."""
        return [(s[:n], s[n:]) for s, n in zip(self.ids, self.prompt_lens)]

    def features(self, points: list[int] | None) -> list:
        """Per request the draft's input: the columns of `points` in that order, or the final state (None)."""
        import torch

        if points is None:
            if self.final is None:
                raise KitInputError("hidden states: the capture holds no final state (an EAGLE wiring needs it)")
            return self.final
        if missing := [p for p in points if p not in self.points]:
            raise KitInputError(f"hidden states: points {missing} were not captured (captured: {self.points})")
        H = self.hidden_size
        cols = [self.points.index(p) for p in points]
        return [torch.cat([a[:, j * H : (j + 1) * H] for j in cols], -1) for a in self.aux]


def write_capture(out: str | os.PathLike, cap: Capture) -> Path:
    """Write `cap` as a capture folder (metadata and states, each written whole, then renamed)."""
    import torch

    from kit.checkpoint.safetensors_io import write_safetensors
    from kit.models import write_cache_json

    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for i, ids in enumerate(cap.ids):
        tensors |= {f"r{i}.ids": torch.tensor(ids, dtype=torch.int64), f"r{i}.aux": cap.aux[i]}
        if cap.final is not None:
            tensors[f"r{i}.final"] = cap.final[i]
    write_safetensors(d / STATES, tensors)
    meta = {"format": FORMAT} | {k: getattr(cap, k) for k in "source num_hidden_layers hidden_size points".split()}
    requests = [{"prompt_len": n, "tokens": len(s)} for s, n in zip(cap.ids, cap.prompt_lens)]
    write_cache_json(d / META, meta | {"final": cap.final is not None, "requests": requests, "notes": cap.notes})
    return d


def read_capture(path: str | os.PathLike, dtype: str = "float32") -> Capture:
    """Read a capture folder, states cast to `dtype`; a missing or inconsistent file is a one-line error."""
    import torch
    from safetensors import safe_open

    d = Path(path)
    meta_path = d / META
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        raise KitInputError(f"{meta_path}: not found (a capture folder holds {META} and {STATES})") from None
    except ValueError as e:
        raise KitInputError(f"{meta_path}: not JSON ({e})") from None
    if meta.get("format") != FORMAT:
        raise KitInputError(f"{meta_path}: format {meta.get('format')!r}, this kit reads {FORMAT}")
    if not (d / STATES).is_file():
        raise KitInputError(f"{d / STATES}: not found")
    want = getattr(torch, dtype)
    H, k = int(meta["hidden_size"]), len(meta["points"])
    ids, aux, final = [], [], []
    with safe_open(str(d / STATES), framework="pt") as sf:
        names = set(sf.keys())
        for i, r in enumerate(meta["requests"]):
            need = [f"r{i}.ids", f"r{i}.aux"] + ([f"r{i}.final"] if meta["final"] else [])
            if lacking := [n for n in need if n not in names]:
                raise KitInputError(f"{d / STATES}: request {i} lacks {lacking[0]}")
            row = [int(t) for t in sf.get_tensor(f"r{i}.ids").tolist()]
            a = sf.get_tensor(f"r{i}.aux").to(want)
            f = sf.get_tensor(f"r{i}.final").to(want) if meta["final"] else None
            n = len(row)
            if n != r["tokens"] or a.shape != (n, k * H) or (f is not None and f.shape != (n, H)):
                raise KitInputError(f"{d / STATES}: request {i}'s shapes disagree with {META}")
            ids.append(row)
            aux.append(a)
            final.append(f)
    return Capture(
        source=meta["source"],
        num_hidden_layers=int(meta["num_hidden_layers"]),
        hidden_size=H,
        points=list(meta["points"]),
        ids=ids,
        prompt_lens=[int(r["prompt_len"]) for r in meta["requests"]],
        aux=aux,
        final=final if meta["final"] else None,
        notes=meta.get("notes") or {},
    )


class EmbeddingTarget:
    """A target reduced to `config` (layer count), `get_input_embeddings()` and `get_output_embeddings()` (the
    embedding when tied), tensors found by name suffix so wrapper classes (`language_model.model...`) work."""

    def __init__(self, target_dir: str | os.PathLike | None, num_hidden_layers: int, dtype: str = "float32"):
        from kit.models import resolve_target

        self.dir = resolve_target(target_dir)
        self.dtype = dtype
        self.config = SimpleNamespace(get_text_config=lambda: SimpleNamespace(num_hidden_layers=num_hidden_layers))
        self._embed = self._head = None

    def _tensor(self, suffix: str):
        """The tensor named `...suffix` (the shortest such name), read alone."""
        import torch
        from safetensors import safe_open

        from kit.checkpoint.safetensors_io import read_checkpoint

        hits = [t for n, t in read_checkpoint(self.dir).tensors.items() if n.endswith(suffix)]
        if not hits:
            return None
        t = min(hits, key=lambda t: len(t.name))
        with safe_open(t.file, framework="pt") as sf:
            return torch.nn.Parameter(sf.get_tensor(t.name).to(getattr(torch, self.dtype)), requires_grad=False)

    def get_input_embeddings(self):
        if self._embed is None:
            w = self._tensor("embed_tokens.weight")
            if w is None:
                raise KitInputError(f"{self.dir}: no *embed_tokens.weight tensor (the draft takes the target's)")
            self._embed = SimpleNamespace(weight=w)
        return self._embed

    def get_output_embeddings(self):
        if self._head is None:
            w = self._tensor("lm_head.weight")
            self._head = SimpleNamespace(weight=w) if w is not None else self.get_input_embeddings()
        return self._head
