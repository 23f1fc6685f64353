"""NCCL variable rules (kit.env.nccl) against NCCL 2.30.7's parsing, on the recorded machines.

python -m pytest kit/tests/test_nccl.py -q
"""

import pytest

from kit.env.nccl import AUTO, NcclParseError, nccl_findings, parse_list, strtoll
from kit.env.nccl_vars import KNOWN
from kit.tests.env_fixtures import SEED_NCCL_VARS, facts, seed_env_argv

PROTOS = ("LL", "LL128", "Simple")


def by_var(findings):
    return {f.evidence["var"]: f for f in findings if f.code == "env.nccl_var"}


# -- grammar -------------------------------------------------------------------------------
def test_parse_list_grammar():
    t = parse_list("^LL128;allreduce:LL128", PROTOS)
    assert t["AllReduce"] == {"LL": 0, "LL128": 1, "Simple": 0}
    assert t["Broadcast"] == {"LL": 1, "LL128": 0, "Simple": 1}
    assert parse_list("ll,SIMPLE", PROTOS)["Reduce"] == {"LL": 1, "LL128": 0, "Simple": 1}  # strcasecmp
    # `^X` sets every other element to 1 -- LL128 included, bypassing its NVLink-only default
    assert parse_list("^LL", PROTOS)["AllReduce"] == {"LL": 0, "LL128": 1, "Simple": 1}
    assert parse_list("", PROTOS)["AllReduce"]["LL128"] == AUTO  # empty: defaults kept


@pytest.mark.parametrize(
    "value,msg",
    [
        ("LL, Simple", 'Unrecognized element token " Simple"'),  # a space is part of the token
        ("LL;Simple", "All entries except the first must have a prefix"),
        ("allgatherv:LL", 'Unrecognized prefix token "allgatherv"'),
        ("LL;allreduce:Fast", 'Unrecognized element token "Fast"'),
    ],
)
def test_parse_list_rejects_like_nccl(value, msg):
    with pytest.raises(NcclParseError, match=msg):
        parse_list(value, PROTOS)


def test_legacy_parser_ignores_unknown_tokens():
    # NCCL < 2.24.3: no prefixes, unknown tokens silently dropped
    assert parse_list("LL,bogus", PROTOS, legacy=True)["AllReduce"] == {"LL": 1, "LL128": 0, "Simple": 0}


def test_strtoll_matches_c():
    assert strtoll("16777216") == (16777216, "")
    assert strtoll("16M") == (16, "M")
    assert strtoll("0x10")[0] == 16 and strtoll("010")[0] == 8  # base 0: hex and octal
    assert strtoll("true")[0] is None


def test_known_variable_list_is_from_source():
    assert {
        "PROTO",
        "ALGO",
        "P2P_LEVEL",
        "P2P_DISABLE",
        "NTHREADS",
        "BUFFSIZE",
        "MAX_NCHANNELS",
        "GRAPH_FILE",
        "IB_DISABLE",
        "NVLS_ENABLE",
        "DEBUG",
    } <= KNOWN
    assert len(KNOWN) > 200


# -- the seed's six variables --------------------------------------------------------------
def test_seed_one_verdict_per_variable_without_facts():
    env, _ = seed_env_argv()
    fs = nccl_findings(env, None, source="launch")
    v = by_var(fs)
    assert sorted(v) == sorted(SEED_NCCL_VARS)
    assert all(f.evidence["source"] == "launch" for f in v.values())
    assert v["NCCL_PROTO"].severity == "info" and "LL only" in v["NCCL_PROTO"].title
    assert v["NCCL_ALGO"].severity == "info"
    assert v["NCCL_MAX_NCHANNELS"].severity == "info"
    assert (
        v["NCCL_BUFFSIZE"].severity == "info"
        and "unused by collectives while NCCL_PROTO=LL" in v["NCCL_BUFFSIZE"].title
    )
    assert "no-op with NCCL_PROTO=LL" in v["NCCL_NTHREADS"].title
    # topology unknown: still a warning, for the right reason
    assert v["NCCL_P2P_LEVEL"].severity == "warning" and "host bridges" in v["NCCL_P2P_LEVEL"].title
    assert not [f for f in fs if f.code == "env.nccl_combo"]


def test_seed_p2p_level_on_the_seed_machine():
    env, _ = seed_env_argv()
    f = by_var(nccl_findings(env, facts("rtxpro6000_8x_pcie")))["NCCL_P2P_LEVEL"]
    assert f.severity == "warning"
    assert f.evidence["newly_p2p_pairs"] == {"NODE": 12, "SYS": 16}
    assert f.evidence["default_level"] == "PXB"  # AMD host, but 8 GPUs: the AMD <=2-GPU exception does not apply
    assert "IOMMU/ACS" in f.fix and "does not bypass CUDA IPC" in f.fix


@pytest.mark.parametrize("machine,needle", [("b200_8x_nvlink", "NVLink-connected"), ("h200_1x", "1 GPU")])
def test_p2p_level_no_effect_elsewhere(machine, needle):
    f = by_var(nccl_findings({"NCCL_P2P_LEVEL": "SYS"}, facts(machine)))["NCCL_P2P_LEVEL"]
    assert f.severity == "info" and needle in f.title


def test_p2p_level_amd_two_gpus_default_is_sys():
    fx = facts("rtxpro6000_8x_pcie")
    for part in ("nvml", "torch"):
        fx[part]["devices"] = fx[part]["devices"][:2]
    fx["smi"]["topo"] = {"gpus": ["GPU0", "GPU1"], "matrix": [["X", "SYS"], ["SYS", "X"]], "numa": ["0", "1"]}
    fx["nvml"]["p2p"] = {k: [r[:2] for r in m[:2]] for k, m in fx["nvml"]["p2p"].items()}
    f = by_var(nccl_findings({"NCCL_P2P_LEVEL": "SYS"}, fx))["NCCL_P2P_LEVEL"]
    assert f.severity == "info" and "changes nothing" in f.title


