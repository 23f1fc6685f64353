"""`kit <verb> ...` (also `python -m kit <verb> ...`) — the headless twin of every notebook step.

    kit --help                   one line per verb, in notebook order
    kit doctor --help            a verb's flags, their defaults and an example

Each verb lives in its own module, imported only when that verb runs (`kit --help` reads each module's HELP line
from its source). A verb module exposes `HELP` (one line), `add_arguments(parser)` and `run(args) -> int`
(0 ok, 1 error findings, 2 cannot run). One error style for every verb: a `KitInputError` (or an unreadable file
the user named) is one line `kit VERB: error: ...` on stderr and exit 2; a bad flag prints the verb's usage and
the error; a closed pipe (`kit doctor ... | head -1`) ends the verb quietly.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import importlib
import importlib.util
import os
import sys

from kit.findings import EXIT_CANNOT_RUN, KitInputError

PROG = "kit"

# verb -> (module, one example), in notebook order; {release} and {bundle_release} are filled from
# kit.sglang.versions when a verb's help is built
VERBS: dict[str, tuple[str, str]] = {
    "env": ("kit.env.checks", "kit env --launch-file launch.sh"),
    "doctor": (
        "kit.doctor",
        "kit doctor --target ~/models/Llama-3.1-8B-Instruct --draft ~/drafts/eagle3 --launch-file launch.sh",
    ),
    "inspect": ("kit.checkpoint.inspect", "kit inspect ~/drafts/eagle3 --sglang-version {release}"),
    "convert": (
        "kit.checkpoint.convert",
        "kit convert ~/drafts/eagle3 ~/drafts/eagle3-sglang --to sglang --target ~/models/Llama-3.1-8B-Instruct",
    ),
    "probe": (
        "kit.wiring.probe",
        "kit probe --target ~/models/Llama-3.1-8B-Instruct/config.json --config-only --draft ~/drafts/eagle3",
    ),
    "oracle": ("kit.reference.oracle", "kit oracle --quick --compare"),
    "expect": (
        "kit.reference.expect",
        "kit expect --log train.log --speculative-eagle-topk 8 --speculative-num-draft-tokens 32",
    ),
    "train-draft": ("kit.reference.train", "kit train-draft --quick --out drafts/smoke"),
    "launch": ("kit.launch_verb", 'kit launch --from "$(cat launch.sh)" --dry-run'),
    "serve": (
        "kit.refserver.server",
        "kit serve --speculative-algorithm EAGLE3 --speculative-draft-model-path ~/drafts/eagle3 --port 30000",
    ),
    "bench": (
        "kit.measure.bench",
        "kit bench --url http://127.0.0.1:30000 --baseline-url http://127.0.0.1:30001 --repeats 3",
    ),
    "sweep": ("kit.measure.sweep", 'kit sweep --launch "$(cat launch.sh)" --speculative-num-steps 1 3 5'),
    "tune": ("kit.tune.run", 'kit tune --launch "$(cat launch.sh)" --batch-size 1 4 16 --speculative-num-steps 1 2 3'),
    "rehearse": (
        "kit.rehearse",
        "kit rehearse --target ~/models/Kimi-K2.5 --draft ~/drafts/eagle3 --launch-file launch.sh --dry-run",
    ),
    "bundle": (
        "kit.sglang.bundle",
        "kit bundle build --sglang-version {bundle_release} --arch sm90 --python 3.12 --out dist",
    ),
    "demo": ("kit.demo", "kit demo --quick"),
}


def verb_help(module: str) -> str:
    """A verb module's HELP line, read from its source without importing it (so `kit --help` stays fast)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return ""
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "HELP" for t in node.targets):
            return ast.literal_eval(node.value)
    return ""


def top_help() -> str:
    width = max(len(v) for v in VERBS)
    import kit

    lines = [
        f"usage: {PROG} VERB [flags]   (or: python -m kit VERB [flags])",
        "",
        (kit.__doc__ or "").strip().splitlines()[0],
        "",
        "verbs, in notebook order:",
    ]
    lines += [f"  {verb:<{width}}  {verb_help(mod)}" for verb, (mod, _) in VERBS.items()]
    lines += ["", f"`{PROG} VERB --help` shows a verb's flags, their defaults and an example."]
    return "\n".join(lines)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every flag's help ends with its default (when it has one worth showing)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        h = action.help or ""
        d = action.default
        if "%(default)" in h or d in (None, False, argparse.SUPPRESS) or d == [] or action.option_strings == []:
            return h
        return h + " (default: %(default)s)"


