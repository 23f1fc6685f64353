"""The corpus of real public EAGLE-3 deployments, materialised and run through `kit doctor`: what
tests/test_corpus.py checks and what the GPU rehearsals (bench/gpu_rehearse.py) stand up.

`tests/corpus/cases.json` names, per case, a draft config, a target config and a launch command taken from a
public source and the truth that source states; `tests/corpus/configs.json` holds every config with its
provenance. Draft weights are not needed: the draft directory gets a safetensors file whose header carries the key
names and shapes that draft's exporter writes (`WEIGHT_LAYOUTS`, computed from its config) over a sparse file, so
a 7168-wide Kimi draft costs a few kilobytes on disk. No pytest here, so a GPU host imports it without one.

    from corpus_cases import load_cases, build_case, run_all, render_doc
"""

from __future__ import annotations

import copy
import json
import os
import struct
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
DOC = ROOT / "docs" / "corpus.md"
OUTCOMES = ("caught", "missed", "no false alarm", "false alarm", "exit 2", "crash")

# What every EAGLE-3 draft layer below ends with: the gated MLP and its three norms (`hidden_norm` on the fused
# target states, beside the embedding's `input_layernorm`).
_MLP_AND_NORMS = (
    ("mlp.gate_proj.weight", ("I", "H")),
    ("mlp.up_proj.weight", ("I", "H")),
    ("mlp.down_proj.weight", ("H", "I")),
    ("input_layernorm.weight", ("H",)),
    ("hidden_norm.weight", ("H",)),
    ("post_attention_layernorm.weight", ("H",)),
)
# The decoder layer of a Llama-style EAGLE-3 draft, as each exporter names it (SpecForge's
# LlamaForCausalLMEagle3 module tree in specforge/modeling/draft/llama3_eagle.py, which is also the official
# EAGLE-3 release layout; embeddings are excluded from saved drafts, specforge/export/checkpoint_io.py).
_LLAMA_LAYER = (
    ("self_attn.q_proj.weight", ("nh*hd", "2H")),
    ("self_attn.k_proj.weight", ("nkv*hd", "2H")),
    ("self_attn.v_proj.weight", ("nkv*hd", "2H")),
    ("self_attn.o_proj.weight", ("H", "nh*hd")),
    *_MLP_AND_NORMS,
)
# SGLang's MLA draft (srt/models/kimi_k25_eagle3.py load_weights: checkpoint `layers.0.*`, q_a/kv_a fused on load).
_MLA_LAYER = (
    ("self_attn.q_a_proj.weight", ("qr", "2H")),
    ("self_attn.q_a_layernorm.weight", ("qr",)),
    ("self_attn.q_b_proj.weight", ("nh*(nope+rope)", "qr")),
    ("self_attn.kv_a_proj_with_mqa.weight", ("kvr+rope", "2H")),
    ("self_attn.kv_a_layernorm.weight", ("kvr",)),
    ("self_attn.kv_b_proj.weight", ("nh*(nope+v)", "kvr")),
    ("self_attn.o_proj.weight", ("H", "nh*v")),
    *_MLP_AND_NORMS,
)
WEIGHT_LAYOUTS = {"midlayer": ("midlayer.", _LLAMA_LAYER), "kimi_mla": ("layers.0.", _MLA_LAYER)}
_DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "BOOL": 1}


def load_cases() -> list[dict[str, Any]]:
    return json.loads((CORPUS / "cases.json").read_text())


def load_classes() -> list[dict[str, Any]]:
    """Built cases, one per fault class the public cases did not show doctor (tests/corpus/classes.json): each
    rests on the SGLang source it names, not on a published deployment, so they stay out of the confusion table."""
    return json.loads((CORPUS / "classes.json").read_text())


REHEARSAL_RELEASE = "0.5.17"  # the SGLang release the GPU rehearsals run (bench/gpu_rehearse.py)


def rehearsable(case: dict[str, Any]) -> str:
    """Whether `kit rehearse` can run this case: its launch and target are what SGLang can start as written
    (kit.rehearsal.runner.not_rehearsable) and its target and draft have a miniature (kit.rehearsal.miniature)."""
    from kit.findings import KitInputError
    from kit.hf import HFConfig
    from kit.rehearsal.miniature import miniature_draft_config, miniature_target
    from kit.rehearsal.runner import not_rehearsable
    from kit.sglang.cmdline import find_launch

    tcfg = case.get("target_config") or load_configs()[case["target"]]["config"]
    draft = case.get("draft") or {}
    dcfg = case.get("draft_config") or (load_configs()[draft["config"]]["config"] if draft.get("config") else None)
    if not dcfg or not draft.get("weights"):
        return "no: no draft weights in the case"
    found = find_launch(case["launch"], version=REHEARSAL_RELEASE) if case.get("launch") else None
    why = not_rehearsable(HFConfig.of(tcfg), found, REHEARSAL_RELEASE) if found else None
    if why:
        return f"no: {why}"
    try:
        mini = miniature_target(tcfg, tp=1, draft_config=dcfg)
        miniature_draft_config(dcfg, mini)
    except (KitInputError, KeyError, TypeError) as e:
        return f"no: {e}"
    return "yes"


