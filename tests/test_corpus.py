"""A corpus of real public EAGLE-3 deployments, each run through `kit doctor` against the truth its source states.

Every case in `tests/corpus/cases.json` names a draft config, a target config and a launch command taken from a
public source (SGLang, SpecForge, EAGLE, AngelSlim pull requests, issues and docs) and the truth that source
states: healthy, or which fault (a finding code), and the release that truth holds for. `tests/corpus/configs.json`
holds every config with its own provenance (repository, path, commit and URL for verbatim files; for any other,
the fields filled in, `reconstructed`, and the published fields it lacks, `absent`: doctor may read none of those,
which `corpus_cases.reads_noted` checks). A recorded GPU rehearsal of the corpus is held to the same truths: a row
that ends otherwise says why from the case's data (bench/rehearse_table.py).
Draft weights are not needed: the draft directory gets a safetensors file whose header carries the key names and
shapes that draft's exporter writes (`WEIGHT_LAYOUTS`, computed from its config) over a sparse file, so a 7168-wide
Kimi draft costs a few kilobytes on disk.

Outcomes: caught (every truth code present as an error or warning), missed, false alarm (an error on a healthy
case), exit 2 (`KitInputError`, the CLI's exit status 2), crash (any other exception). The confusion table in
docs/corpus.md is generated from the same run and checked here so it stays true:

    python -m pytest tests/test_corpus.py -q
    python tests/test_corpus.py --write-doc      # regenerate docs/corpus.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus_cases import (  # noqa: E402
    DOC,
    ROOT,
    load_cases,
    load_classes,
    load_configs,
    no_side_env_builds,
    render_doc,
    run_all,
    run_case,
    weight_spec,
    write_sparse_safetensors,
)

# -- tests ---------------------------------------------------------------------------------------
CASES = load_cases()


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_matches_truth(case, request):
    if case.get("xfail"):
        request.applymarker(pytest.mark.xfail(reason=case["xfail"], strict=True))
    r = run_all()[case["id"]]
    assert r["outcome"] in ("caught", "no false alarm"), f"{r['outcome']}: {r['detail'] or r}"


@pytest.mark.parametrize("case", load_classes(), ids=[c["id"] for c in load_classes()])
def test_built_class_matches_truth(case):
    r = run_all()[case["id"]]
    assert r["outcome"] in ("caught", "no false alarm"), f"{r['outcome']}: {r['detail'] or r}"


def test_every_fact_is_reported_by_one_provider():
    """kit doctor's providers own their facts (kit.serving.checks.shared_with_doctor): no finding comes twice."""
    twice = {cid: r["twice"] for cid, r in run_all().items() if r.get("twice")}
    assert not twice, twice


def test_corpus_has_real_cases_with_provenance():
    prov = {name: c["provenance"] for name, c in load_configs().items()}
    assert len(CASES) >= 20 and all(p.get("url") and p.get("fidelity") for p in prov.values())
    for c in CASES:
        assert c["sources"] and all(u.startswith("https://") for u in c["sources"])
        assert c["truth"]["verdict"] in ("healthy", "fault") and c["truth"]["stated"]
        for f in [c["target"]] + ([c["draft"]["config"]] if c.get("draft") else []):
            assert f in prov, f"{f}: no provenance"


def test_each_truth_names_the_release_it_holds_for():
    from kit.sglang.versions import Version, is_version

    for c in CASES + load_classes():
        t = c["truth"]
        assert is_version(t.get("release") or ""), f"{c['id']}: the truth names no release"
        assert c.get("sglang_version") in (None, t["release"]), f"{c['id']}: judged at another release than its truth's"
        assert "fixed_in" not in t or Version.parse(t["release"]) < Version.parse(t["fixed_in"]), c["id"]


