"""Prompt sets: a small built-in set written for this kit, and JSONL prompt files.

Evaluation prompts (chat, code, math; eight each) are what the oracle, the benchmark client
and the notebooks send by default. Training prompts (`kind="train"`) are disjoint from them:
the smoke trainer (kit.reference.train) lets the target continue them and learns from its own output,
so acceptance measured on the evaluation set is held-out.

    from kit.prompts import builtin_prompts, load_prompts_jsonl
    builtin_prompts()            # 24 eval prompts: [{"id": "chat-01", "kind": "chat", "prompt": "..."}]
    builtin_prompts("code")      # one kind
    builtin_prompts("train")     # ~300 training prompts (templated, deterministic)
    load_prompts_jsonl("p.jsonl")  # lines {"prompt": "...", "id"?: ..., "kind"?: ...}

A JSONL line may also use "text" or OpenAI-style "messages" (the last user message is used).
`python -m kit.prompts [KIND]` prints the set.
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.findings import KitInputError

EVAL_KINDS = ("chat", "code", "math")

CHAT = [
    "What is speculative decoding?",
    "Give me three tips for sleeping better.",
    "Why is the sky blue? Answer in a short paragraph.",
    "Write a friendly email inviting a colleague to a team lunch on Friday.",
    "What are the main differences between a cat and a dog as pets?",
    "Summarize the plot of a typical hero's journey story.",
    "How do I make a cup of green tea properly?",
    "Explain what a neural network is to a ten-year-old.",
]
CODE = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Explain what a Python list comprehension is, with an example.",
    "Write a SQL query that counts the orders per customer in a table named orders.",
    "Write a JavaScript function that removes duplicates from an array.",
    "How do I read a CSV file with pandas and print its first five rows?",
    "Write a bash command that counts the lines in every .txt file of a directory.",
    "Write a Python class for a simple stack with push, pop and peek.",
]
MATH = [
    "What is 17 multiplied by 23? Show your steps.",
    "Solve for x: 3x + 7 = 22.",
    "A train travels 120 km in 1.5 hours. What is its average speed?",
    "What is the area of a circle with radius 4 cm?",
    "If a shirt costs $40 and is discounted by 25%, what is the new price?",
    "What is the sum of the integers from 1 to 50?",
    "Convert 3/8 to a decimal and to a percentage.",
    "A rectangle has a perimeter of 30 m and a width of 5 m. What is its length?",
]

# training prompts: templates x subjects, disjoint from the evaluation prompts above
_CHAT_T = [
    "Explain {} in simple terms.",
    "What are the benefits of {}?",
    "Write a short paragraph about {}.",
    "Give me some advice about {}.",
    "What should a beginner know about {}?",
    "Describe the history of {} briefly.",
]
_CHAT_S = [
    "gardening",
    "learning a new language",
    "photography",
    "running",
    "saving money",
    "cooking pasta",
    "the solar system",
    "volcanoes",
    "public speaking",
    "time management",
    "climate change",
    "chess",
    "bicycles",
    "the ocean",
    "coffee",
    "meditation",
    "birds",
    "electric cars",
    "the internet",
    "music theory",
    "painting",
    "friendship",
    "recycling",
    "mountains",
    "rainforests",
    "honey bees",
    "the moon",
    "libraries",
    "trains",
    "writing poetry",
]
_CODE_T = [
    "Write a Python function that {}.",
    "Write a JavaScript function that {}.",
    "Explain how to write code that {}.",
    "Write a short C program that {}.",
]
_CODE_S = [
    "reverses a list",
    "finds the largest number in a list",
    "counts the vowels in a string",
    "sorts a list of words alphabetically",
    "checks whether a number is prime",
    "computes a factorial",
    "converts Celsius to Fahrenheit",
    "merges two sorted lists",
    "counts word frequencies in a text",
    "removes whitespace from a string",
    "computes the average of a list",
    "finds the second smallest element",
    "checks whether two strings are anagrams",
    "flattens a nested list",
    "returns the even numbers of a list",
    "computes the greatest common divisor of two numbers",
    "capitalizes every word in a sentence",
    "checks whether a year is a leap year",
    "generates the first ten square numbers",
    "sums the digits of an integer",
]
_MATH_T = [
    "What is {a} plus {b}?",
    "What is {a} times {b}? Explain the steps.",
    "What is {a} minus {b}?",
    "Solve for x: {b}x + {a} = {c}.",
    "A box holds {a} apples and another holds {b}. How many in total?",
    "What is {a} percent of {c}?",
]


def _math_train() -> list[str]:
    out = []
    for i, t in enumerate(_MATH_T):
        for j in range(12):
            a, b = 7 + 13 * j + i, 3 + 5 * j + 2 * i
            out.append(t.format(a=a, b=b, c=a + b * (j + 2) + 100))
    return out


def _rows(kind: str, texts: list[str]) -> list[dict]:
    return [{"id": f"{kind}-{i + 1:02d}", "kind": kind, "prompt": t} for i, t in enumerate(texts)]


def builtin_prompts(kind: str | None = None) -> list[dict]:
    """Built-in prompts of one kind ("chat", "code", "math", "train"), or all evaluation kinds."""
    table = {"chat": CHAT, "code": CODE, "math": MATH}
    if kind is None:
        return [r for k in EVAL_KINDS for r in _rows(k, table[k])]
    if kind in table:
        return _rows(kind, table[kind])
    if kind == "train":
        chat = [t.format(s) for s in _CHAT_S for t in _CHAT_T[:4]]
        chat += [t.format(s) for s in _CHAT_S[::3] for t in _CHAT_T[4:]]
        code = [t.format(s) for s in _CODE_S for t in _CODE_T]
        math = _math_train()
        # interleave kinds deterministically so any prefix of the list is a balanced subset
        mixed = []
        for i in range(max(len(chat), len(code), len(math))):
            for lst in (chat, code, math):
                if i < len(lst):
                    mixed.append(lst[i])
        return _rows("train", mixed)
    raise KitInputError(f"unknown prompt kind {kind!r}; choose from {', '.join(EVAL_KINDS + ('train',))}")


def interleave_kinds(rows: list[dict]) -> list[dict]:
    """Round-robin over the rows' kinds, so the first N of a mixed set hold chat, code and math alike."""
    by: dict = {}
    for r in rows:
        by.setdefault(r.get("kind"), []).append(r)
    return [x for grp in zip(*by.values()) for x in grp]


def load_prompts_jsonl(path) -> list[dict]:
    """Read a JSONL prompt file; each bad line raises KitInputError naming file and line."""
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
        if not isinstance(text, str) or not text.strip():
            raise KitInputError(f'{p}:{n}: no non-empty "prompt" (or "text"/"messages") string')
        out.append({"id": str(obj.get("id", f"line-{n}")), "kind": str(obj.get("kind", "custom")), "prompt": text})
    if not out:
        raise KitInputError(f"{p}: no prompts")
    return out


if __name__ == "__main__":
    import sys

    rows = builtin_prompts(sys.argv[1] if len(sys.argv) > 1 else None)
    for r in rows:
        print(f"{r['id']:10} {r['prompt']}")
    print(len(rows), "prompts")
