"""RaggedTarget's measured GEMM plan: every plan gives the model's own numbers, and it is measured once."""

import torch

from kit.reference.target import (
    MODULE_PATH,
    GemmPlan,
    Piece,
    RaggedTarget,
    gemm_plan,
    linear,
    measure_plan,
    measure_rows,
)
from kit.tests.tinymodels import one_thread, tiny_target  # noqa: F401 (autouse fixture)

ROWS = {1: (2, "transposed"), 2: (2, "linear"), 3: (4, "transposed"), 4: (4, "packed"), 5: (8, "linear")}


def padded(model) -> GemmPlan:
    """A plan that pads and reorders every bias-free linear of `model`."""
    shapes = {tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)}
    return GemmPlan({s: ROWS for s in shapes}, "test")


def test_every_plan_gives_the_same_decode_and_verify_forward():
    m = tiny_target(layers=3, dtype=torch.float32)
    ids = [5, 7, 9, 11, 2, 3, 4, 8, 6]
    outs = []
    for plan in (MODULE_PATH, padded(m)):
        rt = RaggedTarget(m, [1, 2])
        rt.plan = plan
        kv = rt.new_kv(32)
        rt.forward([Piece(kv, ids[:5], logits="last")])
        verify = rt.forward([Piece(kv, ids[5:8])])[0]  # 3 tokens: padded to 4
        step = rt.forward([Piece(kv, ids[8:])])[0]  # 1 token: padded to 2
        outs.append((verify, step))
    for (pa, fa), (pb, fb) in zip(*outs):
        assert pa == pb
        assert torch.allclose(fa, fb, atol=1e-5)
    assert len(outs[1][0][0]) == 3 and len(outs[1][1][0]) == 1


def test_linear_pads_and_drops_the_extra_rows():
    lin = torch.nn.Linear(8, 4, bias=False)
    plan = GemmPlan({(4, 8): ROWS})
    for rows in (1, 3, 5, 9):  # 9 is outside the plan: the module's own path
        x = torch.randn(rows, 8)
        y = linear(lin, x, plan)
        assert y.shape == (rows, 4) and y.is_contiguous()
        assert torch.allclose(y, lin(x), atol=1e-6)
    biased, other = torch.nn.Linear(8, 4), torch.nn.Linear(8, 6, bias=False)  # a bias; a shape outside the plan
    for mod in (biased, other):
        x = torch.randn(3, 8)
        assert torch.allclose(linear(mod, x, plan), mod(x), atol=1e-6)


def test_measure_rows_picks_per_row_count_and_says_why():
    table, why, plan_s, half_s = measure_rows([torch.randn(64, 32) for _ in range(4)], rows=range(1, 5))
    assert all(n in range(1, 5) and n <= m <= 4 for n, (m, _) in table.items())
    assert len({m for m, way in table.values() if way == "packed"}) <= 1  # one packed copy per shape at most
    assert why.startswith("64x32 x4, ms by rows (linear / transposed") and "4: " in why
    assert len(plan_s) == 2 and all(t > 0 for t in plan_s)  # a forward of rows 1-4 per timed round
    assert half_s is None or (len(half_s) == 2 and "half" in why)


def test_a_packed_weight_gives_the_module_s_numbers_and_follows_a_changed_weight():
    from kit.reference.target import can_pack, packed_weight

    lin = torch.nn.Linear(32, 16, bias=False)
    if not can_pack(lin.weight):
        return  # this torch has no MKL: the plan never packs
    plan = GemmPlan({(16, 32): {2: (4, "packed"), 4: (4, "packed")}})
    with torch.inference_mode():
        for rows in (2, 4):
            x = torch.randn(rows, 32)
            assert torch.allclose(linear(lin, x, plan), lin(x), atol=1e-5)
        first = packed_weight(lin, 4)
        assert packed_weight(lin, 4) is first  # made once
    with torch.no_grad():
        lin.weight.mul_(2)
    with torch.inference_mode():
        x = torch.randn(3, 32)
        assert torch.allclose(linear(lin, x, plan), lin(x), atol=1e-5)  # repacked after the weight changed


