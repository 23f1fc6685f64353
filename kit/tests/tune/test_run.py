"""kit.tune.run with a fake launcher that starts a STUB of SGLang's HTTP API per point (kit/tests/sglang_stub.py):
the flow (calibrate, predict, measure the best predicted, answer), tune.json, resume, the budget, bad input and
the launch line. The stub accepts every drafted token (steps + 1 per verify) and sleeps per step a little longer
the more it drafts, so the answer is known in advance; the real servers are tests/test_tune_reference.py's."""

import contextlib
import json

import pytest

from kit.checkpoint.hub import ModelFiles as HubFiles
from kit.cli import main
from kit.findings import KitInputError
from kit.measure.sweep import Point, SpecGrid, point_label, point_spec
from kit.serving.engines import get_engine
from kit.serving.launch import spec_from_command
from kit.sglang.params import SpecParams
from kit.tests.sglang_stub import StubConfig, StubThread
from kit.tune import run as tune_run
from kit.tune.run import TuneConfig, accept_lengths, bench_arms, plan, run_tune

PROMPTS = [{"id": f"q{i}", "kind": "chat", "text": f"prompt {i}"} for i in range(4)]


class FakeLauncher:
    def __init__(self):
        self.launched: list[str] = []

    @contextlib.contextmanager
    def __call__(self, point: Point):
        self.launched.append(point_label(point))
        n = point.speculative_num_draft_tokens if point else 1
        cfg = StubConfig(spec=point is not None, accept_pattern=[n], speculative_num_draft_tokens=max(n, 2),
                         step_delay=0.012 * (1 + 0.1 * (n - 1)))  # fmt: skip
        with StubThread(cfg) as s:
            yield s.url


def expected(p: SpecParams) -> tuple[float, str]:
    return p.speculative_num_draft_tokens * 0.95, "made up"


def _cfg(tmp_path, **kw) -> TuneConfig:
    base = dict(batch_size=[1, 2], spec=SpecGrid([1, 2, 3], [1], [0]), top=2, num_prompts=4, calibration_prompts=2,
                max_new_tokens=12, warmup=0, out_dir=str(tmp_path / "tune"))  # fmt: skip
    return TuneConfig(**{**base, **kw})


def test_tune_calibrates_predicts_measures_the_best_and_resumes(tmp_path):
    fl, heard = FakeLauncher(), []  # --miss wide: a stub slowed by a busy host is no second look (its own test)
    doc = run_tune(_cfg(tmp_path, miss=10.0), fl, expected, prompts=PROMPTS, on_update=lambda d, m: heard.append(m))
    # the calibration chains beside the baseline (one wave), then the two best predicted of both batch sizes
    assert sorted(fl.launched[:3]) == ["1-1-2", "3-1-4", "baseline"] and fl.launched[3:] == ["2-1-3"], fl.launched
    assert doc["status"] == "done" and heard[0] == "calibrating batch 1: baseline, 1-1-2, 3-1-4"
    assert set(doc["calibration"]) == {"1", "2"} and doc["calibration"]["1"]["growth"] >= 0
    for b in ("1", "2"):
        pred = doc["predicted"][b]
        assert set(pred) == {"1-1-2", "2-1-3", "3-1-4"} and pred["3-1-4"] > pred["1-1-2"]
        assert set(doc["measured"][b]) == {"3-1-4", "2-1-3"}
        row = doc["measured"][b]["3-1-4"]
        assert row["median"] > 1 and row["accept_length"] > 3 and row["predicted"] == pred["3-1-4"]
        assert doc["best"][b]["point"] == "3-1-4" and "3-1-4 --speculative-eagle-topk" not in str(
            doc["best"][b]["launch"]
        )
    assert doc["accept_length"]["3-1-4"] == {"value": pytest.approx(3.8), "source": "made up"}
    out = tmp_path / "tune"
    assert json.loads((out / "tune.json").read_text())["measured"] == doc["measured"]
    assert (out / "tune.png").stat().st_size > 0
    # resume: everything measured, nothing launched; an added batch size is calibrated and measured alone
    fl2 = FakeLauncher()
    again = run_tune(_cfg(tmp_path, miss=10.0, resume=True), fl2, expected, prompts=PROMPTS)
    assert fl2.launched == [] and again["measured"] == doc["measured"]
    third = run_tune(_cfg(tmp_path, miss=10.0, resume=True, batch_size=[1, 2, 3]), fl2, expected, prompts=PROMPTS)
    assert set(third["measured"]) == {"1", "2", "3"} and sorted(fl2.launched[:3]) == ["1-1-2", "3-1-4", "baseline"]
    assert third["measured"]["1"] == doc["measured"]["1"]


