"""Prompt sets: a small built-in set written for this kit, and JSONL prompt files.

Evaluation prompts (chat, code, math; eight each) are what the oracle, the benchmark client and the notebooks send
by default. Training prompts (`kind="train"`, ~10,000, templated and deterministic; any prefix is balanced across
kinds) are disjoint from them, so acceptance measured on the evaluation set is held-out. The texts, templates and
subjects are data: `kit/assets/prompts.json`.

    builtin_prompts()            # 24 eval prompts: [{"id": "chat-01", "kind": "chat", "prompt": "..."}]
    builtin_prompts("code")      # one kind; builtin_prompts("train"): the training prompts
    load_prompts_jsonl("p.jsonl")  # lines {"prompt": "...", "id"?: ..., "kind"?: ...}

A JSONL line may use "text" or OpenAI-style "messages" (the last user message) instead, or, with `ids_ok=True`
(`kit launch --capture-hidden`), carry "input_ids" sent as they are. `python -m kit.prompts [KIND]` prints a set.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

from kit.findings import KitInputError

EVAL_KINDS = ("chat", "code", "math")
# the texts: evaluation prompts, and the templates x subjects the training prompts are built from (disjoint)
TEXTS = json.loads((Path(__file__).parent / "assets" / "prompts.json").read_text())


def _math_train(templates: list[str]) -> list[str]:
    out = []
    for i, t in enumerate(templates):
        for j in range(12):
            a, b = 7 + 13 * j + i, 3 + 5 * j + 2 * i
            out.append(t.format(a=a, b=b, c=a + b * (j + 2) + 100))
    return out


def _normalized(text: str) -> str:
    """Lower case, letters and digits only: two prompts equal under this are the same prompt."""
    return " ".join("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())


def _train_large() -> tuple[list[str], list[str], list[str]]:
    """(chat, code, math) training prompts beyond the first set (for a draft trained on a GPU), each list shuffled
    with a fixed seed."""
    rng, small, t = random.Random(23), TEXTS["train"], TEXTS["train_large"]
    chat = [c.format(s) for s in small["chat_subjects"] + t["chat_subjects"] for c in t["chat_templates"]]
    chat += [c.format(s) for s in t["tasks"] for c in t["task_templates"]]
    chat += [t["email_template"].format(*x) for x in itertools.product(t["tones"], t["people"], t["email_subjects"])]
    code = [
        c.format(lang=lang, task=s)
        for s in small["code_subjects"] + t["code_subjects"]
        for lang in t["languages"]
        for c in t["code_templates"]
    ]
    code += [
        c.format(concept=x, lang=lang) for x in t["concepts"] for lang in t["languages"] for c in t["concept_templates"]
    ]
    code += [f"Write a SQL query that {s}." for s in t["sql_subjects"]]
    code += [f"Write a bash command that {s}." for s in t["bash_subjects"]]
    math = []
    for m in t["math_templates"]:
        for _ in range(90):
            a, b = rng.randint(3, 99), rng.randint(2, 19)
            c, d = rng.randint(20, 500), rng.choice([4, 5, 8, 10, 16, 20, 25])
            math.append(m.format(a=a, b=b, c=c, d=d, p=rng.choice([5, 10, 15, 20, 25, 30, 40, 50, 75])))
    for lst in (chat, code, math):
        rng.shuffle(lst)
    return chat, code, math


def _interleave(*lists: list[str]) -> list[str]:
    return [x for group in itertools.zip_longest(*lists) for x in group if x is not None]


def _rows(kind: str, texts: list[str]) -> list[dict]:
    return [{"id": f"{kind}-{i + 1:02d}", "kind": kind, "prompt": t} for i, t in enumerate(texts)]


def builtin_prompts(kind: str | None = None) -> list[dict]:
    """Built-in prompts of one kind ("chat", "code", "math", "train"), or all evaluation kinds."""
    table = TEXTS["eval"]
    if kind is None:
        return [r for k in EVAL_KINDS for r in _rows(k, table[k])]
    if kind in table:
        return _rows(kind, table[kind])
    if kind == "train":
        small = TEXTS["train"]
        chat = [t.format(s) for s in small["chat_subjects"] for t in small["chat_templates"][:4]]
        chat += [t.format(s) for s in small["chat_subjects"][::3] for t in small["chat_templates"][4:]]
        code = [t.format(s) for s in small["code_subjects"] for t in small["code_templates"]]
        math = _math_train(small["math_templates"])
        # interleave kinds deterministically so any prefix of the list is a balanced subset
        mixed = _interleave(chat, code, math) + _interleave(*_train_large())
        held_out = {_normalized(r["prompt"]) for r in builtin_prompts()}
        seen, out = set(held_out), []
        for t in mixed:  # first occurrence only, and never an evaluation prompt
            if _normalized(t) not in seen:
                seen.add(_normalized(t))
                out.append(t)
        return _rows("train", out)
    raise KitInputError(f"unknown prompt kind {kind!r}; choose from {', '.join(EVAL_KINDS + ('train',))}")


def interleave_kinds(rows: list[dict]) -> list[dict]:
    """Round-robin over the rows' kinds, so the first N of a mixed set hold chat, code and math alike."""
    by: dict = {}
    for r in rows:
        by.setdefault(r.get("kind"), []).append(r)
    return [x for grp in zip(*by.values()) for x in grp]


def load_prompts_jsonl(path, ids_ok: bool = False) -> list[dict]:
    """Read a JSONL prompt file; a bad line raises KitInputError naming file and line. With `ids_ok`, a line may carry
    "input_ids" (a non-empty list of non-negative ints) instead of text (its row's "prompt" None unless it has one)."""
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except OSError as e:
        raise KitInputError(f"{p}: cannot read ({e.strerror})")
    except UnicodeDecodeError:
        raise KitInputError(f"{p}: not a UTF-8 text file")
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise KitInputError(f"{p}:{n}: invalid JSON ({e.msg})")
        if not isinstance(obj, dict):
            raise KitInputError(f'{p}:{n}: expected a JSON object with a "prompt" field')
        text = obj.get("prompt", obj.get("text"))
        if text is None and isinstance(obj.get("messages"), list):
            users = [m.get("content") for m in obj["messages"] if isinstance(m, dict) and m.get("role") == "user"]
            text = users[-1] if users else None
        row = {"id": str(obj.get("id", f"line-{n}")), "kind": str(obj.get("kind", "custom")), "prompt": text}
        if "input_ids" in obj:
            ids = obj["input_ids"]
            if not ids_ok:
                raise KitInputError(f'{p}:{n}: "input_ids" rows are read by `kit launch --capture-hidden` only; '
                                    'this command needs a "prompt" (or "text"/"messages") string')  # fmt: skip
            if not (isinstance(ids, list) and ids and all(type(t) is int and t >= 0 for t in ids)):
                raise KitInputError(f'{p}:{n}: "input_ids" must be a non-empty list of non-negative integers')
            row["input_ids"] = ids
            row["prompt"] = text if isinstance(text, str) else None
        elif not isinstance(text, str) or not text.strip():
            raise KitInputError(f'{p}:{n}: no non-empty "prompt" (or "text"/"messages") string')
        out.append(row)
    if not out:
        raise KitInputError(f"{p}: no prompts")
    return out


if __name__ == "__main__":
    import sys

    rows = builtin_prompts(sys.argv[1] if len(sys.argv) > 1 else None)
    for r in rows:
        print(f"{r['id']:10} {r['prompt']}")
    print(len(rows), "prompts")