# -- single-variable rules -----------------------------------------------------------------
@pytest.mark.parametrize(
    "var,value,severity,needle",
    [
        ("NCCL_PROTO", "LL,LL129", "error", "ncclInvalidUsage"),
        ("NCCL_ALGO", "ring,bogus", "error", "ncclInvalidUsage"),
        ("NCCL_P2P_LEVEL", "sys", "warning", "case-sensitively"),
        ("NCCL_P2P_LEVEL", "3", "warning", "reads it as PHB"),
        ("NCCL_P2P_LEVEL", "9", "warning", "reads it as SYS"),
        ("NCCL_P2P_LEVEL", "FAR", "warning", "not a level name"),
        ("NCCL_NTHREADS", "100", "warning", "replaces it with 512"),
        ("NCCL_NTHREADS", "1024", "warning", "clamps it to 512"),
        ("NCCL_NTHREADS", "32", "warning", "clamps it to 64"),
        ("NCCL_NTHREADS", "256", "info", "valid"),
        ("NCCL_LL128_NTHREADS", "640", "info", "160..640"),
        ("NCCL_BUFFSIZE", "16M", "warning", "NCCL reads 16"),
        ("NCCL_BUFFSIZE", "0", "error", "0 bytes"),
        ("NCCL_MAX_NCHANNELS", "0", "warning", "clamps it to 1"),
        ("NCCL_MAX_NCHANNELS", "128", "warning", "clamps it to 64"),
        ("NCCL_MIN_NCHANNELS", "8", "info", "valid"),
        ("NCCL_MAX_NRINGS", "8", "info", "legacy name"),
        ("NCCL_DEBUG", "info", "info", "verbose"),
        ("NCCL_DEBUG", "LOUD", "warning", "not a level"),
        ("NCCL_GRAPH_FILE", "", "error", "set but empty"),
        ("NCCL_P2P_DISABLE", "1", "warning", "P2P off"),
        ("NCCL_P2P_DISABLE", "true", "warning", "reads it as 0"),
        ("NCCL_IB_DISABLE", "1", "info", "single-node"),
        ("NCCL_P2P_LEVL", "SYS", "warning", "did you mean NCCL_P2P_LEVEL"),
        ("NCCL_CUMEM_ENABLE", "0", "info", "does not validate"),
    ],
)
def test_variable_verdicts(var, value, severity, needle):
    fs = [f for f in nccl_findings({var: value}) if f.code == "env.nccl_var"]
    assert len(fs) == 1
    assert fs[0].severity == severity, fs[0].title
    assert needle in fs[0].title


def test_ll128_forced_on_pcie_warns_not_on_nvlink():
    pcie = by_var(nccl_findings({"NCCL_PROTO": "LL128"}, facts("rtxpro6000_8x_pcie")))["NCCL_PROTO"]
    nvl = by_var(nccl_findings({"NCCL_PROTO": "LL128"}, facts("b200_8x_nvlink")))["NCCL_PROTO"]
    assert pcie.severity == "warning" and "PCIe-only" in pcie.title
    assert nvl.severity == "info"
    algo = by_var(nccl_findings({"NCCL_ALGO": "Ring"}, facts("b200_8x_nvlink")))["NCCL_ALGO"]
    assert "NVLS" in algo.title


def test_version_gates():
    fx = facts("rtxpro6000_8x_pcie")
    fx["torch"]["nccl"] = "2.21.5"
    assert by_var(nccl_findings({"NCCL_PROTO": "^LL128;allreduce:LL"}, fx))["NCCL_PROTO"].severity == "error"
    assert by_var(nccl_findings({"NCCL_ALGO": "Ring,PAT"}, fx))["NCCL_ALGO"].severity == "error"
    fx["torch"]["nccl"] = "2.24.3"
    assert by_var(nccl_findings({"NCCL_PROTO": "^LL128;allreduce:LL"}, fx))["NCCL_PROTO"].severity == "info"


@pytest.mark.parametrize(
    "env",
    [
        {"NCCL_ALGO": "PAT"},  # PAT serves AllGather/ReduceScatter only
        {"NCCL_ALGO": "NVLS", "NCCL_PROTO": "LL"},  # NVLS is Simple-only
        {"NCCL_ALGO": "CollNetDirect,NVLSTree"},  # need several nodes
    ],
)
def test_allreduce_left_without_a_path(env):
    combo = [f for f in nccl_findings(env, facts("b200_8x_nvlink")) if f.code == "env.nccl_combo"]
    assert combo and combo[0].severity == "error"


def test_nvls_alone_fails_on_pcie_but_not_on_nvlink():
    assert [f for f in nccl_findings({"NCCL_ALGO": "NVLS"}, facts("rtxpro6000_8x_pcie")) if f.code == "env.nccl_combo"]
    assert not [f for f in nccl_findings({"NCCL_ALGO": "NVLS"}, facts("b200_8x_nvlink")) if f.code == "env.nccl_combo"]


def test_combined_channel_and_transport_warnings():
    fs = nccl_findings(
        {"NCCL_MIN_NCHANNELS": "32", "NCCL_MAX_NCHANNELS": "16", "NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}
    )
    titles = [f.title for f in fs if f.code == "env.nccl_combo"]
    assert any("maximum wins" in t for t in titles) and any("network transport" in t for t in titles)


def test_non_nccl_variables_ignored():
    assert nccl_findings({"SGLANG_X": "1", "PATH": "/bin"}) == []