def test_a_miss_puts_the_ranking_in_doubt_and_the_next_points_are_measured(tmp_path):
    """Every point expected at 1.2 where the stub accepts all it drafts: the first measured ones beat their
    predictions far beyond --miss, so the rest of the ranking is measured too, and the answer is the true best."""
    doc = run_tune(_cfg(tmp_path, batch_size=[1]), FakeLauncher(), lambda p: (1.2, "made up"), prompts=PROMPTS)
    assert doc["second_look"]["1"] and set(doc["measured"]["1"]) == {"1-1-2", "2-1-3", "3-1-4"}
    assert doc["best"]["1"]["point"] == "3-1-4" and doc["status"] == "done"
    assert {f["code"] for f in doc["findings"]} == {"bench.prediction_miss"}


class FailingLauncher(FakeLauncher):
    @contextlib.contextmanager
    def __call__(self, point: Point):
        with super().__call__(point) as url:
            if point_label(point) == "2-1-3":
                raise RuntimeError("2-1-3 did not come up")
            yield url


def test_every_batch_sizes_points_start_in_one_wave_and_a_failing_one_costs_only_its_own():
    fl, a, b = FailingLauncher(), SpecParams(3, 1, 4), SpecParams(2, 1, 3)
    servers = tune_run.Servers(fl, "sglang")
    try:
        urls = servers.up([None, a], ahead=[a, SpecParams(1, 1, 2)])  # one wave: the baseline, a, and 1-1-2 ahead
        assert set(urls) == {"baseline", "3-1-4"} and sorted(fl.launched) == ["1-1-2", "3-1-4", "baseline"]
        assert servers.up([None, SpecParams(1, 1, 2)]) and len(fl.launched) == 3  # started ahead: nothing new
        fl.launched.clear()
        urls = servers.up([None, a], ahead=[a, b])  # the wave with 2-1-3 fails: a's own wave does not wait for it
        assert set(urls) == {"baseline", "3-1-4"} and fl.launched == ["2-1-3"]
        with pytest.raises(RuntimeError, match="2-1-3 did not come up"):
            servers.up([None, b], ahead=[a, b])
        assert fl.launched == ["2-1-3", "2-1-3"]  # tried once more for itself, not again as a wave
    finally:
        servers.close()


class CountingLauncher(FakeLauncher):
    def __init__(self):
        super().__init__()
        self.alive = self.most = 0

    @contextlib.contextmanager
    def __call__(self, point: Point):
        with super().__call__(point) as url:
            self.alive += 1
            self.most = max(self.most, self.alive)
            try:
                yield url
            finally:
                self.alive -= 1


def test_servers_never_pass_the_most_the_device_holds():
    fl, a, b, c = CountingLauncher(), SpecParams(1, 1, 2), SpecParams(3, 1, 4), SpecParams(2, 1, 3)
    servers = tune_run.Servers(fl, "sglang", most=3)
    try:
        servers.up([None, a, b])
        servers.up([None, c], ahead=[c, a])  # 4 with the live ones: the wave stops, starts afresh with what is ahead
        assert fl.launched == ["baseline", "1-1-2", "3-1-4", "baseline", "2-1-3", "1-1-2"] and fl.most == 3
        servers.up([None, a, c])  # all live: nothing starts
        assert len(fl.launched) == 6 and fl.most == 3
        servers.up([None, b, c], ahead=[a])  # afresh, and no room for what is ahead: the three alone
        assert fl.launched[6:] == ["baseline", "3-1-4", "2-1-3"] and fl.most == 3
    finally:
        servers.close()
    assert fl.alive == 0


