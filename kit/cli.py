"""`python -m kit <verb> ...` — the headless twin of every notebook step.

Each verb lives in its own module, imported only when that verb runs (so `kit inspect` never
imports torch). A verb module exposes:

    HELP: str                                   one line for `python -m kit --help`
    def add_arguments(parser) -> None           its flags (usually kit.config.add_arguments)
    def run(args: argparse.Namespace) -> int    exit code: 0 ok, 1 error findings, 2 cannot run

A `KitInputError` raised anywhere becomes a one-line message on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from kit.findings import EXIT_CANNOT_RUN, KitInputError

# verb -> module; order is the order of the walk-through (notebooks 01..05, then the demo)
VERBS: dict[str, str] = {
    "env": "kit.env.check",
    "doctor": "kit.doctor",
    "inspect": "kit.checkpoint.inspect",
    "convert": "kit.checkpoint.convert",
    "probe": "kit.wiring.probe",
    "oracle": "kit.reference.oracle",
    "train-draft": "kit.reference.train",
    "launch": "kit.serving.launch_verb",
    "serve": "kit.serving.server",
    "bench": "kit.measure.bench",
    "sweep": "kit.measure.sweep",
    "demo": "kit.demo",
}


def _available() -> dict[str, object]:
    mods = {}
    for verb, modname in VERBS.items():
        try:
            spec = importlib.util.find_spec(modname)
        except ModuleNotFoundError:
            spec = None
        if spec is not None:
            mods[verb] = modname
    return mods


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    available = _available()
    parser = argparse.ArgumentParser(prog="python -m kit", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    if not argv or argv[0] in ("-h", "--help"):
        # the top-level help lists verbs without importing every module
        for verb in available:
            sub.add_parser(verb)
        parser.print_help()
        print("\nverbs: " + ", ".join(available))
        return 0 if argv else EXIT_CANNOT_RUN
    verb = argv[0]
    if verb not in available:
        print(f"kit: unknown verb {verb!r}; choose from: {', '.join(available)}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    mod = importlib.import_module(available[verb])
    p = sub.add_parser(verb, help=getattr(mod, "HELP", ""), description=(mod.__doc__ or "").split("\n\n")[0])
    mod.add_arguments(p)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed a one-line usage error
        return EXIT_CANNOT_RUN if e.code else 0
    try:
        return int(mod.run(args) or 0)
    except KitInputError as e:
        print(f"kit {verb}: error: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print(f"kit {verb}: interrupted", file=sys.stderr)
        return 130