def test_a_config_that_is_not_the_published_file_says_what_it_lacks_and_what_was_filled_in():
    """Verbatim files carry repository, path and commit; any other lists `reconstructed` (values not copied from the
    published file, each said in `fidelity`) and `absent` (fields the published file has that the copy lacks)."""
    for name, c in load_configs().items():
        p, cfg = c["provenance"], c["config"]
        if p["fidelity"] == "verbatim":
            assert p.get("repository") and p.get("commit") and not {"reconstructed", "absent"} & set(p), name
            continue
        assert isinstance(p.get("reconstructed"), list) and isinstance(p.get("absent"), list), name
        assert all(_at(cfg, k) is not _MISSING for k in p["reconstructed"]), name
        assert all(_at(cfg, k) is _MISSING for k in p["absent"]), name


_MISSING = object()


def _at(cfg: dict, dotted: str):
    for part in dotted.split("."):
        if not isinstance(cfg, dict) or part not in cfg:
            return _MISSING
        cfg = cfg[part]
    return cfg


def test_no_rule_reads_a_field_the_corpus_copy_lacks():
    """doctor judges the published files only where it reads what they say: a rule that looks up a field the copy
    marks `absent` (the published file has it, the copy not) would judge an artifact of the corpus."""
    cfgs = load_configs()
    hits = {}
    for c in CASES + load_classes():
        for role, name in (("target", c.get("target")), ("draft", (c.get("draft") or {}).get("config"))):
            absent = set(cfgs[name]["provenance"].get("absent") or ()) if name else set()
            if absent & set(run_all()[c["id"]]["reads"].get(role, ())):
                hits[f"{c['id']} {name}"] = sorted(absent & set(run_all()[c["id"]]["reads"][role]))
    assert not hits, hits
    # the notes are real: the dtype rule reads Kimi-K2.5's where it sits, under text_config
    kimi = run_all()["sglang-pr19689-kimi-k25-eagle3"]["reads"]["target"]
    assert {"text_config.torch_dtype", "text_config.max_position_embeddings", "quantization_config"} <= set(kimi)


def _recorded_rehearsal() -> Path:
    """The newest recorded GPU rehearsal of the corpus (docs/results/*_rehearse_YYYYMMDD/, 20 rows or more)."""
    runs = [p for p in ROOT.glob("docs/results/*_rehearse_*/rehearse.jsonl") if p.parent.name[-8:].isdigit()]
    full = [p for p in runs if sum('"table"' in line for line in p.read_text().splitlines()) >= 20]
    return max(full, key=lambda p: p.parent.name[-8:])


def test_a_recorded_rehearsal_that_ends_otherwise_than_its_truth_says_why():
    """The table compares each rehearsal's outcome with the truth at the rehearsed release; a row that differs
    carries its explanation from the case's data (bench/rehearse_table.py), or this fails."""
    sys.path.insert(0, str(ROOT / "bench"))
    from rehearse_table import table_rows

    rows, _ = table_rows(_recorded_rehearsal())
    differ = {c["case"]: c.get("explanation") for c in rows if c.get("matches_truth") is False}
    assert len([c for c in rows if "matches_truth" in c]) >= 20
    assert all(differ.values()), {k: v for k, v in differ.items() if not v}


def test_a_corrected_config_no_longer_gives_what_the_correction_explains():
    """A `corrects` note explains a recorded row only while the run's doctor column names its codes: doctor on the
    corrected file must not, or the note would explain a fault that is still there."""
    sys.path.insert(0, str(ROOT / "bench"))
    from gpu_rehearse import known_cases

    checked = 0
    for c in known_cases().values():
        for name in (c.get("target"), (c.get("draft") or {}).get("config")):
            fix = load_configs().get(name or "", {}).get("provenance", {}).get("corrects")
            if fix:
                assert not set(fix["codes"]) & set(run_case(c)["errors"]), (c["id"], name)
                checked += 1
    assert checked >= 3  # the llama and deepseek-v3 families, sglang-pr14280