def test_a_target_the_gpu_holds_too_few_times_is_refused_before_anything_starts(tmp_path, monkeypatch):
    """A config-only Llama-2-7B (dummy weights): 12.6 GiB in bf16; SGLang's servers share 0.75 of an 80 GiB GPU."""
    llama7b = dict(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_hidden_layers=32,
                   vocab_size=32000, model_type="llama")  # fmt: skip
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps(llama7b))
    monkeypatch.setattr("kit.env.machine.device_memory_gib", lambda index=0: 80.0)
    spec = spec_from_command(f"python -m sglang.launch_server --model-path {tmp_path / 't'} --load-format dummy")
    assert tune_run.launch_footprint(spec) == (2 * 6_738_415_616, 32 * 2 * 32 * 128 * 2)  # bf16 weights, KV a token
    sglang = get_engine("sglang")
    cfg = _cfg(tmp_path)
    assert tune_run.most_alive(cfg, 3) == 4 and tune_run.servers_alive(cfg, spec, sglang) == (3, 1024)
    with pytest.raises(
        KitInputError, match=r"fit 3 time\(s\) on this 80 GiB GPU, and kit tune runs 4 servers.*: --top 2, "
    ):
        tune_run.servers_alive(_cfg(tmp_path, top=3, spec=SpecGrid([1, 2, 3, 4], [1], [0])), spec, sglang)
    # each server's pool holds its largest batch at full length: the longest prompt sent, the new tokens, the drafts
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"prompt": "x" * 3000}) + "\n")
    wide = _cfg(tmp_path, batch_size=[1, 4, 16], max_new_tokens=64, prompts=str(long))
    assert tune_run.pool_tokens(wide) == 49152  # 16 x (3000 + 64 + 4) = 49088, up to a multiple of 1024
    with pytest.raises(KitInputError, match=r"a KV pool of 24\.0 GiB for batch 16\) fit 1 time\(s\).*smaller batch"):
        tune_run.servers_alive(wide, spec, sglang)
    builtin = tune_run.pool_tokens(_cfg(tmp_path, batch_size=[1, 4, 16], max_new_tokens=64))
    templated = tune_run.pool_tokens(_cfg(tmp_path, batch_size=[1, 4, 16], max_new_tokens=64, chat_template="embedded"))
    assert builtin == 3072 and templated == 2048  # the built-in prompts: the template's tokens under the characters
    assert tune_run.servers_alive(cfg, spec, get_engine("reference")) == (4, None)  # CPU: no rule, no pool
    # a hub id: the folder kit.checkpoint.hub resolves it to (the cache, else its headers); unknown here: no rule
    monkeypatch.setattr("kit.checkpoint.hub.resolve", lambda model, revision, flag: HubFiles(model, tmp_path / "t", ""))
    hub_spec = spec_from_command("python -m sglang.launch_server --model-path meta-llama/Llama-2-7b-hf")
    assert tune_run.launch_footprint(hub_spec)[0] == 2 * 6_738_415_616
    monkeypatch.setattr("kit.checkpoint.hub.resolve", lambda *a, **k: (_ for _ in ()).throw(KitInputError("offline")))
    assert tune_run.launch_footprint(hub_spec) is None


def test_the_oracle_runs_on_a_quarter_of_the_threads_while_the_servers_start():
    import threading

    import torch

    full, seen, started = torch.get_num_threads(), [], threading.Event()

    def oracle(p: SpecParams):
        seen.append(torch.get_num_threads())
        started.set()  # the servers are up after the first point
        return 2.0, "made up"

    got = tune_run.lengths_beside([SpecParams(1, 1, 2), SpecParams(2, 1, 3)], oracle, started)
    assert got["2-1-3"] == {"value": 2.0, "source": "made up"}
    assert seen == [max(1, full // 4), full] and torch.get_num_threads() == full


def test_budget_and_stop_end_the_run_and_resume_goes_on(tmp_path):
    fl = FakeLauncher()
    doc = run_tune(_cfg(tmp_path), fl, expected, prompts=PROMPTS, stop=lambda: True)
    assert doc["status"] == "stopped: --resume continues" and fl.launched == [] and not doc["measured"]
    doc = run_tune(_cfg(tmp_path, resume=True, budget_s=1e-9), fl, expected, prompts=PROMPTS)
    assert doc["status"].startswith("budget spent") and not doc["calibration"]
    doc = run_tune(_cfg(tmp_path, resume=True), fl, expected, prompts=PROMPTS)
    assert doc["status"] == "done" and set(doc["best"]) == {"1", "2"}


def test_refused_points_are_kept_with_sglangs_reason():
    points, refused = plan(TuneConfig(spec=SpecGrid([2], [2], [3, 40])))
    assert [p.label() for p in points] == ["2-2-3"]
    assert list(refused) == ["2-2-40"] and "outside 2..7" in refused["2-2-40"]
    with pytest.raises(KitInputError, match="the grid has no point the sglang engine would run.*2-2-40"):
        plan(TuneConfig(spec=SpecGrid([2], [2], [40])))
    # vLLM drafts chains: its grid is the chains, each tree refused with the engine's reason
    points, refused = plan(TuneConfig(engine="vllm", spec=SpecGrid([1, 2], [1, 4], [0])))
    assert [p.label() for p in points] == ["1-1-2", "2-1-3"] and "vLLM's EAGLE drafts a chain" in refused["2-4-21"]


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"batch_size": [0, 4]}, r"--batch-size \[0, 4\]"),
        ({"spec": SpecGrid([1], [0], [0])}, "--speculative-eagle-topk"),
        ({"top": 0}, "--top 0"),
        ({"miss": 0}, "--miss 0"),
        ({"accept_length": 0.5}, "--accept-length 0.5"),
    ],
)
def test_bad_values_are_one_line_errors(kw, msg):
    with pytest.raises(KitInputError, match=msg):
        TuneConfig(**kw)


