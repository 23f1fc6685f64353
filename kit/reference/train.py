"""`python -m kit train-draft`: a trainer for a 1-layer EAGLE-3 head (CPU smoke run, or a real run on a GPU).

Why: the notebooks need a real draft for the embedded SmolLM2 target, and a user gets a wiring
smoke test for their own target before a long training run: if a 3-minute head does not beat
accept length 1 under your serving wiring, a 3-day head will not either. A side room (docs/architecture.md):
the core takes the shipped draft (`kit.models.shipped_draft`) and never imports this module; `kit train-draft`,
the notebooks' `train_draft=True` (`demo_draft`), bench scripts and tests do.

How:
1. the target continues built-in training prompts (kit.prompts, disjoint from the evaluation
   prompts) greedily, in batches — the draft learns the target's own outputs; with
   `--sampled-continuations K` also K sampled continuations of each (`--sample-temperature`), for
   more varied text, still labelled with the target's greedy token at every position;
2. capture hooks stay on during that generation, so the prefill and every KV-cached decode step
   record the aux states at the SGLang capture points p = [2, L//2, L-3] (ids [1, L//2-1, L-4] in
   SGLang's "+1" convention, written to `eagle_config`); the labels are the target's greedy next
   tokens (no second, teacher-forced pass);
3. the head (SGLang `LlamaForCausalLMEagle3` structure, kit.reference.draft) trains with 3 unrolled
   test-time-training steps that feed back its own hidden state, AdamW, seeded; the draft
   vocabulary = every id the target predicts in the data + ids below `vocab_floor` (with
   `--max-draft-vocab N`, the N most frequent of those); batches hold sequences of similar length;
4. saved in SGLang layout (`midlayer.*`, `d2t`, `t2d`) with `kit_provenance.json` (settings, the
   one command that repeats the run, data size, times, losses), cached under
   $KIT_CACHE_DIR/drafts/<key> keyed by the settings; a second call returns the cached path.

Precision and threads: `--data-dtype`/`--train-dtype auto` (the default) take bf16 only where the
device does it natively (kit.models.pick_dtype: CUDA, or a CPU with amx_bf16/avx512_bf16 where a
measured matmul confirms it), fp32 elsewhere; `--threads 0` takes one thread per physical core
(kit.models.pick_threads). The progress lines say what was chosen and why.

`--device cuda` runs the data pass and the training on a GPU: the kit's shipped demo draft
(kit/assets/demo_draft, its command in `training.json` there) was trained that way, with thousands
of the built-in training prompts (kit.prompts, disjoint from the evaluation prompts).

    python -m kit train-draft [--quick] [--out DIR] [--epochs N] [--device cuda] ...
    from kit.reference.train import ensure_demo_draft; path = ensure_demo_draft(quick=True)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kit import config as kconfig
from kit.findings import KitInputError
from kit.hf import AUX_IDS, HFConfig

HELP = "train a 1-layer EAGLE-3 head on the target's own outputs (CPU smoke run in minutes, or --device cuda; cached)"
RECIPE_VERSION = 4  # bump when the training code changes what a given config produces
DTYPES = ["auto", "float32", "bfloat16"]


@dataclass
class TrainConfig:
    target: str = field(default="embedded", metadata={"help": "target: 'embedded' (SmolLM2) or a local HF model dir"})
    out: str | None = field(default=None, metadata={"help": "also copy the draft here (default: only the cache)"})
    quick: bool = field(default=False, metadata={"help": "the < 1 minute preset used by tests and notebooks"})
    num_prompts: int = field(default=192, metadata={"help": "training prompts continued by the target"})
    gen_tokens: int = field(default=96, metadata={"help": "new tokens generated per training prompt"})
    gen_batch: int = field(default=96, metadata={"help": "generation batch size (prompts continued at once)"})
    device: str = field(
        default="cpu", metadata={"help": "where the data pass and the training run", "choices": ["cpu", "cuda"]}
    )
    data_dtype: str = field(
        default="auto",
        metadata={
            "help": "target dtype while generating the training data (auto: bf16 where the device has native "
            "bf16 matmul, measured; fp32 elsewhere; the served target stays fp32)",
            "choices": DTYPES,
        },
    )
    train_dtype: str = field(
        default="auto",
        metadata={
            "help": "compute dtype of the head's training matmuls (bfloat16: autocast; auto: as --data-dtype)",
            "choices": DTYPES,
        },
    )
    max_draft_vocab: int = field(
        default=0, metadata={"help": "keep at most this many draft-vocabulary ids, the most frequent labels (0: all)"}
    )
    save_dtype: str = field(
        default="float32",
        metadata={"help": "dtype of the saved weights", "choices": ["float32", "bfloat16"]},
    )
    sampled_continuations: int = field(
        default=0,
        metadata={
            "help": "sampled continuations per prompt beside the greedy one (more varied text; the labels stay "
            "the target's greedy token at every position)"
        },
    )
    sample_temperature: float = field(default=0.8, metadata={"help": "temperature of the sampled continuations"})
    epochs: int = field(default=5, metadata={"help": "passes over the generated data"})
    ttt_steps: int = field(default=3, metadata={"help": "unrolled draft steps per position"})
    lr: float = field(default=3e-3, metadata={"help": "AdamW learning rate"})
    batch_size: int = field(default=16, metadata={"help": "sequences per optimizer step"})
    vocab_floor: int = field(default=8192, metadata={"help": "ids below this are always in the draft vocabulary"})
    seed: int = field(default=0, metadata={"help": "random seed"})
    init: str = field(
        default="lens",
        metadata={
            "help": "head initialization: lens (deepest state through fc, zero residual branches) or random",
            "choices": ["lens", "random"],
        },
    )
    threads: int = field(default=0, metadata={"help": "torch CPU threads (0: one per physical core)"})
    force: bool = field(default=False, metadata={"help": "retrain even if cached"})
    json: bool = field(default=False, metadata={"help": "print one JSON document as the last line"})

    def preset(self) -> TrainConfig:
        if not self.quick:
            return self
        return TrainConfig(**{**asdict(self), "num_prompts": 48, "gen_tokens": 48, "epochs": 6, "batch_size": 8})

    def key(self, target_id: str) -> str:
        keep = {k: v for k, v in asdict(self).items() if k not in ("out", "quick", "force", "json", "threads")}
        blob = json.dumps({"cfg": keep, "target": target_id, "recipe": RECIPE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def capture_ids(L: int) -> list[int]:
    """SGLang "+1"-convention ids whose capture points are SGLang's default p = [2, L//2, L-3]."""
    return [1, L // 2 - 1, L - 4]


# -- data ----------------------------------------------------------------------------------
def generate_data(
    model,
    tok,
    prompts: list[str],
    gen_tokens: int,
    batch: int,
    points: list[int],
    log=print,
    sampled_continuations: int = 0,
    sample_temperature: float = 0.8,
):
    """The target's greedy continuations of the chat-templated prompts, then `sampled_continuations`
    sampled ones of each, with their training features (`continue_with_features`)."""
    from kit.models import chat_ids

    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    rows = [chat_ids(tok, p) for p in prompts]
    data = continue_with_features(model, rows, gen_tokens, batch, points, pad, tok.eos_token_id, log)
    if sampled_continuations:
        more = rows * sampled_continuations
        data += continue_with_features(
            model, more, gen_tokens, batch, points, pad, tok.eos_token_id, log, temperature=sample_temperature
        )
    return data


def continue_with_features(
    model, rows, gen_tokens: int, batch: int, points: list[int], pad: int, eos, log=print, temperature: float = 0.0
):
    """Continuations (batched, left-padded; greedy, or sampled at `temperature`) with the aux states of
    every position, in one pass.

    Capture hooks stay on during `generate` (TargetCapture accumulate=True): the prefill yields the
    prompt's states and each KV-cached decode step the state of the token it fed, so no second,
    teacher-forced pass is needed. Returns per sequence: ids [N] (the fed tokens: the prompt and all
    but the last new token), feats [N, k*Ht] (bf16), labels [N] (the target's greedy token after each
    position, which a sampled continuation need not follow; prompt positions before `start` are never
    scored), start (first position whose label is a generated token).
    """
    import torch

    from kit.reference.target import TargetCapture, batch_continue

    out, t0 = [], time.perf_counter()
    for b0 in range(0, len(rows), batch):
        chunk = rows[b0 : b0 + batch]
        with TargetCapture(model, points, accumulate=True) as cap:
            conts, greedy = batch_continue(model, chunk, gen_tokens, pad, eos, batch, temperature)
        feats, W = cap.features(), max(map(len, chunk))  # left-padded to W
        for r, c, y, f in zip(chunk, conts, greedy, feats):
            n = len(r) + len(c) - 1  # the last new token is never fed: it is only a label
            out.append(
                {
                    "ids": torch.tensor((r + c)[:n]),
                    "feats": f[W - len(r) : W - len(r) + n].to(torch.bfloat16),
                    "labels": torch.tensor([0] * (len(r) - 1) + y),
                    "start": len(r) - 1,
                }
            )
        how = f"sampled at temperature {temperature}" if temperature > 0 else "greedy"
        log(f"generating: {len(out)}/{len(rows)} prompts continued, {how} ({time.perf_counter() - t0:.0f} s)")
    return out


def draft_vocab(data, V: int, floor: int, cap: int = 0):
    """Sorted target ids the draft can propose: ids below `floor`, every label and fed id in the data;
    with `cap` > 0, the `cap` most frequent labels (then fed ids, then low ids) of those."""
    import torch

    used = torch.zeros(V, dtype=torch.bool)
    used[: min(floor, V)] = True
    counts = torch.zeros(V, dtype=torch.float64)
    for d in data:
        lab, ids = d["labels"][d.get("start", 0) :].cpu(), d["ids"].cpu()
        used[lab] = True
        used[ids] = True
        counts += torch.bincount(lab, minlength=V)
        counts += 1e-3 * torch.bincount(ids, minlength=V)  # fed-only ids rank below any label
    hot = torch.nonzero(used)[:, 0]
    if cap and hot.numel() > cap:
        score = counts[hot] - 1e-9 * hot  # ties: lower ids first
        hot = hot[score.argsort(descending=True)[:cap]].sort().values
    return hot


# -- training ------------------------------------------------------------------------------
def ttt_loss(draft, ids, feats, labels, mask, steps: int, t2d):
    """EAGLE-3 test-time training: step j at anchor i reads token ids[i+1+j] and (j=0) the target
    features at i or (j>0) its own step j-1 output; attention sees step-0 keys of anchors <= i and
    the anchor's own later-step keys. Label: the target's greedy token at position i+1+j."""
    import torch
    import torch.nn.functional as F

    from kit.reference.draft import causal_mask

    B, N = ids.shape
    T = N - 1 - steps  # anchors with all steps inside the sequence
    if T <= 0:
        return None, []
    dev = ids.device
    pos0 = torch.arange(T, device=dev)[None].expand(B, -1)
    keys, vals = [[] for _ in draft.layers], [[] for _ in draft.layers]
    h = feats[:, :T].float()
    losses, accs = [], []
    for j in range(steps):
        x_ids = ids[:, 1 + j : 1 + j + T]
        embeds = draft.embed_tokens(x_ids)
        h = draft.project(h, embeds.shape[-1])
        residual = None
        for li, layer in enumerate(draft.layers):
            x, residual = layer.pre_attention(embeds, h, residual)
            q, k, v = layer.self_attn.qkv(x, pos0 + j, draft.inv_freq)
            keys[li].append(k)
            vals[li].append(v)
            blocks = [causal_mask(T, 0, device=dev)] + [torch.eye(T, dtype=torch.bool, device=dev)] * j
            m = torch.cat(blocks, 1)
            a = layer.self_attn.attend(q, torch.cat(keys[li], 2), torch.cat(vals[li], 2), m)
            h, residual = layer.post_attention(a, residual)
        pre = h + residual
        normed = draft.norm(pre)
        tgt = t2d[labels[:, 1 + j : 1 + j + T]]  # draft index, -1 outside the draft vocab
        lm = mask[:, 1 + j : 1 + j + T]
        logits = draft.logits(normed[lm])  # the head only where a label counts
        t = tgt[lm]
        ok = t >= 0
        ce = F.cross_entropy(logits, t.clamp(min=0), reduction="none")
        losses.append((ce * ok).sum() / max(int(lm.sum()), 1) * (0.8**j))
        accs.append(((logits.argmax(-1) == t) & ok).sum() / lm.sum().clamp(min=1))
        h = normed if draft.spec.norm_output else pre
    return sum(losses), accs  # accuracies stay tensors: no device sync per step


def train_head(target, data, cfg: TrainConfig, points: list[int], log=print, train_dtype: str = "float32"):
    """Build and train the head on `cfg.device` (autocast to `train_dtype`); returns (draft, config, stats)."""
    import torch
    from torch import nn

    from kit.reference.draft import DraftSpec, Eagle3Draft

    tc = target.config.get_text_config()
    H, V = tc.hidden_size, tc.vocab_size
    hot = draft_vocab(data, V, cfg.vocab_floor, cfg.max_draft_vocab)
    rp = getattr(tc, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(tc, "rope_theta", 10000.0))
    config = HFConfig.of(
        {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "num_hidden_layers": 1,
            "hidden_size": H,
            "target_hidden_size": H,
            "intermediate_size": tc.intermediate_size,
            "num_attention_heads": tc.num_attention_heads,
            "num_key_value_heads": tc.num_key_value_heads,
            "head_dim": getattr(tc, "head_dim", None) or H // tc.num_attention_heads,
            "hidden_act": "silu",
            "rms_norm_eps": tc.rms_norm_eps,
            "vocab_size": V,
            "draft_vocab_size": int(hot.numel()),
            "max_position_embeddings": tc.max_position_embeddings,
            "rope_theta": theta,
            "tie_word_embeddings": False,
            "torch_dtype": cfg.save_dtype,
            "eagle_config": {AUX_IDS: [p - 1 for p in points], "use_aux_hidden_state": True},
        }
    )
    torch.manual_seed(cfg.seed)
    draft = Eagle3Draft(DraftSpec.from_config(config))
    with torch.no_grad():
        # warm start: the target's own head rows and final norm; fc passes the deepest captured
        # state through and the layer's residual branches start at zero, so step 0 begins as the
        # target's "logit lens" at that depth instead of random logits
        draft.lm_head.weight.copy_(target.get_output_embeddings().weight[hot])
        draft.norm.weight.copy_(target.model.norm.weight)
        if cfg.init == "lens":
            draft.fc.weight.zero_()
            draft.fc.weight[:, -H:] = torch.eye(H)
            for layer in draft.layers:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    draft.embed_tokens.weight = nn.Parameter(target.get_input_embeddings().weight.detach(), requires_grad=False)
    dev = torch.device(cfg.device)
    draft.to(dev)
    draft.hot_token_id = hot.to(dev)
    t2d = torch.full((V,), -1, dtype=torch.long, device=dev)
    t2d[hot.to(dev)] = torch.arange(hot.numel(), device=dev)
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    n_batches = (len(data) + cfg.batch_size - 1) // cfg.batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=cfg.lr, total_steps=max(1, cfg.epochs * n_batches), pct_start=0.1
    )
    g = torch.Generator().manual_seed(cfg.seed)
    stats = {"epochs": []}
    t0 = time.perf_counter()
    draft.train()
    # sequences of similar length share a batch (less padding); the batches' order is shuffled per epoch
    by_len = sorted(range(len(data)), key=lambda i: (len(data[i]["ids"]), i))
    batches = [by_len[i : i + cfg.batch_size] for i in range(0, len(by_len), cfg.batch_size)]
    for ep in range(cfg.epochs):
        tot, accs = torch.zeros((), device=dev), []
        for b in torch.randperm(len(batches), generator=g).tolist():
            rows = [data[i] for i in batches[b]]
            N = max(len(r["ids"]) for r in rows)
            ids = torch.zeros(len(rows), N, dtype=torch.long)
            lab = torch.zeros(len(rows), N, dtype=torch.long)
            feats = torch.zeros(len(rows), N, rows[0]["feats"].shape[-1], device=dev)
            mask = torch.zeros(len(rows), N, dtype=torch.bool)
            for i, r in enumerate(rows):  # right-pad; positions start at 0 like the real prompt
                n = len(r["ids"])
                ids[i, :n], lab[i, :n], feats[i, :n] = r["ids"], r["labels"], r["feats"].float()
                mask[i, r["start"] : n] = True
            ids, lab, mask = ids.to(dev), lab.to(dev), mask.to(dev)
            # bf16 autocast: matmuls on the device's bf16 units, weights, grads and the loss stay fp32
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=train_dtype == "bfloat16"):
                loss, acc = ttt_loss(draft, ids, feats, lab, mask, cfg.ttt_steps, t2d)
            if loss is None:
                continue
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            tot += loss.detach()
            accs.append(torch.stack(acc))
        acc_t = torch.stack(accs).mean(0).tolist() if accs else [0.0] * cfg.ttt_steps
        mean_acc = [round(a, 3) for a in acc_t]
        tot = float(tot)
        stats["epochs"].append({"loss": round(tot / max(n_batches, 1), 4), "step_acc": mean_acc})
        log(f"epoch {ep + 1}/{cfg.epochs}: loss {tot / max(n_batches, 1):.3f}, train step accuracy {mean_acc}")
    stats["train_time_s"] = round(time.perf_counter() - t0, 1)
    draft.eval()
    draft.to("cpu")
    draft.hot_token_id = hot  # a plain attribute: .to() does not move it
    return draft, config, stats


