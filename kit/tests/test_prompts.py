"""kit.prompts: built-in prompt sets and JSONL reading."""

import pytest

from kit.findings import KitInputError
from kit.prompts import builtin_prompts, load_prompts_jsonl


def test_builtin_sets():
    ev = builtin_prompts()
    assert len(ev) == 24 and {r["kind"] for r in ev} == {"chat", "code", "math"}
    assert len(builtin_prompts("code")) == 8
    train = builtin_prompts("train")
    assert len(train) >= 250 and len({r["prompt"] for r in train}) == len(train)
    assert not {r["prompt"] for r in ev} & {r["prompt"] for r in train}  # held-out evaluation
    with pytest.raises(KitInputError):
        builtin_prompts("poetry")


def test_training_prompts_are_disjoint_from_evaluation_prompts():
    """The shipped draft's ~6,000 training prompts (and every other) never repeat an evaluation prompt, even
    up to case, spacing and punctuation; any prefix stays balanced across kinds."""
    import json
    from pathlib import Path

    from kit.prompts import _normalized

    train = [r["prompt"] for r in builtin_prompts("train")]
    assert len(train) >= 9000 and len(set(map(_normalized, train))) == len(train)
    evaluation = {_normalized(r["prompt"]) for r in builtin_prompts()}
    assert not evaluation & {_normalized(t) for t in train}
    rec = json.loads((Path(__file__).parents[1] / "assets" / "demo_draft" / "training.json").read_text())
    assert rec["data"]["prompts"] <= len(train)  # the shipped draft's prompts are this list's prefix
    head = train[:3000]
    kinds = [sum(w in t for t in head) for w in ("Python", "What is", "Explain")]
    assert min(kinds) > 100


def test_jsonl(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(
        '{"prompt": "hi", "id": "a"}\n\n{"text": "yo"}\n'
        '{"messages": [{"role": "user", "content": "q1"}, {"role": "user", "content": "q2"}]}\n'
    )
    rows = load_prompts_jsonl(p)
    assert [r["prompt"] for r in rows] == ["hi", "yo", "q2"] and rows[0]["id"] == "a" and rows[1]["id"] == "line-3"
    for bad, msg in [
        ("{oops\n", ":1: invalid JSON"),
        ("[1]\n", ":1: expected a JSON object"),
        ('{"prompt": ""}\n', ":1: no non-empty"),
        ("", "no prompts"),
    ]:
        p.write_text(bad)
        with pytest.raises(KitInputError, match=msg):
            load_prompts_jsonl(p)
    with pytest.raises(KitInputError, match="cannot read"):
        load_prompts_jsonl(tmp_path / "missing.jsonl")