def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "t"
    assert main(["tune", "--engine", "reference", "--out-dir", str(out)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "kit tune: error: --launch is required: the command that starts the speculative server"
    )
    line = "python -m sglang.launch_server --model-path embedded --speculative-algorithm EAGLE3"
    assert main(["tune", "--launch", line, "--out-dir", str(out)]) == 2
    assert "no --speculative-draft-model-path" in capsys.readouterr().err
    assert (
        main(
            ["tune", "--launch", line + " --speculative-draft-model-path d", "--batch-size", "0", "--out-dir", str(out)]
        )
        == 2
    )
    assert "--batch-size [0]" in capsys.readouterr().err
    assert not out.exists()
    (out / "x").mkdir(parents=True)  # a folder that holds something else: refused without --resume
    with pytest.raises(KitInputError, match="exists and is not empty"):
        run_tune(_cfg(tmp_path, out_dir=str(out)), FakeLauncher(), expected)
    assert sorted(p.name for p in out.iterdir()) == ["x"]


def test_the_launch_line_sets_the_point_or_drops_speculation():
    base = spec_from_command(
        "python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 "
        "--speculative-draft-model-path D --speculative-num-steps 5 --speculative-eagle-topk 4 "
        "--speculative-num-draft-tokens 8 --port 30000 --speculative-draft-load-format auto --load-format dummy"
    )
    line = point_spec(base, SpecParams(2, 1, 3)).command("sglang")
    assert "--speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3" in line
    assert "--port 30000" in line and "--model-path T" in line
    off = point_spec(base, None).command("sglang")
    assert "--speculative" not in off and "--model-path T" in off and "--load-format dummy" in off and "auto" not in off


def test_the_servers_share_the_device_and_the_lines_to_paste_do_not(tmp_path, monkeypatch):
    seen = {}

    def fake_run_tune(cfg, launcher, expected, base=None, on_update=None, alive=None):
        seen["base"] = base
        return {"findings": [], "status": "done", "wall_s": 0.0, "best": {}, "predicted": {}}

    monkeypatch.setattr(tune_run, "run_tune", fake_run_tune)
    monkeypatch.setattr(tune_run, "accept_lengths", lambda *a: expected)
    monkeypatch.setattr("kit.measure.sweep.spec_launcher", lambda spec, *a: seen.setdefault("shared", spec))
    line = (
        "python -m sglang.launch_server --model-path T --speculative-algorithm EAGLE3 --speculative-draft-model-path D"
    )
    assert main(["tune", "--launch", line, "--batch-size", "1", "4", "--out-dir", str(tmp_path / "t")]) == 0
    # 7 servers (the calibration's three, then two points per batch size) fill 0.75 of the GPU together, each with a
    # KV pool for batch 4 at full length (kit.serving.engines.sglang.share_device says why the fraction is whole)
    assert seen["shared"].mem_fraction_static == 0.75
    tokens = seen["shared"].extra_args[seen["shared"].extra_args.index("--max-total-tokens") + 1]
    assert tokens == str(tune_run.pool_tokens(TuneConfig(batch_size=[1, 4]))) == "1024"
    assert seen["base"].mem_fraction_static is None and "--max-total-tokens" not in seen["base"].extra_args


def test_the_panel_runs_on_click_and_fills_in(tmp_path):
    import time

    from kit.tune.run import panel

    box = panel(_cfg(tmp_path, batch_size=[1]), FakeLauncher(), expected, prompts=PROMPTS)
    (run_b, stop_b), status, tab, img = box.children[0].children, *box.children[1:]
    assert "press <b>Run tune</b>" in status.value and not tab.value  # inert until pressed
    run_b.click()
    deadline = time.monotonic() + 60
    while run_b.disabled and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status.value == "done" and stop_b.disabled, status.value
    assert "batch_size" in tab.value and img.value and img.layout.display is None
    assert (tmp_path / "tune" / "tune.json").exists()


def test_a_given_accept_length_stands_for_every_point_and_ignore_eos_reaches_each_bench(tmp_path, monkeypatch):
    """The dummy-weight cost check: no oracle runs (the draft need not exist), each bench asks for full lengths."""
    cfg = _cfg(tmp_path, accept_length=1.0, ignore_eos=True)
    expected_of = accept_lengths("embedded", str(tmp_path / "no-draft"), cfg)
    assert {p.label(): expected_of(p) for p in plan(cfg)[0]} == dict.fromkeys(
        ("1-1-2", "2-1-3", "3-1-4"), (1.0, "--accept-length")
    )
    seen = []
    monkeypatch.setattr(tune_run, "run_bench", lambda bcfg, prompts=None: seen.append(bcfg))
    bench_arms(cfg, {"baseline": "http://a", "1-1-2": "http://b"}, 2, 4, tmp_path / "b")
    assert seen[0].ignore_eos and seen[0].concurrency == 2 and seen[0].baseline_url == "http://a"
