"""The server capture: the recorder (kit.serving.capture_hook) on a decoder laid out as SGLang's LlamaModel,
driven one request at a time (extend, then one-token decodes), its chunks assembled by kit.measure.capture into
kit.reference.captured's format; the rank-0 and target-only rules, the token budget; and the oracle on states so
captured equal to the oracle on the kit's own forward (the fake layers hand out the tiny target's own states).

    python -m pytest kit/tests/measure/test_capture.py -q
"""

from types import SimpleNamespace

import pytest
import torch

from kit.measure.capture import assemble, read_chunks
from kit.reference.captured import read_capture, write_capture
from kit.reference.oracle import evaluate_each, target_features
from kit.reference.speculate import Wiring, capture_points_for, greedy_generate
from kit.serving import capture_hook as hook
from kit.serving.after_import import install_as_sitecustomize
from kit.sglang.params import SpecParams
from kit.tests.tinymodels import one_thread, tiny_draft, tiny_target  # noqa: F401 (autouse fixture)

PROMPTS = [[1, 5, 7, 9, 11, 3, 17], [2, 4, 6, 8, 10]]


class Mode:
    def __init__(self, name):
        self.name = name

    def is_extend(self):
        return self.name == "EXTEND"


class Table:
    """The states the fake layers hand out: per point [N, H] of the sequence being served, and the final state."""

    points: list = []
    final = None


class Layer(torch.nn.Module):
    """SGLang's decoder-layer call: (positions, hidden_states, forward_batch, residual) -> (hidden, residual);
    the stream entering the next layer is their sum, split in two unequal parts."""

    def __init__(self, i):
        super().__init__()
        self.i = i

    def forward(self, positions, hidden_states, forward_batch, residual):
        nxt = Table.points[self.i + 1][positions]
        return nxt * 0.25, nxt * 0.75


class CaptureLayer(torch.nn.Module):
    """0.5.23's llama.py call: (positions, hidden_states, forward_batch, capture_output=None) -> hidden; the
    residual lives in the forward batch, and the layer hands the stream entering it to `capture_output`."""

    def __init__(self, i):
        super().__init__()
        self.i = i

    def forward(self, positions, hidden_states, forward_batch, capture_output=None):
        if capture_output is not None:
            res = forward_batch.residual
            capture_output(hidden_states if res is None else hidden_states + res, owned=res is not None)
        nxt = Table.points[self.i + 1][positions]
        forward_batch.residual = nxt * 0.75
        return nxt * 0.25


class CollectorLayer(torch.nn.Module):
    """0.5.23's deepseek_v2.py call: the aux collector `captured_last_layer_outputs` (its `.capture`), and
    (hidden, topk_indices) back."""

    def __init__(self, i):
        super().__init__()
        self.i = i

    def forward(self, positions, hidden_states, forward_batch, zero_allocator, captured_last_layer_outputs=None, **kw):
        if captured_last_layer_outputs is not None:
            res = forward_batch.residual
            captured_last_layer_outputs.capture(hidden_states if res is None else hidden_states + res)
        nxt = Table.points[self.i + 1][positions]
        forward_batch.residual = nxt * 0.75
        return nxt * 0.25, None


class AuxList(list):
    """SGLang's AuxHiddenStateList: what an EAGLE-3 launch passes the layers it captures."""

    def capture(self, hidden, *, owned=False):
        self.append(hidden if owned else hidden.clone())


class Norm(torch.nn.Module):
    def forward(self, hidden_states, residual=None):
        x = hidden_states if residual is None else hidden_states + residual
        return Table.final_rows, x


STYLES = ("residual", "capture_output", "captured_last_layer_outputs")


