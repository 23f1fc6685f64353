"""SGLang's flags read as its argparse reads them, from the recorded per-release table (no sglang needed).

The table itself is re-derived from the real parser in tests/test_sglang_parser.py (interop).
Run: python -m pytest kit/tests/sglang/test_flags.py -q
"""

import argparse

import pytest

from kit.sglang import flags
from kit.sglang.flags import flag_value, known_versions, launch_entry, resolve_flags, server_flags, table_for


def test_tables_recorded_for_the_releases_the_kit_names():
    assert {"0.5.17", "0.5.23"} <= set(known_versions())
    t = table_for("0.5.23")
    assert t.exact and t.checked == "0.5.23"
    opts = t.by_option()
    assert opts["--speculative-algorithm"]["dest"] == "speculative_algorithm"
    assert opts["--tp-size"]["dest"] == opts["--tensor-parallel-size"]["dest"] == "tp_size"
    assert "--tp" not in opts  # `--tp 8` works as a prefix of --tp-size, not as a flag of its own
    assert opts["--trust-remote-code"]["kind"] == "store_true"
    assert opts["--speculative-num-steps"]["type"] == "builtins.int"
    later = table_for("0.5.24")
    assert not later.exact and later.checked == known_versions()[-1]


@pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])
def test_prefix_equals_repeat_and_aliases(version):
    r = resolve_flags(
        ["--speculative-algo", "EAGLE", "--tp=8", "--port", "1", "--port", "2", "--trust-remote", "--model", "m"],
        version,
    )
    assert r.errors == [] and r.unknown == []
    assert r.values["speculative_algorithm"] == "EAGLE" and r.values["tp_size"] == 8
    assert r.values["port"] == 2 and r.values["trust_remote_code"] is True and r.values["model_path"] == "m"
    assert ("--speculative-algo", "--speculative-algorithm") in r.abbreviated()
    assert ("--trust-remote", "--trust-remote-code") in r.abbreviated()
    assert ("--tp", "--tp-size") in r.abbreviated() and ("--model", "--model-path") not in r.abbreviated()
    assert r.canonical_args(skip={"speculative_algorithm", "tp_size", "model_path"})[:2] == ["--port", "1"]


def test_types_choices_and_values_match_argparse_messages():
    r = resolve_flags(["--model-path", "m", "--speculative-num-steps", "abc", "--speculative-eagle-topk", "4"])
    assert [e["message"] for e in r.errors] == ["argument --speculative-num-steps: invalid int value: 'abc'"]
    assert r.errors[0]["tokens"] == ["--speculative-num-steps", "abc"]
    assert r.values["speculative_eagle_topk"] == 4 and "speculative_num_steps" not in r.values  # the rest is read
    r = resolve_flags(["--model-path", "m", "--mem-fraction-static", "x"])
    assert "invalid float value: 'x'" in r.errors[0]["message"]
    r = resolve_flags(["--model-path", "m", "--dtype", "fp64"])
    assert "argument --dtype: invalid choice: 'fp64'" in r.errors[0]["message"]
    assert resolve_flags(["--model-path", "m", "--speculative-algorithm", "EAGLE4"]).errors == []  # no parser choices
    r = resolve_flags(["--tp-size", "2"])
    assert r.errors[0]["message"] == "the following arguments are required: --model-path/--model"
    r = resolve_flags(["--model-path", "m", "--trust-remote-code=yes"])
    assert "ignored explicit argument 'yes'" in r.errors[0]["message"]
    r = resolve_flags(["--model-path", "m", "--tp-size"])
    assert "expected one argument" in r.errors[0]["message"]


def test_ambiguous_and_unknown():
    r = resolve_flags(["--speculative", "x", "--model-path", "m"])
    assert r.errors and r.errors[0]["message"].startswith("ambiguous option: --speculative could match")
    assert r.values["model_path"] == "m"
    r = resolve_flags(["--speculative-num-stepz", "3", "--tp", "2"])
    assert r.unknown == ["--speculative-num-stepz", "3"] and r.values["tp_size"] == 2


@pytest.mark.parametrize(
    "version, own",
    [("0.4.4", True), ("0.4.10", True), ("0.5.1", True), ("0.5.8", True), ("0.5.13.post1", True), ("0.5.14", False)],
)
def test_older_parsers_dests_are_handed_out_under_current_names(version, own):
    """0.4.4-0.5.13's parsers store --tp-size/--dp-size/--ep-size under tensor_/data_/expert_parallel_size
    (ServerArgs.from_cli_args copies them over); resolution and the table say tp_size/dp_size/ep_size."""
    r = resolve_flags(["--model-path", "m", "--tp-size", "8", "--dp-size", "2", "--ep-size", "4"], version)
    assert not r.errors and (r.values["tp_size"], r.values["dp_size"], r.values["ep_size"]) == (8, 2, 4)
    assert not {"tensor_parallel_size", "data_parallel_size", "expert_parallel_size"} & set(r.values)
    assert [o.dest for o in r.occurrences][1:] == ["tp_size", "dp_size", "ep_size"]
    assert flag_value(["--tensor-parallel-size", "8"], "--tp-size", version) == "8"
    t = table_for(version)
    assert t.by_dest()["tp_size"]["option_strings"][0] in ("--tp-size", "--tensor-parallel-size")
    assert t.own_dests.get("tp_size") == ("tensor_parallel_size" if own else None)