def train_draft(cfg: TrainConfig, log=print) -> Path:
    """Train (or fetch from the cache) and return the SGLang-layout draft directory."""
    from kit.models import cache_dir, cache_lock, resolve_target, target_id

    cfg = cfg.preset()
    tdir = resolve_target(cfg.target)
    key = cfg.key(target_id(tdir))
    dest = cache_dir() / "drafts" / f"eagle3-{'quick' if cfg.quick else 'demo'}-{key}"
    # one trainer per key: a notebook and a test asking at once share one training
    with cache_lock(dest):
        if (dest / "config.json").exists() and not cfg.force:
            log(f"cached: {dest}")
            return _copy_out(dest, cfg.out)
        return _train_locked(cfg, tdir, dest, log)


def _train_locked(cfg: TrainConfig, tdir: Path, dest: Path, log) -> Path:
    import torch

    from kit.models import load_target, pick_dtype, pick_threads, target_id
    from kit.prompts import builtin_prompts
    from kit.reference.draft_io import save_draft

    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise KitInputError("--device cuda: torch sees no CUDA device here")
    threads, why_threads = pick_threads(cfg.threads)
    torch.set_num_threads(threads)
    data_dtype, why_data = pick_dtype(cfg.data_dtype, cfg.device)
    train_dtype, why_train = pick_dtype(cfg.train_dtype, cfg.device)
    log(f"device: {cfg.device}; threads: {threads} ({why_threads})")
    log(f"data pass: {data_dtype} ({why_data}); training: {train_dtype} ({why_train})")
    torch.manual_seed(cfg.seed)
    t0 = time.perf_counter()
    model, tok = load_target(cfg.target)
    L = model.config.get_text_config().num_hidden_layers
    points = [x + 1 for x in capture_ids(L)]
    prompts = [r["prompt"] for r in builtin_prompts("train")]
    if cfg.num_prompts > len(prompts):
        raise KitInputError(f"--num-prompts {cfg.num_prompts}: only {len(prompts)} built-in training prompts")
    prompts = prompts[: cfg.num_prompts]
    t1 = time.perf_counter()
    # the data pass may run the target in bf16 (the CPU's AMX / AVX512-BF16 units, or a GPU): only the
    # training text and features come from it; the head's init reads the fp32 target, and serving stays fp32
    same = data_dtype == "float32" and cfg.device == "cpu"
    gen_model = model if same else load_target(cfg.target, dtype=data_dtype, device=cfg.device)[0]
    data = generate_data(
        gen_model,
        tok,
        prompts,
        cfg.gen_tokens,
        cfg.gen_batch,
        points,
        log,
        sampled_continuations=cfg.sampled_continuations,
        sample_temperature=cfg.sample_temperature,
    )
    del gen_model
    n_gen = sum(len(d["ids"]) - d["start"] for d in data)
    t2 = time.perf_counter()
    log(f"data: {len(data)} sequences, {n_gen} generated tokens in {t2 - t1:.1f} s")
    draft, config, stats = train_head(model, data, cfg, points, log, train_dtype=train_dtype)
    prov = {
        "source_layout": "sglang",
        "aux_convention": "sglang",
        "source_aux_layer_id_convention": "sglang",
        "aux_layer_ids": [p - 1 for p in points],
        "trained_with": "kit",
        "capture_points": points,
        "target": str(tdir),
        "target_id": target_id(tdir),
        "target_architecture": (model.config.architectures or [type(model).__name__])[0],
        "target_num_layers": L,
        "settings": asdict(cfg),
        "command": " ".join(["kit train-draft", *kconfig.to_argv(cfg, skip=("out", "force", "json"))]),
        "recipe_version": RECIPE_VERSION,
        "device": torch.cuda.get_device_name() if cfg.device == "cuda" else cpu_name(),
        "threads": threads,
        "data_dtype": {"chosen": data_dtype, "why": why_data},
        "train_dtype": {"chosen": train_dtype, "why": why_train},
        "sequences": len(data),
        "generated_tokens": n_gen,
        "data_time_s": round(t2 - t1, 1),
        "load_time_s": round(t1 - t0, 1),
        **stats,
        "total_time_s": round(time.perf_counter() - t0, 1),
    }
    save_draft(draft, dest, config, extra_files={"kit_provenance.json": prov}, dtype=getattr(torch, cfg.save_dtype))
    log(f"saved {dest} ({prov['total_time_s']} s total)")
    return _copy_out(dest, cfg.out)