class VerbParser(argparse.ArgumentParser):
    """argparse, with a bad flag answered by this verb's usage line, the error and a close match."""

    def error(self, message: str):
        if "unrecognized arguments:" in message:
            known = [s for a in self._actions for s in a.option_strings]
            hints = []
            for bad in message.split(":", 1)[1].split():
                if bad.startswith("--"):
                    close = difflib.get_close_matches(bad.split("=")[0], known, n=1)
                    if close:
                        hints.append(f"{bad.split('=')[0]} -> {close[0]}?")
            if hints:
                message += " (did you mean: " + ", ".join(hints) + ")"
        self.print_usage(sys.stderr)
        self.exit(EXIT_CANNOT_RUN, f"{self.prog}: error: {message}\n")


def verb_parser(verb: str, mod) -> VerbParser:
    from kit.sglang.versions import BUNDLE_EXAMPLE_RELEASE, DEFAULT_RELEASE

    module, example = VERBS[verb]
    example = example.format(release=DEFAULT_RELEASE, bundle_release=BUNDLE_EXAMPLE_RELEASE)
    p = VerbParser(
        prog=f"{PROG} {verb}",
        description=f"{getattr(mod, 'HELP', '')}  (details: the docstring of {module})",
        epilog=f"example:\n  {example}",
        formatter_class=HelpFormatter,
    )
    mod.add_arguments(p)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader went away: stdout to /dev/null, so the exit flush cannot raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # what a shell reports for a command ended by SIGPIPE


def _main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(top_help(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else EXIT_CANNOT_RUN
    verb = argv[0]
    if verb not in VERBS:
        close = difflib.get_close_matches(verb, VERBS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        print(f"{PROG}: error: unknown verb {verb!r}{hint}; `{PROG} --help` lists them", file=sys.stderr)
        return EXIT_CANNOT_RUN
    mod = importlib.import_module(VERBS[verb][0])
    parser = verb_parser(verb, mod)
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as e:  # --help (0) or a bad flag (2, usage already printed)
        return int(e.code or 0)
    try:
        _check_release(verb, args)
        rc = int(mod.run(args) or 0)
        sys.stdout.flush()  # a closed pipe surfaces here, inside the handler, not at interpreter exit
        return rc
    except KitInputError as e:
        print(f"{PROG} {verb}: error: {e}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
        if not _named_by_user(e.filename, argv):
            raise  # a file of the kit's own is missing: a bug, and the traceback says where
        # a file the user named could not be opened: the same one line as a KitInputError
        print(f"{PROG} {verb}: error: {e.filename}: {e.strerror}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        print(f"{PROG} {verb}: interrupted", file=sys.stderr)
        return 130


def _named_by_user(filename, argv: list[str]) -> bool:
    """Is `filename` one of the paths on the command line (or inside one of them)?"""
    if not filename:
        return False
    f = os.path.abspath(os.fsdecode(filename))
    for a in argv:
        for v in (a, a.split("=", 1)[-1]):
            if v and not v.startswith("-"):
                p = os.path.abspath(os.path.expanduser(v))
                if f == p or f.startswith(p.rstrip(os.sep) + os.sep):
                    return True
    return False


def _check_release(verb: str, args: argparse.Namespace) -> None:
    """`--sglang-version X`: a version, else exit 2; a release newer than the kit's list is a warning with the
    command that derives its tables; one before the list, a warning naming the release whose rules stand in."""
    requested = getattr(args, "sglang_version", None)
    if not requested:
        return
    from kit.sglang.loader import known_versions
    from kit.sglang.versions import DEFAULT_RELEASE, is_listed, is_version, pick_recorded, unlisted_note

    if not is_version(requested):
        raise KitInputError(f"--sglang-version {requested!r}: not a version (e.g. {DEFAULT_RELEASE})")
    note = unlisted_note(requested) or (
        pick_recorded(requested, known_versions()).note() if not is_listed(requested) else None
    )
    if note:
        print(f"{PROG} {verb}: warning: {note}", file=sys.stderr)


def entry() -> None:
    """The `kit` console script."""
    sys.exit(main())