class Decoder(torch.nn.Module):
    """SGLang's decoder loop in each release's layer call; `sglang_captures`: the layers an EAGLE-3 launch
    captures itself, its collector kept in `aux`."""

    def __init__(self, n_layers, style="residual", sglang_captures=()):
        super().__init__()
        kind = {"residual": Layer, "capture_output": CaptureLayer, "captured_last_layer_outputs": CollectorLayer}
        self.layers = torch.nn.ModuleList(kind[style](i) for i in range(n_layers))
        self.norm = Norm()
        self.style, self.sglang_captures, self.aux = style, set(sglang_captures), AuxList()

    def forward(self, ids, positions, fb):
        hidden, residual = Table.points[0][positions].clone(), None  # the embedding (point 0)
        fb.residual = None
        self.aux = AuxList()
        for i, layer in enumerate(self.layers):
            mine = self.aux if i in self.sglang_captures else None
            if self.style == "residual":
                hidden, residual = layer(positions, hidden, fb, residual)
            elif self.style == "capture_output":
                hidden = layer(positions, hidden, fb, capture_output=mine.capture if mine is not None else None)
            else:
                hidden, _ = layer(positions, hidden, fb, None, captured_last_layer_outputs=mine)
        residual = residual if self.style == "residual" else fb.residual
        Table.final_rows = Table.final[positions]
        out, _ = self.norm(hidden, residual)
        return out


class Model(torch.nn.Module):
    def __init__(self, n_layers, style="residual", sglang_captures=()):
        super().__init__()
        self.model = Decoder(n_layers, style, sglang_captures)