def cpu_name() -> str:
    """This CPU's model name (/proc/cpuinfo), else what platform knows."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _copy_out(src: Path, out: str | None) -> Path:
    if not out:
        return src
    o = Path(out)
    if o.exists() and any(o.iterdir()):
        raise KitInputError(f"{o}: output directory exists and is not empty")
    tmp = o.with_name(f".{o.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    if o.exists():
        o.rmdir()
    tmp.rename(o)
    return o


def ensure_demo_draft(quick: bool = False, log=print) -> Path:
    """The demo draft for the embedded target (trained once, then cached; progress lines go to `log`)."""
    return train_draft(TrainConfig(quick=quick), log=log)


def demo_draft(train_draft: bool = False, quick: bool = False, log=print) -> Path:
    """The draft the demo serves: the kit's shipped one (`kit.models.shipped_draft`, trained on a GPU,
    SHA-256 checked), or with `train_draft` the one `ensure_demo_draft` trains on this CPU (minutes the
    first time, then cached) for a user who wants to watch training happen."""
    if train_draft:
        return ensure_demo_draft(quick=quick, log=log)
    from kit.models import shipped_draft

    path = shipped_draft()
    log(f"shipped draft: {path}")
    return path


def add_arguments(p: argparse.ArgumentParser) -> None:
    kconfig.add_arguments(p, TrainConfig)


def run(args: argparse.Namespace) -> int:
    cfg = kconfig.from_namespace(TrainConfig, args)
    log = (lambda *_: None) if cfg.json else print
    path = train_draft(cfg, log)
    prov = json.loads((path / "kit_provenance.json").read_text())
    doc = {
        "draft": str(path),
        "generated_tokens": prov.get("generated_tokens"),
        "train_time_s": prov.get("train_time_s"),
        "total_time_s": prov.get("total_time_s"),
        "final_epoch": (prov.get("epochs") or [None])[-1],
    }
    print(json.dumps(doc) if cfg.json else f"draft: {path}")
    return 0
