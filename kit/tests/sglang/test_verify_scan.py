"""Trees whose accepted path does not fit in their draft tokens: SGLang crashes while it starts, never ready.

The recorded rule (`kit.sglang.params.VERIFY_SHAPE`) against the real `_compact_accept_to_front` of each
release, run on the CPU by `kit.derive.verify_scan` (wheels downloaded once, cached; skipped offline), and
the one rule as the launch checks and `kit serve` report it.
Run: python -m pytest kit/tests/sglang/test_verify_scan.py -q
"""

import pytest

from kit.findings import KitInputError
from kit.sglang.params import VERIFY_SHAPE, SpecParams, resolve, verify_shape_issue
from kit.sglang.versions import Version
from kit.tests.sglang import derive_or_skip

# the release before the compaction, its first one, the move to eagle_worker_common.py, 0.5.17 (issue 22), default
RELEASES = ["0.5.12", "0.5.13", "0.5.16", "0.5.17", "0.5.23"]


def _derive_or_skip(version):
    from kit.derive.verify_scan import derive

    return derive_or_skip(derive, version)


@pytest.mark.parametrize("version", RELEASES)
def test_recorded_rule_matches_the_real_function(version):
    from kit.derive.verify_scan import recorded_crashes

    d = _derive_or_skip(version)
    recorded = recorded_crashes(version)
    assert set(map(tuple, d["crashes"])) == recorded
    if d["function"] is None:  # before the compaction: no crash anywhere in the grid
        assert Version.parse(version) < Version.parse(VERIFY_SHAPE["since"]) and not recorded
        return
    assert recorded  # the grid does hold crashing points, e.g. the issue's 3-2-3
    assert (3, 2, 3) in recorded and (3, 2, 4) not in recorded
    assert d["accept_width"] == "spec_steps + 1"
    assert all("topk > 1" in g for g in d["guards"]) and d["guards"]
    assert d["file"] == verify_shape_issue(3, 2, 3, version).evidence["source"].split()[0]


def test_rule_per_release_and_its_message():
    assert resolve(SpecParams(3, 2, 3), "EAGLE3", None, "0.5.12").params == SpecParams(3, 2, 3)
    for v in ("0.5.13", "0.5.17", "0.5.23", "0.6.0"):  # a later release: the newest recorded rule stands
        res = resolve(SpecParams(3, 2, 3), "EAGLE3", None, v)
        assert res.params is None and [i.code for i in res.errors()] == ["launch.spec_verify"]
        assert "The expanded size of the tensor (3) must match the existing size (4)" in res.errors()[0].title
    assert resolve(SpecParams(3, 2, 4), "EAGLE3", None, "0.5.23").params == SpecParams(3, 2, 4)
    assert resolve(SpecParams(3, 1, 3), "EAGLE3", None, "0.5.23").params == SpecParams(3, 1, 4)  # chains: s+1
    with pytest.raises(KitInputError, match="crashes while it starts, and the server never reports ready"):
        SpecParams(5, 4, 5).resolved(sglang_version="0.5.17")


def test_launch_check_names_it_as_an_error():
    from kit.serving.checks import lint
    from kit.serving.launch import LaunchSpec

    spec = LaunchSpec(
        model_path="m",
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path="d",
        speculative_num_steps=3,
        speculative_eagle_topk=2,
        speculative_num_draft_tokens=3,
    )
    f = lint(spec, parse_flags=False, sglang_version="0.5.17").by_code("launch.spec_verify")
    assert [x.severity for x in f] == ["error"] and f[0].evidence["sglang"] == "0.5.17"
    assert "eagle_worker_common.py" in f[0].evidence["source"]
    assert not lint(spec, parse_flags=False, sglang_version="0.5.12").by_code("launch.spec_verify")
    fixed = spec.replace(speculative_num_draft_tokens=4)
    assert not lint(fixed, parse_flags=False, sglang_version="0.5.17").errors


def test_reference_server_refuses_the_same_values_with_the_same_line(capsys):
    from kit.cli import main
    from kit.refserver.server import check_params
    from kit.serving.launch import LaunchSpec

    spec = LaunchSpec(
        speculative_algorithm="EAGLE3",
        speculative_num_steps=3,
        speculative_eagle_topk=2,
        speculative_num_draft_tokens=3,
    )
    with pytest.raises(KitInputError) as e:
        check_params(spec)
    assert verify_shape_issue(3, 2, 3, None).title in str(e.value)
    # the verb refuses before it binds a port or loads a model: one line, exit 2
    argv = ["serve", "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
    assert main(argv + ["--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and verify_shape_issue(3, 2, 3, None).title in err[0]


def test_sweep_grid_leaves_out_points_sglang_crashes_on():
    from kit.measure.sweep import grid

    pts = grid([3], [2], [3, 4], baseline=False)
    assert pts == [SpecParams(3, 2, 4)]