def test_every_table_names_an_option_as_the_newest_release_does():
    """An option string the newest recorded release has is stored under that release's dest on every release."""
    newest = table_for(known_versions()[-1]).by_option()
    for v in known_versions():
        t = table_for(v)
        for o, a in t.by_option().items():
            assert o not in newest or a["dest"] == newest[o]["dest"] or newest[o]["dest"] in t.own_dests, (v, o)
        assert len(t.by_dest()) == len({a["dest"] for a in flags._stored()[v]["actions"]}), v  # no name merged


def test_reconstructed_parser_agrees_with_argparse_on_a_toy_table():
    """The mechanism (argparse rebuilt from a table) gives argparse's own answers for the same actions."""
    real = argparse.ArgumentParser(exit_on_error=False)
    real.add_argument("--speculative-num-steps", type=int)
    real.add_argument("--speculative-algorithm", choices=["EAGLE", "EAGLE3"])
    ns = real.parse_args(["--speculative-algo", "EAGLE3", "--speculative-num-s=3"])
    r = resolve_flags(["--speculative-algo", "EAGLE3", "--speculative-num-s=3"])
    assert (r.values["speculative_algorithm"], r.values["speculative_num_steps"]) == (ns.speculative_algorithm, 3)


def test_entry_points_of_each_release():
    assert launch_entry(["python3", "-m", "sglang.launch_server", "--tp", "2"]) == ("python -m sglang.launch_server", 3)
    assert launch_entry(["/venv/bin/python3.11", "-u", "-W", "ignore", "-m", "sglang.launch_server"])[1] == 6
    assert launch_entry(["/usr/bin/sglang", "serve", "m"]) == ("sglang serve", 2)
    assert launch_entry(["python", "-c", "import sglang"]) is None
    assert launch_entry(["python", "-m", "sglang.bench_serving"]) is None
    assert launch_entry(["sglang", "version"]) is None
    flags, own = server_flags(["sglang", "serve", "org/m", "--model-type", "llm", "--tp", "2"], "0.5.23")
    assert flags == ["--model-path", "org/m", "--tp", "2"] and own == ["--model-type", "llm"]


def test_flag_value_resolves_like_sglang():
    argv = ["python", "-m", "sglang.launch_server", "--speculative-algo", "EAGLE", "--speculative-algorithm=EAGLE3"]
    assert flag_value(argv, "--speculative-algorithm") == "EAGLE3"
    assert flag_value(["sglang", "serve", "m", "--tp", "4"], "--tp-size") == "4"
    assert flag_value(["sglang", "serve", "m"], "--model-path") == "m"
    assert flag_value(argv, "--port") is None


def test_each_release_is_judged_by_its_own_table(monkeypatch, tmp_path):
    """0.5.10's real parser offers no `--reasoning-parser auto` (0.5.17's does): with 0.5.10's table stored the
    command is an error for 0.5.10 and fine for 0.5.17; a release outside every table is said to be unchecked."""
    from kit.sglang.parser import flag_findings

    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path))
    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")
    monkeypatch.delenv("KIT_SGLANG_PYTHON", raising=False)
    flags = ["--model-path", "m", "--reasoning-parser", "auto"]
    assert table_for("0.5.10").exact
    assert any("invalid choice" in e["message"] for e in resolve_flags(flags, "0.5.10").errors)
    assert not resolve_flags(flags, "0.5.17").errors
    old = [f for f in flag_findings(flags, "0.5.10") if f.code == "launch.flag"]
    assert [f.severity for f in old] == ["error"] and "invalid choice" in old[0].title
    assert not [f for f in flag_findings(flags, "0.5.17") if f.code == "launch.flag" and f.severity != "info"]
    [plain] = flag_findings(flags, "0.4.1")
    assert plain.code == "launch.parser" and "not checked" in plain.title and plain.evidence["checked"] is False


def test_server_command_is_the_release_recommended_entry(tmp_path):
    """`sglang serve` where the release declares it and the script lies beside the interpreter (pip-installed
    SGLang); `python -m sglang.launch_server` where SGLang is only importable or the release has no such script."""
    from kit.sglang.flags import server_command

    python = tmp_path / "python3"
    python.write_text("")
    assert server_command(str(python), "0.5.17") == [str(python), "-m", "sglang.launch_server"]
    script = tmp_path / "sglang"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert server_command(str(python), "0.5.17") == [str(script), "serve"]
    assert server_command(str(python), "0.4.10") == [str(python), "-m", "sglang.launch_server"]


def test_server_command_takes_the_bundles_script_written_for_this_interpreter(tmp_path, monkeypatch):
    """On a host where SGLang came from the kit's bundle, `sglang serve` is the script the bundle wrote into its
    bin folder, but only for the interpreter that script names: another environment's python keeps `-m`."""
    from kit.sglang import bundle, bundle_site
    from kit.sglang.flags import server_command

    site = tmp_path / "site"
    (site / "sglang-0.5.17.dist-info").mkdir(parents=True)
    (site / "sglang-0.5.17.dist-info" / "entry_points.txt").write_text(
        "[console_scripts]\nsglang = sglang.cli.main:main\n"
    )
    python, other = tmp_path / "env" / "python3", tmp_path / "other" / "python3"
    for p in (python, other):
        p.parent.mkdir()
        p.write_text("")
    monkeypatch.setattr(bundle_site, "installed_bundle_site", lambda: site)
    assert server_command(str(python), "0.5.17") == [str(python), "-m", "sglang.launch_server"]
    [script] = bundle.write_console_scripts(site, str(python))
    assert server_command(str(python), "0.5.17") == [str(script), "serve"]
    assert server_command(str(other), "0.5.17") == [str(other), "-m", "sglang.launch_server"]