@lru_cache(maxsize=1)
def load_configs() -> dict[str, dict[str, Any]]:
    """{name: {"provenance": ..., "config": ...}}; an entry whose provenance says `from` is that config with its
    `set` fields over it (the config a stack writes from another: SpecForge's export of its training config)."""
    cfgs = json.loads((CORPUS / "configs.json").read_text())
    for c in cfgs.values():
        if "from" in c["provenance"]:
            c["config"] = {**cfgs[c["provenance"]["from"]]["config"], **c["provenance"]["set"]}
    return cfgs


def _dims(cfg: dict[str, Any]) -> dict[str, int]:
    H = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or H // nh
    ec = cfg.get("eagle_config") or {}
    k = cfg.get("num_aux_hidden_states") or len(ec.get("eagle_aux_hidden_state_layer_ids") or [0, 0, 0])
    Ht = cfg.get("target_hidden_size") or H
    d = {
        "H": H,
        "2H": 2 * H,
        "nh*hd": nh * hd,
        "nkv*hd": cfg.get("num_key_value_heads", nh) * hd,
        "I": cfg["intermediate_size"],
        "k*Ht": k * Ht,
        "Ht": Ht,
        "3Ht": 3 * Ht,
        "V": cfg["vocab_size"],
        "Vd": cfg.get("draft_vocab_size") or cfg["vocab_size"],
    }
    if "kv_lora_rank" in cfg:
        nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        d.update(
            {
                "qr": cfg["q_lora_rank"],
                "kvr": cfg["kv_lora_rank"],
                "kvr+rope": cfg["kv_lora_rank"] + rope,
                "nh*(nope+rope)": nh * (nope + rope),
                "nh*(nope+v)": nh * (nope + v),
                "nh*v": nh * v,
            }
        )
    return d


