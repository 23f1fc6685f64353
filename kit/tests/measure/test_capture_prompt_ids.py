"""`kit launch --capture-hidden --prompts F`: a JSONL row's "input_ids" are sent as they are (no chat template),
a bad row is one error naming the file and line, text rows keep the target's chat template, and the first N rows
are taken either way (kit.measure.capture.prompt_ids over kit.prompts.load_prompts_jsonl).

    python -m pytest kit/tests/measure/test_capture_prompt_ids.py -q
"""

import json

import pytest

from kit.findings import KitInputError
from kit.measure.capture import prompt_ids
from kit.models import resolve_target


@pytest.fixture(scope="module")
def target_dir():
    return resolve_target("embedded")


def write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_input_ids_rows_pass_through_and_text_rows_are_templated(target_dir, tmp_path):
    from kit.models import chat_ids, load_tokenizer

    f = write(
        tmp_path / "p.jsonl",
        [{"input_ids": [5, 6, 7]}, {"text": "hi"}, {"input_ids": [1], "text": "x"}, {"input_ids": [9]}],
    )
    ids = prompt_ids(target_dir, f, 3)
    assert ids == [[5, 6, 7], chat_ids(load_tokenizer(target_dir), "hi"), [1]]
    assert prompt_ids(target_dir, write(tmp_path / "q.jsonl", [{"input_ids": [3, 4]}] * 4), 2) == [[3, 4], [3, 4]]


@pytest.mark.parametrize("bad", [[], [1, -2], [1, 2.0], [True], "1 2", None])
def test_a_bad_input_ids_row_names_the_file_and_line(target_dir, tmp_path, bad):
    f = write(tmp_path / "bad.jsonl", [{"input_ids": [1, 2]}, {"input_ids": bad}])
    with pytest.raises(KitInputError, match=r"bad\.jsonl:2: \"input_ids\" must be a non-empty list"):
        prompt_ids(target_dir, f, 2)


def test_ids_past_the_vocabulary_and_ids_where_text_is_needed_are_refused(target_dir, tmp_path):
    from kit.reference.oracle import OracleConfig, prompt_texts

    f = write(tmp_path / "big.jsonl", [{"input_ids": [1, 10**9]}])
    with pytest.raises(KitInputError, match=r"big\.jsonl: row line-1 .* vocab_size"):
        prompt_ids(target_dir, f, 1)
    with pytest.raises(KitInputError, match=r"big\.jsonl:1: \"input_ids\" rows are read by"):
        prompt_texts(OracleConfig(prompts=f))
