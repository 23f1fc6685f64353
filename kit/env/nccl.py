"""NCCL environment variables judged by NCCL's own parsing rules — one verdict per variable.

Why: NCCL reads its variables silently and differently per variable: an unknown `NCCL_PROTO` token makes every
collective fail (ncclInvalidUsage), `NCCL_P2P_LEVEL=sys` is ignored (strcmp), `NCCL_NTHREADS=100` becomes 512,
`NCCL_BUFFSIZE=16M` is read by strtoll as 16 bytes. The rules follow the NVIDIA/nccl source at v2.30.7
(src/graph/tuning.cc parseList/getNthreads, src/graph/paths.cc ncclGetLevel, src/graph/connect.cc,
src/misc/param.cc, src/debug.cc) and its version gates (prefixes and fatal unknown tokens since 2.24.3, PAT since
2.23.4, P2C since 2.27.3). `facts` (kit.env.machine) add NVLink, the pairs a P2P level opens, the NCCL version.

    nccl_findings({"NCCL_PROTO": "LL", "NCCL_P2P_LEVEL": "SYS"}, facts)   # -> [Finding, Finding]
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kit.env.machine import SMI_TO_NCCL_PATH, full_nvlink, gpu_list, topo_pairs
from kit.env.nccl_vars import KNOWN, NCCL_VERSION_OF_LIST
from kit.findings import Code, Finding

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "env: notebook 01"
NCCL_VAR = Code(
    "env.nccl_var",
    SECTION,
    "error / warning / info",
    "one verdict per `NCCL_*` variable by NCCL 2.30.7's own parsing (valid, ignored, clamped, fatal) and "
    "its effect on this machine; warning for ignored/clamped/risky values (lowercase or numeric "
    "`NCCL_P2P_LEVEL`, `NTHREADS` not a multiple of 32, `16M` sizes, LL128 forced on PCIe, P2P level "
    "opening NODE/SYS pairs, typo of a known name); error when NCCL fails (unknown "
    "`NCCL_PROTO`/`NCCL_ALGO` token, empty `NCCL_GRAPH_FILE`, non-positive buffer)",
    "follow the verdict; unset what is not needed",
)
NCCL_COMBO = Code(
    "env.nccl_combo",
    SECTION,
    "error",
    "variables that only fail together: `NCCL_PROTO`+`NCCL_ALGO` leave AllReduce no algorithm/protocol; "
    "warning for MIN > MAX channels, P2P and SHM both disabled",
    "include Ring or Tree with a protocol it supports",
)

PROTOS = ("LL", "LL128", "Simple")
ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
P2P_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
LEGACY_P2P = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")  # levelsOldToNew; larger ints clamp to 5
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "ABORT", "TRACE")
SINCE = {"PAT": (2, 23, 4), "P2C": (2, 27, 3), "prefix": (2, 24, 3)}
MAXCHANNELS = 64  # 32 before 2.25.1
AUTO = 2  # LL128's "enabled only where NCCL judges it safe" state


class NcclParseError(ValueError):
    pass


def parse_version(v: Any) -> tuple[int, ...] | None:
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", str(v or ""))
    return tuple(int(x) for x in m.groups()) if m else None


def strtoll(s: str) -> tuple[int | None, str]:
    """C strtoll(s, NULL, 0): returns (value or None if no digits, the unparsed rest)."""
    m = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", s)
    if not m:
        return None, s
    body = m.group(2)
    val = int(body, 16) if body[:2].lower() == "0x" else int(body, 8) if body.startswith("0") else int(body)
    return (-val if m.group(1) == "-" else val), s[m.end() :]


def parse_list(value: str, elems: tuple[str, ...], legacy: bool = False) -> dict[str, dict[str, int]]:
    """NCCL's parseList: 'a,b;coll:^c' -> {func: {elem: 0/1/AUTO}}; raises NcclParseError as NCCL fails.

    `legacy` follows NCCL < 2.24.3: no `coll:` prefixes, unknown tokens silently ignored."""
    start = {e: (AUTO if e == "LL128" else 1) for e in elems}
    table = {f: dict(start) for f in FUNCS}
    lookup = {e.lower(): e for e in elems}
    if legacy:
        neg = value.startswith("^")
        body = value[1:] if neg else value
        state = {e: int(neg) for e in elems}
        for tok in (t for t in body.split(",") if t):
            if tok.lower() in lookup:
                state[lookup[tok.lower()]] = int(not neg)
        return {f: dict(state) for f in FUNCS}
    entries = [e for e in value.split(";") if e]  # strtok_r skips empty tokens
    for i, entry in enumerate(entries):
        parts = [p for p in entry.split(":") if p]
        if len(parts) >= 2:
            prefix, elist = parts[0], parts[1]
        else:
            if i > 0 or value.startswith(";"):
                raise NcclParseError(f'All entries except the first must have a prefix: "{value}"')
            prefix, elist = None, parts[0] if parts else ""
        neg = elist.startswith("^")
        body = elist[1:] if neg else elist
        funcs = [f for f in FUNCS if prefix is None or f.lower() == prefix.lower()]
        if not funcs:
            raise NcclParseError(f'Unrecognized prefix token "{prefix}" when parsing "{value}"')
        for f in funcs:
            table[f] = {e: int(neg) for e in elems}
            for tok in (t for t in body.split(",") if t):
                if tok.lower() not in lookup:
                    raise NcclParseError(f'Unrecognized element token "{tok}" when parsing "{value}"')
                table[f][lookup[tok.lower()]] = int(not neg)
    return table


@dataclass
class Machine:
    """What the NCCL rules need from the facts; None = unknown."""

    nccl: tuple[int, ...] | None = None
    n_gpus: int | None = None
    nvlink: bool | None = None  # every pair NVLink-connected
    pairs: dict[str, list] | None = None  # topo class -> pairs
    amd_cpu: bool | None = None


def machine_from_facts(facts: dict | None) -> Machine:
    if not facts:
        return Machine()
    t, pk = facts.get("torch") or {}, facts.get("packages") or {}
    versions = (t.get("nccl"), pk.get("nvidia-nccl-cu13"), pk.get("nvidia-nccl-cu12"))
    gpus, vendor = gpu_list(facts), (facts.get("host") or {}).get("cpu_vendor")
    # 0 GPUs here means the command is judged for another host: GPU count and topology unknown
    return Machine(
        nccl=next(filter(None, map(parse_version, versions)), None),
        n_gpus=len(gpus) or None,
        nvlink=full_nvlink(facts) if len(gpus) > 1 else None,
        pairs=topo_pairs(facts),
        amd_cpu=(vendor == "AuthenticAMD") if vendor else None,
    )


@dataclass
class Verdict:
    severity: str
    title: str
    fix: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)


def _list_rule(name: str, value: str, elems: tuple[str, ...], m: Machine) -> tuple[Verdict, dict | None]:
    legacy = m.nccl is not None and m.nccl < SINCE["prefix"]
    have, listing = ".".join(map(str, m.nccl or ())), ", ".join(elems)
    if legacy and (":" in value or ";" in value):
        title = f"{name}={value}: NCCL {have} has no `coll:` prefix syntax (added in 2.24.3); the tokens are ignored"
        fix = f"upgrade NCCL to >= 2.24.3 or use a plain comma list of {listing}"
        return Verdict("error", title + " and protocols/algorithms disabled", fix), None
    try:
        table = parse_list(value, elems, legacy=legacy)
    except NcclParseError as e:
        title = f"{name}={value}: NCCL rejects it, every collective fails with ncclInvalidUsage"
        fix = f"use a comma list of {listing} (case-insensitive, `^` negates, `allreduce:` style prefixes separated "
        return Verdict("error", title, fix + "by `;`, no spaces) — or unset it", {"nccl_error": str(e)}), None
    for tok, since in SINCE.items():
        if m.nccl and m.nccl < since and re.search(rf"(?i)\b{tok}\b", value) and tok in elems:
            title = f"{name}={value}: {tok} is unknown to NCCL {have} (added in {'.'.join(map(str, since))})"
            return Verdict("error", title, f"drop {tok} or upgrade NCCL"), None
    empty = ", ".join(f for f, st in table.items() if not any(st.values()))
    if empty:
        title = f"{name}={value} enables nothing for {empty}: those collectives fail"
        return Verdict(
            "error", title + " with 'No algorithm/protocol available'", "list at least one element per collective"
        ), table
    on = {
        f: [e for e, s in st.items() if s == 1] + [e + "(auto)" for e, s in st.items() if s == AUTO]
        for f, st in table.items()
    }
    return Verdict(
        "info", f"{name}={value}: valid; AllReduce may use {', '.join(on['AllReduce'])}", "", {"enabled": on}
    ), table


def _proto(name: str, v: str, m: Machine, env: dict) -> Verdict:
    verdict, table = _list_rule(name, v, PROTOS, m)
    if table is None or verdict.severity == "error":
        return verdict
    forced128 = any(st["LL128"] == 1 for st in table.values())
    if forced128 and m.nvlink is False:
        title = f"NCCL_PROTO={v} forces LL128 on a PCIe-only node; NCCL enables LL128 by default only over NVLink "
        fix = "drop LL128 from the list (mind that `^X` force-enables every other protocol, LL128 included); "
        fix += "leave NCCL_PROTO unset unless a benchmark shows a gain"
        return Verdict(
            "warning", title + "(typeIntra <= NVB) and listing it bypasses that check", fix, verdict.evidence
        )
    if forced128:
        verdict.title += " (LL128 forced on: safe only on NVLink nodes)"
    if all(st == {"LL": 1, "LL128": 0, "Simple": 0} for st in table.values()):
        verdict.title = (
            f"NCCL_PROTO={v}: valid; LL only — lowest latency for small (decode-size) all-reduces, about half "
        )
        verdict.title += "the bandwidth for large (prefill) ones"
        verdict.fix = "fine for latency-bound decode with TP; benchmark prefill-heavy loads with it unset"
    return verdict


def _algo(name: str, v: str, m: Machine, env: dict) -> Verdict:
    verdict, table = _list_rule(name, v, ALGOS, m)
    if table is not None and verdict.severity != "error" and m.nvlink and not table["AllReduce"].get("NVLS"):
        verdict.title += "; NVLS (NVLink SHARP) is off for AllReduce on this NVLink machine"
    return verdict


def _p2p_level(name: str, v: str, m: Machine, env: dict) -> Verdict:
    if strtoll(env.get("NCCL_P2P_DISABLE", ""))[0] == 1:
        return Verdict("info", f"NCCL_P2P_LEVEL={v}: ignored, NCCL_P2P_DISABLE=1 takes precedence", "drop one of them")
    if v in P2P_LEVELS and m.nccl and m.nccl < SINCE["P2C"] and v == "P2C":
        return Verdict("warning", f"NCCL_P2P_LEVEL={v}: unknown to NCCL < 2.27.3, ignored", "use PXB or PHB")
    if v.upper() in P2P_LEVELS and v not in P2P_LEVELS:
        title = f"NCCL_P2P_LEVEL={v}: ignored — NCCL compares level names case-sensitively (strcmp), so the default (PXB) stays"
        return Verdict("warning", title, f"write NCCL_P2P_LEVEL={v.upper()}")
    if v not in P2P_LEVELS and v[:1].isdigit():
        level = LEGACY_P2P[min(strtoll(v)[0] or 0, 5)]
        title = f"NCCL_P2P_LEVEL={v}: legacy number, NCCL reads it as {level} (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4+ SYS)"
        return Verdict(
            "warning", title + "; community tables disagree", f"write NCCL_P2P_LEVEL={level}", {"nccl_reads_as": level}
        )
    if v not in P2P_LEVELS:
        title = f"NCCL_P2P_LEVEL={v}: not a level name, NCCL ignores it (default PXB stays)"
        return Verdict("warning", title, f"one of {', '.join(P2P_LEVELS)}")
    level, rank = v, P2P_LEVELS.index(v)
    default = "SYS" if (m.amd_cpu and m.n_gpus is not None and m.n_gpus <= 2) else "PXB"
    if level == "LOC":
        title = "NCCL_P2P_LEVEL=LOC: P2P off, intra-node traffic goes through host shared memory"
        return Verdict("warning", title, "unset it unless P2P hangs (then fix IOMMU/ACS)")
    if m.n_gpus is not None and m.n_gpus <= 1:
        return Verdict("info", f"NCCL_P2P_LEVEL={level}: no effect with {m.n_gpus} GPU")
    if m.pairs is not None and set(m.pairs) == {"NV"}:
        return Verdict("info", f"NCCL_P2P_LEVEL={level}: no effect, every GPU pair is NVLink-connected")
    if m.pairs is not None:
        lo = P2P_LEVELS.index(default)
        opened = {
            c: len(p) for c, p in m.pairs.items() if lo < P2P_LEVELS.index(SMI_TO_NCCL_PATH.get(c, "LOC")) <= rank
        }
        if not opened:
            title = f"NCCL_P2P_LEVEL={level}: changes nothing on this topology (default {default})"
            return Verdict("info", title, "", {"pairs": {k: len(p) for k, p in m.pairs.items()}})
        desc = ", ".join(f"{n} {c}" for c, n in opened.items())
        title = f"NCCL_P2P_LEVEL={level} turns on CUDA P2P for GPU pairs NCCL's default ({default}) routes "
        title += f"through host shared memory: {desc} pairs (PCIe through the CPU root complex / across NUMA)"
        fix = "P2P across host bridges is where IOMMU/ACS make NCCL hang on PCIe rigs (RTX PRO 6000 reports); "
        fix += "it does not bypass CUDA IPC, it uses it. Keep it only if `python -m kit env --allreduce --launch "
        fix += "...` passes and is faster than without; otherwise unset it"
        return Verdict("warning", title, fix, {"newly_p2p_pairs": opened, "default_level": default})
    if rank >= P2P_LEVELS.index("PHB"):
        numa = " and across NUMA nodes" if level == "SYS" else ""
        title = f"NCCL_P2P_LEVEL={level} allows P2P through CPU host bridges{numa} (topology unknown here; NCCL's default is PXB)"
        return Verdict(
            "warning",
            title,
            "decide on the GPU host: keep only if the all-reduce smoke test passes under it and is faster",
        )
    return Verdict("info", f"NCCL_P2P_LEVEL={level}: valid")


def _int_param(name: str, v: str) -> tuple[int | None, Verdict | None]:
    n, rest = strtoll(v)
    if n is None:
        return None, Verdict("warning", f"{name}={v}: not a number, NCCL uses its default", "write an integer")
    if rest.strip():
        title = f"{name}={v}: NCCL reads {n} (strtoll stops at {rest!r})"
        return n, Verdict("warning", title, f"write {name}=<integer>", {"nccl_reads_as": n})
    return n, None


def _clamped(name: str, v: str, n: int, lo: int, hi: int, fix: str) -> Verdict:
    """NCCL clamps an out-of-range integer setting into [lo, hi] (with an INFO line, not an error)."""
    c = min(max(n, lo), hi)
    return Verdict("warning", f"{name}={v}: outside {lo}..{hi}, NCCL clamps it to {c}", fix, {"nccl_reads_as": c})


def _nthreads(name: str, v: str, m: Machine, env: dict, lo: int = 64, hi: int = 512) -> Verdict:
    n, bad = _int_param(name, v)
    if bad and n is None:
        return bad
    if n <= 0:
        return Verdict("warning", f"{name}={v}: <= 0 means unset, NCCL picks its default", "unset it")
    if n % 32:
        title = f"{name}={v}: not a multiple of 32 (warp size); NCCL replaces it with {hi}"
        return Verdict("warning", title, f"a multiple of 32 in {lo}..{hi}", {"nccl_reads_as": hi})
    if not lo <= n <= hi:
        return _clamped(name, v, n, lo, hi, f"a multiple of 32 in {lo}..{hi}")
    if bad:
        return bad
    note = ""
    if name == "NCCL_NTHREADS":
        note = "; applies to LL and Simple (LL128 uses NCCL_LL128_NTHREADS)"
        if n == 512 and env.get("NCCL_PROTO", "").strip().lower() == "ll":
            note = "; a no-op with NCCL_PROTO=LL (LL's default is already 512)"
    return Verdict("info", f"{name}={v}: valid (multiple of 32 in {lo}..{hi}){note}")


def _buffsize(name: str, v: str, m: Machine, env: dict) -> Verdict:
    n, bad = _int_param(name, v)
    if n is None:
        return bad
    if n <= 0:
        title = f"{name}={v}: NCCL uses the value as is, a buffer of {n} bytes breaks communication"
        return Verdict("error", title, "unset it (default 4194304 for Simple)")
    if bad:
        return bad
    note = f"{n / 2**20:g} MiB per channel and peer (Simple default 4 MiB)"
    if name == "NCCL_BUFFSIZE" and env.get("NCCL_PROTO", "").strip().lower() == "ll":
        note += "; Simple buffers are unused by collectives while NCCL_PROTO=LL (send/recv still use them)"
    if n > 2**28:
        title = f"{name}={v}: {note}; very large, multiplies GPU memory per channel and peer"
        return Verdict("warning", title, "stay near the default unless a benchmark shows a gain")
    return Verdict("info", f"{name}={v}: valid, {note}")


def _channels(name: str, v: str, m: Machine, env: dict) -> Verdict:
    n, bad = _int_param(name, v)
    if n is None:
        return bad
    top = MAXCHANNELS if (m.nccl is None or m.nccl >= (2, 25, 1)) else 32
    lo = 1 if "MAX" in name else 0
    if not lo <= n <= top:
        return _clamped(name, v, n, lo, top, f"a value in {lo}..{top}")
    if bad:
        return bad
    legacy = " (legacy name; the *_NCHANNELS spelling wins when both are set)" if "NRINGS" in name else ""
    return Verdict("info", f"{name}={v}: valid ({lo}..{top}){legacy}")


def _debug(name: str, v: str, m: Machine, env: dict) -> Verdict:
    lvl = v.strip().upper()
    if lvl not in DEBUG_LEVELS:
        return Verdict(
            "warning", f"NCCL_DEBUG={v}: not a level, NCCL prints nothing extra", f"one of {', '.join(DEBUG_LEVELS)}"
        )
    extra = " — verbose, keep out of production launches" if lvl in ("INFO", "TRACE") else ""
    return Verdict("info", f"NCCL_DEBUG={v}: valid{extra}")


def _path_file(name: str, v: str, m: Machine, env: dict) -> Verdict:
    if v == "":
        title = f"{name} is set but empty: NCCL tries to open '' and communicator init fails"
        return Verdict("error", title, f"unset {name}")
    return Verdict("info", f"{name}={v}: NCCL loads this XML at init; it must exist on every node")


def _flag(name: str, v: str, m: Machine, env: dict, on_sev: str, on_text: str, fix: str = "") -> Verdict:
    n, _ = strtoll(v)
    if n == 1:
        return Verdict(on_sev, f"{name}=1: {on_text}", fix)
    if n is None and v.strip():
        title = f"{name}={v}: NCCL reads it as 0 (not a number), so it has no effect"
        return Verdict("warning", title, f"write {name}=1 (or 0)")
    return Verdict("info", f"{name}={v}: {'off' if n == 0 else 'non-1 value'}, no effect")


# NCCL variable -> rule(name, value, machine, the launch's NCCL_* env) -> Verdict
RULES = {
    "NCCL_PROTO": _proto,
    "NCCL_ALGO": _algo,
    "NCCL_P2P_LEVEL": _p2p_level,
    "NCCL_NTHREADS": _nthreads,
    "NCCL_LL128_NTHREADS": partial(_nthreads, lo=160, hi=640),
    **dict.fromkeys(("NCCL_BUFFSIZE", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE"), _buffsize),
    **dict.fromkeys(("NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NRINGS", "NCCL_MIN_NRINGS"), _channels),
    "NCCL_DEBUG": _debug,
    **dict.fromkeys(("NCCL_GRAPH_FILE", "NCCL_TOPO_FILE"), _path_file),
    "NCCL_P2P_DISABLE": partial(
        _flag,
        on_sev="warning",
        on_text="P2P off, GPU-to-GPU traffic goes through host shared memory (correct, slower); the usual workaround for P2P hangs",
        fix="fix IOMMU/ACS on the host, then unset it",
    ),
    "NCCL_SHM_DISABLE": partial(
        _flag,
        on_sev="warning",
        on_text="no shared-memory transport; without P2P, intra-node traffic falls back to the network transport",
        fix="unset it",
    ),
    "NCCL_IB_DISABLE": partial(
        _flag, on_sev="info", on_text="no InfiniBand; fine for single-node TP (multi-node falls back to sockets)"
    ),
    "NCCL_NVLS_ENABLE": lambda name, v, m, env: Verdict(
        "info", f"{name}={v}: NVLink SHARP (multicast) {'off' if strtoll(v)[0] == 0 else 'allowed'}"
    ),
}


# set by NVIDIA's CUDA container images to describe what is installed; NCCL never reads them
IMAGE_VARS = {"NCCL_VERSION": "the NCCL version of the CUDA container image (documentation, not a setting)"}


def _judge(name: str, value: str, m: Machine, env: dict) -> Verdict:
    short = name[len("NCCL_") :]
    close = difflib.get_close_matches(short, KNOWN, n=1, cutoff=0.8)
    if name in IMAGE_VARS:
        return Verdict("info", f"{name}={value}: {IMAGE_VARS[name]}")
    if name in RULES:
        return RULES[name](name, value, m, env)
    if short in KNOWN:
        return Verdict(
            "info", f"{name}={value}: read by NCCL {NCCL_VERSION_OF_LIST}; the kit does not validate its value"
        )
    if close:
        title = f"{name}: not read by NCCL {NCCL_VERSION_OF_LIST} (silently ignored); did you mean NCCL_{close[0]}?"
        return Verdict("warning", title, f"rename it to NCCL_{close[0]}")
    return Verdict("info", f"{name}: not read by NCCL {NCCL_VERSION_OF_LIST} (older NCCL, a plugin, or a typo)")


def _combined(env: dict, m: Machine) -> list[Finding]:
    """Cross-variable effects: does AllReduce keep a usable (algorithm, protocol) pair? MIN <= MAX channels?"""
    out = []
    try:
        legacy = m.nccl is not None and m.nccl < SINCE["prefix"]
        proto = parse_list(env.get("NCCL_PROTO", ""), PROTOS, legacy)["AllReduce"]
        algo = parse_list(env.get("NCCL_ALGO", ""), ALGOS, legacy)["AllReduce"]
    except NcclParseError:
        proto = algo = None  # already an error finding of its own
    if proto is not None and ("NCCL_PROTO" in env or "NCCL_ALGO" in env):
        p_on = {p for p, s in proto.items() if s == 1 or (s == AUTO and m.nvlink is not False)}
        nvls_ok = m.nvlink is not False and strtoll(env.get("NCCL_NVLS_ENABLE", "1"))[0] != 0
        usable = {"Ring": p_on, "Tree": p_on, "NVLS": p_on & {"Simple"} if nvls_ok else set()}
        if not any(algo.get(a) and ps for a, ps in usable.items()):
            title = "NCCL_PROTO/NCCL_ALGO leave AllReduce no usable algorithm+protocol on one node: 'No algorithm/protocol available'"
            fix = "NVLS needs NVSwitch and Simple; PAT serves only AllGather/ReduceScatter; CollNet and NVLSTree need several nodes"
            ev = {"NCCL_PROTO": env.get("NCCL_PROTO"), "NCCL_ALGO": env.get("NCCL_ALGO")}
            out.append(NCCL_COMBO(title, evidence=ev, fix=fix + " — include Ring or Tree"))
    lo = strtoll(env.get("NCCL_MIN_NCHANNELS", env.get("NCCL_MIN_NRINGS", "")))[0]
    hi = strtoll(env.get("NCCL_MAX_NCHANNELS", env.get("NCCL_MAX_NRINGS", "")))[0]
    if lo is not None and hi is not None and lo > hi:
        title = f"NCCL_MIN_NCHANNELS={lo} > NCCL_MAX_NCHANNELS={hi}: the maximum wins"
        out.append(NCCL_COMBO(title, evidence={"min": lo, "max": hi}, severity="warning", fix="make MIN <= MAX"))
    if strtoll(env.get("NCCL_P2P_DISABLE", ""))[0] == 1 and strtoll(env.get("NCCL_SHM_DISABLE", ""))[0] == 1:
        title = (
            "NCCL_P2P_DISABLE=1 with NCCL_SHM_DISABLE=1: GPUs on one node talk over the network transport (very slow)"
        )
        out.append(NCCL_COMBO(title, severity="warning", fix="keep SHM on"))
    return out


def nccl_findings(env: dict[str, str], facts: dict | None = None, source: str = "environment") -> list[Finding]:
    """One `env.nccl_var` finding per NCCL_* variable in `env` (info when fine), plus `env.nccl_combo` ones."""
    m = machine_from_facts(facts)
    ncclenv = {k: v for k, v in env.items() if k.startswith("NCCL_")}
    out = []
    for name, value in sorted(ncclenv.items()):
        v = _judge(name, value, m, ncclenv)
        ev = {"var": name, "value": value, "source": source, **v.evidence}
        out.append(NCCL_VAR(v.title, evidence=ev, severity=v.severity, fix=v.fix))
    return out + _combined(ncclenv, m)