def weight_spec(cfg: dict[str, Any], layout: str) -> dict[str, tuple[str, tuple[int, ...]]]:
    """{key: (dtype, shape)} that `layout`'s exporter writes for this draft config."""
    prefix, layer = WEIGHT_LAYOUTS[layout]
    d = _dims(cfg)
    spec = {prefix + name: ("BF16", tuple(d[s] for s in shape)) for name, shape in layer}
    spec.update(
        {
            "fc.weight": ("BF16", (d["H"], d["k*Ht"])),
            "norm.weight": ("BF16", (d["H"],)),
            "lm_head.weight": ("BF16", (d["Vd"], d["H"])),
            "d2t": ("I64", (d["Vd"],)),
            "t2d": ("BOOL", (d["V"],)),
        }
    )
    if cfg.get("fc_norm"):
        spec.update({f"fc_norm.{i}.weight": ("BF16", (d["Ht"],)) for i in range(d["k*Ht"] // d["Ht"])})
    if cfg.get("norm_before_fc") or (cfg.get("eagle_config") or {}).get("norm_before_fc"):
        spec["input_norm.weight"] = ("BF16", (d["k*Ht"],))
    return spec


def write_sparse_safetensors(path: Path, spec: dict[str, tuple[str, tuple[int, ...]]], cfg: dict[str, Any]) -> None:
    """A valid safetensors file: real header, real vocab maps, every other tensor a hole in a sparse file."""
    Vd, V = cfg.get("draft_vocab_size") or cfg["vocab_size"], cfg["vocab_size"]
    # the first Vd target tokens are the draft vocabulary: d2t all zero, t2d true on them
    literal = {"d2t": bytes(8 * Vd), "t2d": b"\x01" * Vd + b"\x00" * (V - Vd)}
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, (dtype, shape) in spec.items():
        n = _DTYPE_BYTES[dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    base = 8 + len(blob)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)) + blob)
        for name, data in literal.items():
            if name not in header:
                continue
            f.seek(base + header[name]["data_offsets"][0])
            f.write(data)
        f.truncate(base + offset)


def build_case(case: dict[str, Any], root: Path) -> dict[str, Any]:
    """Materialise a case under `root`; returns the doctor arguments."""
    args: dict[str, Any] = {"sglang_version": case.get("sglang_version")}
    args |= {"vllm_version": case["vllm_version"]} if case.get("vllm_version") else {}  # a `vllm serve` line's release
    tdir = root / "target"
    tdir.mkdir()
    tcfg = case.get("target_config") or load_configs()[case["target"]]["config"]
    (tdir / "config.json").write_text(json.dumps(tcfg, indent=2))
    args["target"] = str(tdir)
    draft = case.get("draft")
    if draft:
        ddir = root / "draft"
        ddir.mkdir()
        cfg = case.get("draft_config") or load_configs()[draft["config"]]["config"]
        (ddir / "config.json").write_text(json.dumps(cfg, indent=2))
        if draft.get("weights"):
            spec = weight_spec(cfg, draft["weights"])
            for name in draft.get("omit") or ():  # tensors the case's exporter left out (e.g. d2t)
                del spec[name]
            dims = _dims(cfg)  # tensors it wrote besides, e.g. the embedding: {name: [dtype, [dimension names]]}
            spec |= {n: (t, tuple(dims[x] for x in shape)) for n, (t, shape) in (draft.get("add") or {}).items()}
            write_sparse_safetensors(ddir / "model.safetensors", spec, cfg)
        for name, doc in (draft.get("files") or {}).items():  # files shipped beside the weights
            (ddir / name).write_text(json.dumps(doc, indent=2))
        args["draft"] = str(ddir)
    if case.get("launch"):
        (root / "launch.sh").write_text(case["launch"])
        args["launch_file"] = str(root / "launch.sh")
    return args


@contextmanager
def no_side_env_builds():
    """Hermetic: SGLang's parser runs in this interpreter only (no side environment built or reused, which takes
    minutes and differs per machine); where sglang is not installed the kit's own flag rules apply."""
    saved = {k: os.environ.get(k) for k in ("KIT_NO_VENV_BUILD", "KIT_SGLANG_PYTHON")}
    os.environ.update(KIT_NO_VENV_BUILD="1", KIT_SGLANG_PYTHON=sys.executable)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _Noted(dict):
    """A parsed config.json that notes every key looked up in it (`text_config.dtype` below the top level)."""

    def __init__(self, d: dict, seen: set, prefix: str = ""):
        super().__init__({k: _Noted(v, seen, f"{prefix}{k}.") if isinstance(v, dict) else v for k, v in d.items()})
        self.seen, self.prefix = seen, prefix

    def _note(self, k) -> None:
        self.seen.add(f"{self.prefix}{k}")

    def __getitem__(self, k):
        self._note(k)
        return super().__getitem__(k)

    def get(self, k, default=None):
        self._note(k)
        return super().get(k, default)

    def __contains__(self, k):
        self._note(k)
        return super().__contains__(k)

    def __deepcopy__(self, memo):
        return _Noted(copy.deepcopy(dict(self), memo), self.seen, self.prefix)


@contextmanager
def reads_noted(seen: dict[str, set]):
    """Every config.json the kit reads (kit.checkpoint.hf_config.read_config, its one reader) notes the keys the
    rules look up, per folder name (target, draft) into `seen`."""
    import kit.checkpoint.hf_config as hc
    import kit.checkpoint.load_sim as ls
    from kit.hf import HFConfig

    real = hc.read_config

    def noted(path):
        cfg, d = real(path)
        return HFConfig(_Noted(dict(cfg.data), seen.setdefault(cfg.path.parent.name, set())), cfg.path), d

    hc.read_config = ls.read_config = noted
    try:
        yield seen
    finally:
        hc.read_config = ls.read_config = real


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Doctor one case; {"outcome", "errors", "warnings", "detail", "reads": {"target"/"draft": keys looked up}}."""
    from kit.doctor import DoctorConfig, diagnose
    from kit.findings import KitInputError

    reads: dict[str, set] = {}
    with tempfile.TemporaryDirectory(prefix="kit-corpus-") as tmp, no_side_env_builds(), reads_noted(reads):
        args = build_case(case, Path(tmp))
        try:
            rep = diagnose(DoctorConfig(probe_env=False, **args))
        except KitInputError as e:
            return {"outcome": "exit 2", "errors": [], "warnings": [], "detail": str(e)}
        except Exception as e:  # noqa: BLE001 — a crash is an outcome the corpus counts
            return {"outcome": "crash", "errors": [], "warnings": [], "detail": f"{type(e).__name__}: {e}"}
    # a case's launch names its models as its author had them (hub ids, paths on their machines); doctor reads
    # the ones the case does not give as --target/--draft from the launch, and here, offline with an empty Hugging
    # Face cache, says it cannot (`launch.path`): a fact of this machine, not of the published deployment
    found = [f for f in rep.findings if f.code != "launch.path"]
    keys = [json.dumps(f.to_dict(), sort_keys=True, default=str) for f in rep.findings]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    errors = sorted({f.code for f in found if f.severity == "error"})
    warnings = sorted({f.code for f in found if f.severity == "warning"})
    truth = case["truth"]
    if truth["verdict"] == "fault":
        named = set(errors) | set(warnings)
        outcome = "caught" if set(truth["codes"]) <= named else "missed"
    else:
        outcome = "false alarm" if errors else "no false alarm"
    detail = "; ".join(f.title for f in found if f.severity == "error")[:300]
    out = {"outcome": outcome, "errors": errors, "warnings": warnings, "detail": detail, "twice": twice}
    return out | {"reads": {k: sorted(v) for k, v in reads.items()}}


@lru_cache(maxsize=1)
def run_all() -> dict[str, dict[str, Any]]:
    """Doctor on every case and built class, by id."""
    return {c["id"]: run_case(c) for c in load_cases() + load_classes()}


def _truth(c: dict[str, Any]) -> str:
    """A case's truth for the doc: healthy or its codes, and the release it holds for (and is fixed in)."""
    t = c["truth"]
    fixed = f", fixed in {t['fixed_in']}" if t.get("fixed_in") else ""
    return f"{t['verdict'] if t['verdict'] == 'healthy' else ', '.join(t['codes'])} ({t['release']}{fixed})"


def render_doc(results: dict[str, dict[str, Any]]) -> str:
    cases = load_cases()
    count = Counter(results[c["id"]]["outcome"] for c in cases)
    faults = sum(c["truth"]["verdict"] == "fault" for c in cases)
    lines = [
        "# The corpus: real public EAGLE-3 deployments through `kit doctor`",
        "",
        "Generated by `python tests/test_corpus.py --write-doc` (checked by `tests/test_corpus.py`); do not edit by hand.",
        "Each case is a draft config, a target config and a launch command from a public source, with the truth that",
        "source states (a maintainer's root cause, a merged fix, a documented command) and the release it holds for.",
        "Provenance per config file: `tests/corpus/configs.json` (verbatim files carry repository, path and commit;",
        "any other lists the fields filled in, `reconstructed`, and the published fields it lacks, `absent`, which no",
        "rule may read). Draft weights are sparse safetensors with the exporter's key names and shapes.",
        "",
        "## Confusion table",
        "",
        "| | kit names the fault (error or warning) | kit misses it / errs on a healthy case | exit 2 | crash |",
        "|---|---|---|---|---|",
        f"| fault cases ({faults}) | caught: {count['caught']} | missed: {count['missed']} | "
        f"{sum(1 for c in cases if c['truth']['verdict'] == 'fault' and results[c['id']]['outcome'] == 'exit 2')} | "
        f"{sum(1 for c in cases if c['truth']['verdict'] == 'fault' and results[c['id']]['outcome'] == 'crash')} |",
        f"| healthy cases ({len(cases) - faults}) | no false alarm: {count['no false alarm']} | "
        f"false alarms: {count['false alarm']} | "
        f"{sum(1 for c in cases if c['truth']['verdict'] == 'healthy' and results[c['id']]['outcome'] == 'exit 2')} | "
        f"{sum(1 for c in cases if c['truth']['verdict'] == 'healthy' and results[c['id']]['outcome'] == 'crash')} |",
        "",
        "## Cases",
        "",
        "| case | truth (release) | kit errors | outcome | rehearsable | source |",
        "|---|---|---|---|---|---|",
    ]
    for c in cases:
        r = results[c["id"]]
        truth = _truth(c)
        xf = " (expected to fail: see cases.json)" if c.get("xfail") else ""
        lines.append(
            f"| `{c['id']}` | {truth} | {', '.join(r['errors']) or '—'} | {r['outcome']}{xf} | {rehearsable(c)} | "
            f"{' '.join(f'<{u}>' for u in c['sources'][:1])} |"
        )
    lines += [
        "",
        "Launch lines marked `launch_verbatim: false` in cases.json were assembled from the values the source",
        "states (its `note_launch` says how); all others are copied as published, shell syntax included.",
        "",
    ]
    lines += [
        "`rehearsable`: `kit rehearse` can build a miniature of the case's target and draft (the run itself needs a GPU",
        "host with SGLang; rehearsals run on the release of the kit's bundle, so compare with doctor at that release).",
        "",
        "## Fault classes named since issue 25 (built cases, tests/corpus/classes.json)",
        "",
        "Each rests on the SGLang source it names rather than on a published deployment, so it is not counted above.",
        "",
        "| case | class | truth (release) | kit errors | outcome | rehearsable | basis |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in load_classes():
        r = results[c["id"]]
        truth = _truth(c)
        lines.append(
            f"| `{c['id']}` | {c['class']} | {truth} | {', '.join(r['errors']) or '—'} | {r['outcome']} | "
            f"{rehearsable(c)} | <{c['basis'][0]}> |"
        )
    lines.append("")
    gaps = [c for c in cases if c.get("xfail")]
    if gaps:
        lines += ["## Open gaps (cases marked expected-to-fail, with the reason)", ""]
        lines += [f"- `{c['id']}`: {c['xfail']}" for c in gaps] + [""]
    return "\n".join(lines)