def test_fp16_weights_decode_and_verify_as_the_fp32_model_does():
    from kit.reference.target import can_half

    m = tiny_target(layers=3, dtype=torch.float32)
    if not can_half(m.lm_head.weight):
        return  # no FBGEMM in this torch: the plan never takes fp16 weights
    ids = [5, 7, 9, 11, 2, 3, 4, 8, 6]
    outs = []
    for plan in (MODULE_PATH, GemmPlan({}, "test", half=True)):
        rt = RaggedTarget(m, [1, 2])
        rt.plan = plan
        kv = rt.new_kv(32)
        rt.forward([Piece(kv, ids[:5], logits="last")])
        outs.append((rt.forward([Piece(kv, ids[5:8])])[0], rt.forward([Piece(kv, ids[8:])])[0]))
    for (pa, fa), (pb, fb) in zip(*outs):
        assert pa == pb  # the same tokens
        assert not torch.equal(fa, fb) and torch.allclose(fa, fb, atol=2e-2)  # fp16-rounded weights: close, not equal
    plan = GemmPlan({}, "test", half=True)
    assert GemmPlan.from_json(plan.to_json()) == plan


def test_fp16_weights_are_taken_only_when_they_win_every_round(monkeypatch):
    import kit.reference.target as kt

    m = tiny_target(layers=2, dtype=torch.float32)
    shapes = {tuple(w.weight.shape) for w in m.modules() if isinstance(w, torch.nn.Linear)}
    timed: list[tuple] = []

    def timings(plan_s, half_s):
        timed.clear()

        def rows(weights, ways):
            timed.append(tuple(ways))
            return kt.RowTable({}, "t", plan_s, half_s if "half" in ways else None)

        monkeypatch.setattr(kt, "measure_rows", rows)
        return measure_plan(m)

    taken = timings([2.0, 2.0], [1.0, 1.5])
    assert taken.half and set(timed) == {("linear", "half")}  # fp16 decided first: no fp32 table is timed
    assert len(timed) == len(shapes) > 1
    assert not timings([2.0, 2.0], [1.0, 2.5]).half  # 2x faster at its best, slower in a round a burst hit
    assert timed[len(shapes) :] == [kt.WAYS] * len(shapes)  # then the fp32 tables, every way
    assert not timings([2.0, 2.0], [1.9, 1.9]).half  # under 10% faster: fp32 stays
    assert taken.describe().startswith("fp16 weights (FBGEMM)") and taken.describe().endswith(": taken")
    assert timings([2.0, 2.0], [1.9, 1.9]).describe().startswith("fp32, the module's own path (fp16 weights")
    monkeypatch.setattr(kt, "can_half", lambda w: False)  # FBGEMM cannot run these weights
    cannot = timings([2.0, 2.0], [1.0, 1.0])
    assert not cannot.half and set(timed) == {kt.WAYS}
    assert cannot.describe() == "fp32, the module's own path (fp16 weights: FBGEMM cannot run every shape)"
    assert MODULE_PATH.describe() == "fp32, the module's own path"


def test_measure_plan_covers_every_weight_shape_and_round_trips():
    m = tiny_target(layers=2, dtype=torch.float32)
    plan = measure_plan(m)
    shapes = {tuple(w.weight.shape) for w in m.modules() if isinstance(w, torch.nn.Linear)}
    assert set(plan.shapes) <= shapes and all(f"{o}x{i}" in plan.why for o, i in shapes)
    assert GemmPlan.from_json(plan.to_json()) == plan


def test_gemm_plan_is_measured_once_per_machine_and_model_shape(monkeypatch, tmp_path):
    import kit.reference.target as kt

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("kit._busy_cores", lambda: 0.0)  # a quiet machine
    calls = []
    monkeypatch.setattr(kt, "measure_plan", lambda model: calls.append(model) or padded(model))
    m = tiny_target(layers=3, dtype=torch.float32)
    for _ in range(3):  # a per-prompt greedy or speculative call builds an engine each time
        assert RaggedTarget(m, None).plan == padded(m)
    assert calls == [m]
    other = tiny_target(layers=3, dtype=torch.float32)  # same shapes: a new process reads the cache
    kt._PLANS.clear()
    assert RaggedTarget(other, None).plan == padded(m)
    assert calls == [m]
    assert len(list((tmp_path / "gemm-plan").glob("*.json"))) == 1