def serve(model, seqs, feats, finals):
    """One request after another: an extend over the prompt, then a decode per generated token but the last."""
    for (prompt, cont), f, fin in zip(seqs, feats, finals):
        H = fin.shape[-1]
        Table.points = [f[:, j * H : (j + 1) * H] for j in range(f.shape[-1] // H)]
        Table.final = fin
        steps = [(prompt, list(range(len(prompt))), "EXTEND")]
        steps += [([t], [len(prompt) + j], "DECODE") for j, t in enumerate(cont[:-1])]
        for ids, pos, mode in steps:
            fb = SimpleNamespace(input_ids=torch.tensor(ids), forward_mode=Mode(mode))
            model.model(fb.input_ids, torch.tensor(pos), fb)
    # the kit's closing request: its prefill writes the last request's decodes
    Table.points = [f[:1] for f in Table.points]
    fb = SimpleNamespace(input_ids=torch.tensor(seqs[0][0][:1]), forward_mode=Mode("EXTEND"))
    model.model(fb.input_ids, torch.tensor([0]), fb)


@pytest.fixture(scope="module")
def setup():
    t = tiny_target()
    d = tiny_draft(t, draft_vocab=96, seed=3)
    seqs = [(p, greedy_generate(t, p, 12).tokens) for p in PROMPTS]
    L = t.config.num_hidden_layers
    (every, final), _ = target_features(t, seqs, [list(range(L + 1)), None])
    return t, d, seqs, every, final


def runner(L, style="residual", sglang_captures=(), **kw):
    model = Model(L, style, sglang_captures)
    r = SimpleNamespace(model=model, is_draft_worker=False, ps=SimpleNamespace(tp_rank=0, pp_size=1))
    r.__dict__.update(kw)
    return r


def armed(d):
    (d / hook.ARMED).touch()  # what the kit does once the server is ready


@pytest.mark.parametrize("style", STYLES)
def test_the_recorder_writes_what_the_oracle_reads(setup, tmp_path, style):
    """Whichever way the release's layer gets the stream entering it (a residual argument, 0.5.23's capture
    callable or collector), the capture holds the target's own states."""
    t, d, seqs, every, final = setup
    L, H = t.config.num_hidden_layers, t.config.hidden_size
    points = capture_points_for(d, t, Wiring())
    r = runner(L, style)
    rec = hook.attach_to(r, str(tmp_path), points, None)
    assert rec is not None
    serve(r.model, seqs[:1], every, final)  # before the kit arms it (a startup's own forwards): nothing
    assert rec.tokens == 0 and not rec.buffer
    armed(tmp_path)
    serve(r.model, seqs, every, final)
    forwards, events = read_chunks(tmp_path)
    assert [e["kind"] for e in events] == ["attached"] and events[0]["decoder"] == "model"
    # every request's forwards are on disk; the closing request's prefill, which wrote them, is still buffered
    assert [f["mode"] for f in forwards].count("EXTEND") == len(seqs)
    assert len(forwards) == sum(len(c) for _, c in seqs)
    cap = assemble(forwards, [(p, c) for p, c in seqs], points, L, H, "server capture (test)")
    assert cap.ids == [p + c for p, c in seqs] and cap.notes["missing"] == [] and cap.notes["mismatch"] == []
    for a, h, f, fin, (p, c) in zip(cap.aux, cap.final, every, final, seqs):
        n = len(p) + len(c)
        want = torch.cat([f[:, q * H : (q + 1) * H] for q in points], -1)
        assert torch.equal(a[: n - 1], want[: n - 1]) and torch.equal(h[: n - 1], fin[: n - 1])
        assert not a[n - 1].any()  # the last token is never fed: zeros
    write_capture(tmp_path / "cap", cap)
    back = read_capture(tmp_path / "cap", dtype="float64")
    wirings = {"correct": Wiring(), "launched as EAGLE": Wiring(algorithm="EAGLE")}
    p = SpecParams(3, 1, 4)
    direct = evaluate_each(t, d, seqs, p, wirings)
    captured = evaluate_each(t, d, back.seqs(), p, wirings, capture=back)
    for name in wirings:
        assert captured[name].accept_lengths == direct[name].accept_lengths, name


@pytest.mark.parametrize("style", STYLES[1:])
def test_sglangs_own_capture_gets_the_same_states_beside_the_recorder(setup, tmp_path, style):
    """An EAGLE-3 launch captures some layers itself: its collector still gets every state, equal to the
    recorder's, and a layer it does not capture stays uncaptured on its side."""
    t, d, seqs, every, final = setup
    L, H = t.config.num_hidden_layers, t.config.hidden_size
    r = runner(L, style, sglang_captures=(1,))
    assert hook.capture_style(r.model.model.layers[0]) == style
    rec = hook.attach_to(r, str(tmp_path), [1, 2], None)
    armed(tmp_path)
    prompt = seqs[0][0]
    Table.points = [every[0][:, j * H : (j + 1) * H] for j in range(L + 1)]
    Table.final = final[0]
    fb = SimpleNamespace(input_ids=torch.tensor(prompt), forward_mode=Mode("EXTEND"))
    r.model.model(fb.input_ids, torch.arange(len(prompt)), fb)
    (got,) = rec.buffer
    n = len(prompt)
    assert len(r.model.model.aux) == 1 and torch.equal(r.model.model.aux[0], Table.points[1][:n])
    assert torch.equal(got["aux"], torch.cat([Table.points[1][:n], Table.points[2][:n]], -1))


def test_a_layer_without_a_residual_or_a_capture_argument_is_named():
    class Bare(torch.nn.Module):
        def forward(self, positions, hidden_states, forward_batch):
            return hidden_states

    with pytest.raises(ValueError, match="Bare.forward takes neither a residual nor an aux-capture argument"):
        hook.capture_style(Bare())


def test_only_the_target_on_rank_0_is_recorded(tmp_path):
    assert hook.attach_to(runner(4, is_draft_worker=True), str(tmp_path), [1, 2], None) is None
    assert hook.attach_to(runner(4, ps=SimpleNamespace(tp_rank=1, pp_size=1)), str(tmp_path), [1, 2], None) is None
    assert not (tmp_path / hook.INDEX).exists()  # nothing recorded, nothing noted
    assert hook.attach_to(runner(4, ps=SimpleNamespace(tp_rank=0, pp_size=2)), str(tmp_path), [1, 2], None) is None
    assert "pipeline parallel" in (tmp_path / hook.INDEX).read_text()


def test_the_budget_stops_the_recording(setup, tmp_path):
    t, d, seqs, every, final = setup
    L, H = t.config.num_hidden_layers, t.config.hidden_size
    r = runner(L)
    first = len(seqs[0][0]) + len(seqs[0][1]) - 1  # the tokens the first request feeds
    hook.attach_to(r, str(tmp_path), [1, 3], first + 2)
    armed(tmp_path)
    serve(r.model, seqs, every, final)
    forwards, events = read_chunks(tmp_path)
    assert sum(len(f["ids"]) for f in forwards) <= first + 2
    assert any(e["kind"] == "budget" for e in events)
    cap = assemble(forwards, [(p, c) for p, c in seqs], [1, 3], L, H, "server capture (test)")
    assert len(cap.ids) == 1 and cap.notes["missing"] == [1]


def test_the_load_model_wrapper_attaches_after_the_load(tmp_path, monkeypatch):
    monkeypatch.setenv(hook.CAPTURE_ENV, str(tmp_path))
    monkeypatch.setenv(hook.POINTS_ENV, "1,4")

    class ModelRunner:
        is_draft_worker = False
        ps = SimpleNamespace(tp_rank=0, pp_size=1)

        def load_model(self):
            self.model = Model(4)

    hook.wrap_load_model(ModelRunner)
    hook.wrap_load_model(ModelRunner)  # once only
    ModelRunner().load_model()
    text = (tmp_path / hook.INDEX).read_text()
    assert '"attached"' in text and "[1, 4]" in text


def test_installed_as_sitecustomize_it_wraps_sglang_model_runner_as_it_loads(tmp_path):
    """A fresh interpreter with the recorder first on PYTHONPATH: importing an SGLang-shaped model_runner module
    wraps its ModelRunner.load_model; without KIT_CAPTURE_DIR nothing is installed."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    site, fake = tmp_path / "site", tmp_path / "fake"
    install_as_sitecustomize(Path(hook.__file__), site)
    pkg = fake / "sglang" / "srt" / "model_executor"
    pkg.mkdir(parents=True)
    for d in (fake / "sglang", fake / "sglang" / "srt", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "model_runner.py").write_text("class ModelRunner:\n    def load_model(self):\n        return 1\n")
    code = (
        "import sys; from sglang.srt.model_executor.model_runner import ModelRunner as M; "
        "print(getattr(M.load_model, '_kit_wrapped', False), any(type(f).__name__ == 'AfterImport' for f in sys.meta_path))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(fake)])}
    env.pop(hook.CAPTURE_ENV, None)
    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    on = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, hook.CAPTURE_ENV: str(tmp_path / "chunks")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert off.stdout.split() == ["False", "False"]
    assert on.stdout.split() == ["True", "True"]


def test_the_capture_plan_changes_only_what_a_capture_needs(tmp_path):
    """The launch keeps its flags; speculation, CUDA graphs, the radix cache and overlap go, each change listed;
    the size bound is said; bad input is one line, and nothing is written by the plan."""
    from kit.findings import KitInputError
    from kit.measure.capture import plan_capture
    from kit.models import shipped_draft
    from kit.serving.launch import LaunchSpec
    from kit.sglang.flags import graphs_off

    spec = LaunchSpec(
        model_path="embedded",
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(shipped_draft()),
        speculative_num_steps=3,
        chunked_prefill_size=16,
        extra_args=["--speculative-token-map", "m.pt", "--enable-torch-compile", "--max-total-tokens", "4096"],
    )
    plan = plan_capture(spec, str(tmp_path / "cap"), num_prompts=2, max_new_tokens=8, sglang_version="0.5.17")
    argv = plan.spec.argv()
    assert "--speculative-algorithm" not in argv and not any(a.startswith("--speculative") for a in argv)
    assert "--enable-torch-compile" not in argv and argv[argv.index("--max-total-tokens") + 1] == "4096"
    for flag in [*graphs_off("0.5.17"), "--disable-radix-cache", "--disable-overlap-schedule"]:
        assert flag in argv
    assert plan.spec.chunked_prefill_size >= max(len(p) for p in plan.prompt_ids) + 8
    changed = {c.flag for c in plan.changes}
    assert {"--speculative-algorithm", "--speculative-token-map", "--chunked-prefill-size", "PYTHONPATH"} <= changed
    assert plan.points == [2, 15, 27] and plan.spec.env[hook.POINTS_ENV] == "2,15,27"
    assert plan.max_bytes == plan.max_tokens * 4 * plan.hidden_size * 4 and "MiB" in plan.render()
    assert not (tmp_path / "cap").exists()  # a plan writes nothing
    with pytest.raises(KitInputError, match="names no draft"):
        plan_capture(spec.replace(speculative_draft_model_path=None), str(tmp_path / "c2"), sglang_version="0.5.17")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("mine")
    with pytest.raises(KitInputError, match="not a capture folder"):
        plan_capture(spec, str(tmp_path / "other"), sglang_version="0.5.17")
    assert (tmp_path / "other" / "x.txt").read_text() == "mine"


def test_kit_launch_capture_hidden_refuses_an_engine_without_the_recorder(tmp_path, capsys):
    from kit.cli import main

    out = tmp_path / "cap"
    assert main(["launch", "--engine", "reference", "--capture-hidden", str(out)]) == 2
    assert "does not run the kit's recorder" in capsys.readouterr().err and not out.exists()


@pytest.mark.slow
def test_kit_launch_capture_end_to_end_on_a_stand_in_sglang(setup, tmp_path, monkeypatch):
    """run_capture through a real process: the recorder as sitecustomize on the server's PYTHONPATH, the armed
    file, requests by token ids through the kit's client, chunks assembled and removed; the oracle on the folder
    equals the oracle on the kit's own forward over the same sequences."""
    import json
    import sys
    from pathlib import Path

    from kit.measure import capture as kc
    from kit.serving.launch import LaunchSpec
    from kit.serving.process import free_port

    t, d, _, _, _ = setup
    tdir, ddir, fake = tmp_path / "target", tmp_path / "draft", tmp_path / "fake"
    t.save_pretrained(tdir)
    ddir.mkdir()
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [0, 2, 3]}}
    (ddir / "config.json").write_text(json.dumps(cfg))
    pkg = fake / "sglang" / "srt" / "model_executor"
    pkg.mkdir(parents=True)
    for p in (fake / "sglang", fake / "sglang" / "srt", pkg):
        (p / "__init__.py").write_text("")
    (pkg / "model_runner.py").write_text("from kit.tests.fake_sglang_runner import ModelRunner  # noqa: F401\n")
    (fake / "sglang" / "launch_server.py").write_text("from kit.tests.fake_sglang_runner import main\n\nmain()\n")
    monkeypatch.setattr(kc, "prompt_ids", lambda target_dir, prompts, n: PROMPTS[:n])
    root = str(Path(__file__).resolve().parents[3])
    spec = LaunchSpec(model_path=str(tdir), speculative_algorithm="EAGLE3", speculative_draft_model_path=str(ddir),
                      python=sys.executable, port=free_port(), env={"PYTHONPATH": f"{fake}:{root}"})  # fmt: skip
    plan = kc.plan_capture(spec, str(tmp_path / "cap"), num_prompts=2, max_new_tokens=6, sglang_version="0.5.17")
    assert plan.points == [1, 3, 4]
    summary = kc.run_capture(plan, ready_timeout=120, log=lambda *a: None)
    assert summary["requests"] == 2 and summary["missing"] == [] and summary["mismatch"] == []
    assert sorted(p.name for p in (tmp_path / "cap").iterdir()) == ["capture.json", "states.safetensors"]
    cap = read_capture(tmp_path / "cap", dtype="float64")
    assert cap.source.startswith("server capture") and [len(s) for s in cap.ids] == [len(p) + 6 for p in PROMPTS]
    wirings = {"correct": Wiring(), "launched as EAGLE": Wiring(algorithm="EAGLE")}
    (aux, fin), _ = target_features(t, cap.seqs(), [plan.points, None])
    for a, b, f, g, s in zip(cap.aux, aux, cap.final, fin, cap.ids):
        assert torch.allclose(a[: len(s) - 1], b[: len(s) - 1]) and torch.allclose(f[: len(s) - 1], g[: len(s) - 1])
    direct = evaluate_each(t, d, cap.seqs(), SpecParams(3, 1, 4), wirings)
    captured = evaluate_each(t, d, cap.seqs(), SpecParams(3, 1, 4), wirings, capture=cap)
    for name in wirings:
        assert captured[name].accept_lengths == direct[name].accept_lengths, name


def test_both_readings_of_the_draft_ids_are_captured_where_they_differ(tmp_path):
    """Kimi-K2.5's class takes the ids as points in SGLang; the oracle reads them with the Llama "+1" rule."""
    import json

    from kit.hf import HFConfig
    from kit.measure.capture import capture_points

    (tmp_path / "config.json").write_text(
        json.dumps({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]}})
    )
    kimi = HFConfig.of({"architectures": ["KimiK25ForConditionalGeneration"], "text_config": {"num_hidden_layers": 61}})
    llama = HFConfig.of({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 61})
    points, notes = capture_points(tmp_path, kimi, "0.5.17")
    assert points == [2, 3, 30, 31, 58, 59] and "both are captured" in notes[0]
    assert capture_points(tmp_path, llama, "0.5.17") == ([3, 31, 59], [])
