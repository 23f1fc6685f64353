"""d2t/t2d checks on values and on real safetensors tensors."""

import json

import torch

from kit.checkpoint.safetensors_io import read_checkpoint, write_safetensors
from kit.checkpoint.vocab import check_maps, check_vocab


def test_check_maps_values():
    kept = [0, 3, 4, 9]
    d2t = [k - i for i, k in enumerate(kept)]
    t2d = [i in kept for i in range(10)]
    assert check_maps(d2t, t2d, 10, 4) == []
    assert "strictly increasing" in check_maps([0, 2, 1, 0], None, 10, 4)[0]
    assert "outside" in check_maps([0, 0, 0, 20], None, 10, 4)[0]
    assert "disagree" in check_maps(d2t, [i in (0, 3, 5, 9) for i in range(10)], 10, 4)[0]
    assert "marks 3" in check_maps(d2t, [i in (0, 3, 4) for i in range(10)], 10, 4)[0]
    assert "t2d has 9" in check_maps(None, [False] * 9, 10, 4)[0]


def write(tmp_path, **ts):
    write_safetensors(tmp_path / "m.safetensors", ts)
    return read_checkpoint(tmp_path)


def test_check_vocab_on_checkpoint(tmp_path):
    kept = torch.tensor([1, 5, 6, 30])
    t2d = torch.zeros(40, dtype=torch.bool)
    t2d[kept] = True
    ck = write(tmp_path, d2t=kept - torch.arange(4), t2d=t2d, **{"lm_head.weight": torch.zeros(4, 2)})
    assert check_vocab(ck, 40, 4, lm_head="lm_head.weight") == []
    (f,) = check_vocab(ck, 40, 8)
    assert f.code == "draft.d2t" and f.severity == "error" and "expected [8]" in f.title


def test_missing_d2t_with_reduced_vocab(tmp_path):
    ck = write(tmp_path, x=torch.zeros(1))
    (f,) = check_vocab(ck, 40, 4)
    assert "draft ids as target ids" in f.title
    assert check_vocab(ck, 40, 40) == []


def test_wrong_dtypes(tmp_path):
    ck = write(tmp_path, d2t=torch.zeros(4), t2d=torch.zeros(40, dtype=torch.bool))
    (f,) = check_vocab(ck, 40, 4)
    assert "not an integer type" in f.title


def test_missing_d2t_graded_by_the_share_t2d_says_is_misnumbered(tmp_path):
    """No d2t: SGLang serves draft id i as target id i. t2d marking exactly the first Vd ids is served as trained
    (info); a gap near the end misnumbers a small share (warning); an early gap most of them (error)."""
    from kit.checkpoint.vocab import WRONG_SHARE_ERROR, misnumbered_share

    V, Vd = 1000, 200

    def grade(kept, sub):
        t2d = torch.zeros(V, dtype=torch.bool)
        t2d[torch.tensor(kept)] = True
        (sub).mkdir()
        (f,) = check_vocab(write(sub, t2d=t2d, x=torch.zeros(1)), V, Vd)
        return f

    first = grade(list(range(Vd)), tmp_path / "a")
    assert first.severity == "info" and "0.00%" in first.title
    tail = grade(list(range(Vd - 3)) + [500, 600, 700], tmp_path / "b")  # 3 of 200 = 1.5%
    assert tail.severity == "warning" and "1.50%" in tail.title and tail.evidence["first_misnumbered"] == Vd - 3
    early = grade(list(range(50)) + list(range(300, 450)), tmp_path / "c")  # 150 of 200
    assert early.severity == "error" and "75.00%" in early.title
    assert misnumbered_share([True] * 3 + [False] * 7, 4) is None  # t2d marks 3 ids, not Vd
    assert 3 / Vd <= WRONG_SHARE_ERROR < 150 / Vd


def test_t2d_is_graded_by_the_target_vocabulary_and_only_where_the_release_reads_it(tmp_path):
    """A draft config whose vocab_size (32) is below the target's (64), with t2d of the target's length and d2t
    mapping into the target's ids: SGLang 0.5.17 never reads t2d and serves it; no draft.d2t finding."""
    from safetensors.torch import load_file

    from kit.checkpoint import inspect as ci
    from kit.checkpoint.random_draft import write_random_draft
    from kit.preflight import Deployment, DoctorConfig
    from kit.tests.checkpoint.test_checkpoint import TINY

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({**TINY, "model_type": "llama"}))
    d = write_random_draft(tmp_path / "draft", "sglang", TINY, draft_vocab_size=32)
    (d / "config.json").write_text(json.dumps({**json.loads((d / "config.json").read_text()), "vocab_size": 32}))
    state = load_file(d / "model.safetensors")
    state["embed_tokens.weight"] = state["embed_tokens.weight"][:32].clone()
    write_safetensors(d / "model.safetensors", state)
    assert list(state["t2d"].shape) == [64] and int((state["d2t"] + torch.arange(32)).max()) >= 32
    for tgt in (target, None):  # without a target, t2d's length stands for its vocabulary
        ctx = Deployment.build(DoctorConfig(target=tgt and str(target), draft=str(d), sglang_version="0.5.17"))
        assert [f for f in ci.doctor_checks(ctx) if f.code == "draft.d2t"] == []
    # a release that read t2d would grade it against the target's vocabulary
    ck = read_checkpoint(d)
    assert check_vocab(ck, 64, 32, reads_t2d=True) == []
    (f,) = check_vocab(ck, 128, 32, reads_t2d=True)
    assert f.severity == "error" and "t2d is BOOL [64], expected BOOL [128]" in f.title
    assert check_vocab(ck, 128, 32) == []  # SGLang's loaders skip t2d: not graded