def test_sparse_header_round_trips_through_the_kit_reader(tmp_path):
    from kit.checkpoint.safetensors_io import read_checkpoint

    cfg = load_configs()["draft/specforge-kimi-k25-eagle3.json"]["config"]
    spec = weight_spec(cfg, "midlayer")
    write_sparse_safetensors(tmp_path / "model.safetensors", spec, cfg)
    ck = read_checkpoint(tmp_path / "model.safetensors")
    assert {k: tuple(t.shape) for k, t in ck.tensors.items()} == {k: s for k, (_, s) in spec.items()}
    assert ck.tensors["fc.weight"].shape[1] == 3 * 7168
    assert (tmp_path / "model.safetensors").stat().st_blocks * 512 < 1 << 20  # sparse: holes cost no disk


def test_a_release_without_flag_table_is_not_judged_by_another_releases_table():
    """`--speculative-draft` is unambiguous in 0.4.x/0.5.1 (one --speculative-draft* flag) and ambiguous in the
    recorded 0.5.17 table: for a release outside every stored table the kit says its flags were not checked, and
    convicts nothing by the nearest table."""
    from kit.serving.checks import lint
    from kit.serving.launch import spec_from_argv

    argv = "python3 -m sglang.launch_server --model m --speculative-algo EAGLE --speculative-draft d".split()
    with no_side_env_builds():
        old = lint(spec_from_argv(argv, sglang_version="0.4.1"), sglang_version="0.4.1").findings
        new = lint(spec_from_argv(argv, sglang_version="0.5.17"), sglang_version="0.5.17").findings
    assert not [f for f in old if f.code == "launch.flag"]
    [plain] = [f for f in old if f.code == "launch.parser"]
    assert plain.severity == "warning" and "not checked" in plain.title and "0.4.1" in plain.title
    assert not [f for f in old if f.severity == "error"]
    assert {f.code for f in new if f.severity == "error"} >= {"launch.flag", "launch.spec_params"}


def test_only_variables_the_server_sees_allow_a_longer_context():
    """pr9573's launch with the variable given as `VAR=1 && python` (a shell variable, never exported): SGLang 0.5.1
    does not see it, so the draft's ModelConfig raises at startup instead of running with a 2048-row rope cache."""
    case = next(c for c in CASES if c["id"] == "sglang-pr9573-llama31-prefix-flags")
    exported = run_case(case)
    unexported = run_case({**case, "launch": case["launch"].replace("LEN=1 python", "LEN=1 && python", 1)})
    assert "draft.context_short" in exported["errors"] and "rotary cache" in exported["detail"]
    assert "draft.context_short" in unexported["errors"] and "raises ValueError at startup" in unexported["detail"]


# what SGLang's model code reads from a target config with no default (release, file, attribute): a transcribed
# corpus config that lacks one makes the rehearsal's miniature fail where the published checkpoint loads
SGLANG_READS = {
    "gpt_oss": ("0.5.17", "srt/models/gpt_oss.py", "swiglu_limit"),
    "deepseek_v3": ("0.5.17", "srt/models/deepseek_v2.py", "moe_layer_freq"),
}


def test_transcribed_targets_carry_what_sglang_reads_from_them():
    from kit.findings import KitInputError
    from kit.sglang.source import source_text

    checked = 0
    for name, c in load_configs().items():
        read = SGLANG_READS.get(c["config"].get("model_type"))
        if not name.startswith("target/") or read is None:
            continue
        version, rel, attr = read
        try:
            text = source_text(version, rel)
        except KitInputError as e:
            pytest.skip(f"sglang {version} source unavailable offline: {e}")
        assert f"config.{attr}" in (text or ""), f"{rel} of SGLang {version} no longer reads {attr}"
        assert attr in c["config"], f"{name}: lacks {attr}, which SGLang {version}'s {rel} reads"
        checked += 1
    assert checked >= 3


def test_doc_is_generated_from_this_run():
    assert DOC.read_text() == render_doc(run_all()), "docs/corpus.md is stale: python tests/test_corpus.py --write-doc"


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if "--write-doc" in sys.argv:
        DOC.write_text(render_doc(run_all()))
        print(f"wrote {DOC}")
    else:
        for cid, r in run_all().items():
            print(f"{r['outcome']:15s} {cid:50s} {','.join(r['errors'])} | {r['detail'][:160]}")
