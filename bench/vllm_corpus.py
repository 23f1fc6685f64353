"""The vLLM corpus through real vLLM on this CPU, each case at its own release, beside `kit doctor`'s verdict.

Why: doctor judges a `vllm serve` line by rules derived per release. What the engine decides before it serves (the
line's flags through its own parser, the speculative config's checks, the draft class built for its config, that
class's `load_weights` on the draft's keys) real vLLM can judge on a CPU without weights: its CPU platform, one gloo
rank, `bench/vllm_loader.py`'s worker. What only serving shows (the aux states captured, acceptance) needs a GPU
(`bench/gpu_vllm.py`). How: `tests/corpus_cases.build_case` writes each case of `kit/tests/vllm/cases.json` (target
and draft config.json, the draft's keys in a sparse safetensors file); the line's flags, less its model, go to the
release's parser, the local folders standing in as model and draft. vLLM stops or loads; doctor, on the same files,
reports an error that stops startup (`STOPS`) or none of them; they agree when both say the same. A case whose
release has no `--site`, or that serves a speculators draft as the model (`vllm serve DRAFT`: its verifier is named
by a hub id), is listed, not run. Prints one JSON document.

    python bench/vllm_corpus.py --site 0.9.0=SITE [--site 0.10.2=SITE ...]
      # SITE: as bench/vllm_loader.py's, with vllm==V (older releases also import setproctitle, loguru,
      # compressed-tensors)
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from vllm_loader import ROOT, doctor_codes, outcome, run_worker

from kit.vllm.cmdline import launch_test, read_argv
from kit.vllm.rules import rules_for

CASES = ROOT / "kit" / "tests" / "vllm" / "cases.json"
# doctor's codes for a fault that stops vLLM before it serves (the rest: it serves, and what it serves is judged
# otherwise); aux.algorithm: an EAGLE-3 draft in an EAGLE-1 class, whose fc.weight does not fit
STOPS = frozenset(
    "launch.vllm_config launch.vllm_method launch.vllm_flag launch.vllm_draft_tp launch.vllm_speculators "
    "draft.vllm_keys draft.arch aux.vllm_target aux.algorithm".split()
)


def flags(launch: str, version: str) -> tuple[list[str], dict[str, str]]:
    """(the line's flags as the release's parser receives them, less the model (the worker names the local one), the
    environment it assigns before its program)."""
    argv = shlex.split(launch.replace("\\\n", " "))
    at = next(i for i in range(len(argv)) if launch_test(argv[i:]))
    env = dict(a.split("=", 1) for a in argv[:at] if "=" in a)
    argv = argv[at:]
    args = read_argv(argv, rules_for(version)).args
    out, skip = [], False
    for a in args:
        if skip or a == "--model" or a.startswith("--model="):
            skip = a == "--model"
            continue
        out.append(a)
    return out, env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--site", action="append", default=[], help="V=SITE: a folder with vllm==V (repeat per release)")
    ap.add_argument("--port", default="29591", help="a free local port for the one-rank gloo group")
    a = ap.parse_args()
    sites = dict(s.split("=", 1) for s in a.site)
    sys.path.insert(0, str(ROOT / "tests"))
    from corpus_cases import build_case

    rows = []
    with tempfile.TemporaryDirectory(prefix="kit-vllm-corpus-") as tmp:
        for case in json.loads(CASES.read_text()):
            version = case["vllm_version"]
            (root := Path(tmp, case["id"])).mkdir()
            args = build_case(case, root)
            row = {"case": case["id"], "release": version, "truth": case["truth"]}
            if version in sites and args.get("draft"):
                row["doctor"] = doctor_codes(**args)
                line, env = flags(case["launch"], version)
                job = {"target": args["target"], "draft": args["draft"], "flags": line, "env": env}
                real = run_worker(sites[version], a.port, [job])[args["draft"]]
                stops, said = outcome(real) == "refuses", bool(STOPS & set(row["doctor"]))
                row |= {"vllm": real, "vllm_stops": stops, "doctor_stops": said}
                row |= {"agree": None if outcome(real) == "unbuilt" else stops == said}
            rows.append(row)
    run = [r for r in rows if r.get("agree") is not None]
    doc = {"rows": rows, "judged": len(run), "agree": sum(r["agree"] for r in run), "of": len(rows)}
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