def _scripted_clock(monkeypatch, cost):
    """time.perf_counter as measure_rows sees it: each timing of (m, transposed) in round r lasts cost[(m, t)][r]."""
    import time

    marks, now = [], 0.0
    for r in range(3):  # the warm-up round and reps=2
        for key in [(m, t) for m in (1, 2) for t in ("linear", "transposed")]:
            marks.append(now)
            now += cost[key][r]
            marks.append(now)
    ticks = iter(marks)
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))


def test_a_plan_must_win_every_round_not_only_its_best(monkeypatch):
    w = [torch.randn(8, 4)]
    monkeypatch.setattr("kit.reference.target.can_pack", lambda w: False)  # two ways timed: linear, transposed
    monkeypatch.setattr("kit.reference.target.can_half", lambda w: False)
    slow = {(1, "transposed"): [9, 9, 9], (2, "transposed"): [9, 9, 9]}
    # two rows beat one in every round: chosen
    _scripted_clock(monkeypatch, {(1, "linear"): [4, 4, 4], (2, "linear"): [2, 2, 3], **slow})
    assert measure_rows(w, rows=(1, 2))[0] == {1: (2, "linear")}
    # two rows look 2x faster in their best round, but a burst slowed one's other round: the module's path stays
    _scripted_clock(monkeypatch, {(1, "linear"): [4, 4, 9], (2, "linear"): [2, 2, 9.5], **slow})
    assert measure_rows(w, rows=(1, 2))[0] == {}


def test_a_busy_machine_gets_the_module_path_and_caches_nothing(monkeypatch, tmp_path):
    import kit.reference.target as kt

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(kt, "measure_plan", lambda model: calls.append(model) or padded(model))
    m = tiny_target(layers=2, dtype=torch.float32)
    monkeypatch.setattr("kit._busy_cores", lambda: 1.0)  # another process holds a core
    assert RaggedTarget(m, None).plan == MODULE_PATH and calls == []
    busy_after = iter([0.0, 1.0])  # quiet as the timing starts, busy by its end: the timings are not kept
    monkeypatch.setattr("kit._busy_cores", lambda: next(busy_after))
    kt._PLANS.clear()
    assert RaggedTarget(m, None).plan == MODULE_PATH and calls == [m]
    assert not list(tmp_path.rglob("*.json"))
    monkeypatch.setattr("kit._busy_cores", lambda: 0.0)
    kt._PLANS.clear()
    assert RaggedTarget(m, None).plan == padded(m)  # quiet: measured and kept
    assert len(list((tmp_path / "gemm-plan").glob("*.json"))) == 1


def test_a_start_beside_loading_siblings_waits_for_quiet_then_measures(monkeypatch, tmp_path):
    """A server started beside others waits (`wait_quiet_s`) until their loads end, then measures once."""
    import kit.reference.target as kt

    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kt, "measure_plan", lambda model: padded(model))
    monkeypatch.setattr("time.sleep", lambda s: None)
    m = tiny_target(layers=2, dtype=torch.float32)
    busy = iter([1.0, 1.0, 1.0, 0.0, 0.0])  # the siblings load for three polls, then the machine is quiet
    monkeypatch.setattr("kit._busy_cores", lambda: next(busy))
    kt._PLANS.clear()
    assert gemm_plan(m, wait_quiet_s=60) == padded(m)
    assert len(list((tmp_path / "gemm-plan").glob("*.json"))) == 1
    monkeypatch.setattr("kit._busy_cores", lambda: 1.0)  # busy for good: the wait ends at its bound
    kt._PLANS.clear()
    clock = iter(range(0, 1000, 10))
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    for f in (tmp_path / "gemm-plan").glob("*.json"):
        f.unlink()
    assert gemm_plan(m, wait_quiet_s=30) == MODULE_PATH
    assert not list((tmp_path / "gemm-plan").glob("*.json"))
