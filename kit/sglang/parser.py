"""Parse launch flags with SGLang's REAL argument parser (`ServerArgs.add_cli_args`) of the requested release.

SGLang's parser is the truth about its flags, and it imports on a CPU. For release V it runs in this interpreter
when the sglang installed here is V; else in the interpreter named by `python=` / $KIT_SGLANG_PYTHON; else in the
kit's side environment `sglang-V` (`kit.venvs.ensure_venv`: sglang==V `--no-deps` over this interpreter's
packages), built on first use for releases with a recorded flag table (unless $KIT_NO_VENV_BUILD=1), for any other
on request (`python -m kit.sglang.releases --side-env V`). Several argvs are parsed per call, and the parser
process stays up (importing SGLang takes ~8 s). Each result is
{"ok": bool, "unknown": [...], "error": str|None, "args": {dest: value}|None}.

`flag_findings(flags, version)` turns one parse into findings. When the real parser cannot run, `launch.parser`
warns, and the release's recorded flag table (`kit.sglang.flags`) still applies argparse's rules.

    from kit.sglang.parser import parse_argvs, flag_findings
    [res] = parse_argvs([["--model-path", "m", "--tp-size", "8"]], version="0.5.17")

Run `python -m kit.sglang.parser --model-path m --tp 8` to see one result.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kit.findings import Code, Finding, KitInputError
from kit.sglang.versions import default_release, installed_version

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "launch/process/logs: notebook 04"
FLAG = Code(
    "launch.flag",
    SECTION,
    "error / info",
    (
        "error: the release's own parser rejects a flag or value (unknown or ambiguous flag, bad int/float, value "
        "outside the choices, a value after a store_true flag): the server exits at startup. SGLang: "
        "`ServerArgs.add_cli_args`, in the installed sglang or the side environment `sglang-<version>`, else its "
        "recorded table (`kit/sglang/server_flags.json`); vLLM: `vllm serve`'s parser as recorded from that release's "
        "wheel (`kit/vllm/rules.json`), vLLM's own spellings first (`_` for `-`, `--json-arg.key value`). info: flags "
        "given as prefixes (`--speculative-algo` is read as `--speculative-algorithm`)"
    ),
    "fix the spelling/value (`python -m sglang.launch_server --help`, `vllm serve --help`); spell flags out",
)
PARSER = Code(
    "launch.parser",
    SECTION,
    "warning",
    (
        "the release's own parser could not run (no sglang of that release here, side environment not buildable): "
        "flags were checked against that release's stored table (prefixes, `=`, repeats, types, choices), the "
        "evidence lists what only the real parser checks; a release outside every stored table gets its flags **not "
        "checked**, as the warning says (no other release's table stands in: flags and choices such as "
        "`--reasoning-parser` differ between releases). On a vLLM line: no recorded parser of that vLLM release"
    ),
    "install that sglang or allow its side environment; `python -m kit.derive.flag_scan --write VERSION` stores its "
    "table (vLLM: `python -m kit.derive.vllm_scan --parser VERSION SITE`)",
)

# where each engine lists its flags
HELP = {"SGLang": "`python -m sglang.launch_server --help`", "vLLM": "`vllm serve --help`"}

# Runs inside the interpreter that has sglang; reads a JSON list of argvs on stdin and prints a
# JSON list of results as its last stdout line. Built exactly like `prepare_server_args` (prog,
# abbreviations allowed), except that errors raise instead of exiting.
_WORKER = r"""
import argparse, json, sys

class _ParseError(Exception):
    pass

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _ParseError(message)

def parse_many(argvs):
    from sglang.srt.server_args import ServerArgs

    parser = _Parser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    out = []
    for argv in argvs:
        try:
            ns, unknown = parser.parse_known_args(argv)
            out.append({"ok": not unknown, "unknown": unknown, "error": None, "args": vars(ns)})
        except _ParseError as e:
            out.append({"ok": False, "unknown": [], "error": str(e), "args": None})
    return out

def failure(e):
    return "kit-parse-failed: " + (f"{type(e).__name__}: {e}".splitlines() or ["?"])[0] + "\n"

def answer(line):
    try:
        return "kit-parse: " + json.dumps(parse_many(json.loads(line)), default=str) + "\n"
    except Exception as e:
        return failure(e)

def serve(path, idle):
    # one request line per connection on a Unix socket, until `idle` seconds pass without one. The socket is
    # bound before SGLang imports, so a client connecting meanwhile waits in the backlog for its answer.
    import os, socket, traceback
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(64)
    ino = os.stat(path).st_ino
    try:
        from sglang.srt.server_args import ServerArgs  # noqa: F401  (what the daemon is kept for)
        failed = None
    except BaseException as e:
        traceback.print_exc()
        failed = failure(e)
    srv.settimeout(2.0 if failed else idle)

    def drain():  # answer each connection until accept() fails: the idle timeout, or (non-blocking) no client left
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.settimeout(None)
            with conn:
                f = conn.makefile("rw")
                line = f.readline()
                if line.strip():
                    f.write(failed or answer(line))
                    f.flush()

    try:
        drain()
    finally:
        try:  # no new client finds us; those already in the backlog still get their answer
            if os.stat(path).st_ino == ino:
                os.unlink(path)
                if not failed:  # the log (our stderr) is kept only to say why a start failed
                    os.unlink(os.path.splitext(path)[0] + ".log")
        except OSError:
            pass
        srv.setblocking(False)
        drain()

if __name__ == "__main__":
    if len(sys.argv) > 2:  # the shared daemon: python -c WORKER SOCKET IDLE_S
        serve(sys.argv[1], float(sys.argv[2]))
    else:  # one JSON list of argvs per stdin line, one marked answer line each, until EOF
        for line in sys.stdin:
            sys.stdout.write("\n" + answer(line))
            sys.stdout.flush()
"""
_MARK, _FAILED = "kit-parse: ", "kit-parse-failed: "


def in_process_version() -> str | None:
    """The sglang release importable in this interpreter, or None."""
    try:
        if importlib.util.find_spec("sglang") is None:
            return None
    except (ImportError, ValueError):
        return None
    return installed_version()


def venv_name(version: str) -> str:
    return f"sglang-{version}"


def parser_python(
    python: str | None = None, build: bool | None = None, version: str | None = None, check=None
) -> str | None:
    """Interpreter to run release `version`'s parser in; None means in-process. KitInputError if none.
    `check`: how a side environment built now is checked (`kit.venvs.ensure_venv`)."""
    version = version or default_release()
    if python:
        return python
    if in_process_version() == version:
        return None
    if os.environ.get("KIT_SGLANG_PYTHON"):
        return os.environ["KIT_SGLANG_PYTHON"]
    from kit.sglang.flags import recorded_closure
    from kit.venvs import is_built

    if build is None:
        build = os.environ.get("KIT_NO_VENV_BUILD") != "1"
    name, pins = venv_name(version), recorded_closure(version)
    if not is_built(name, pins):
        if not build:
            raise KitInputError(
                f"no sglang {version} in this interpreter and side environment {name} not built ($KIT_NO_VENV_BUILD=1)"
            )
        if pins is None:  # a build takes minutes: automatic only where one was recorded
            raise KitInputError(
                f"no sglang {version} in this interpreter; its side environment is built on request "
                f"(python -m kit.sglang.releases --side-env {version})"
            )
    return side_python(version, check=check)


def side_python(version: str, check=None, quiet: bool = True) -> str:
    """The python of SGLang `version`'s side environment, built when missing (`kit.venvs.ensure_venv`) with the
    closure its parser imported when the release's table was derived (`kit.sglang.flags.recorded_closure`)."""
    from kit.sglang.flags import recorded_closure
    from kit.venvs import ensure_venv

    return str(ensure_venv(venv_name(version), quiet=quiet, check=check, pins=recorded_closure(version)))


_CACHE: dict[tuple, dict] = {}  # (interpreter, argv) -> result: a notebook lints the same line twice


def parse_argvs(
    argvs: list[list[str]],
    python: str | None = None,
    build: bool | None = None,
    timeout: float = 300,
    version: str | None = None,
) -> list[dict]:
    """SGLang's parse of each argv (flags only, without `python -m sglang.launch_server`). A kit side environment
    keeps its parses beside it, since a built environment never changes (its directory name carries its recipe)."""
    py = parser_python(python, build, version)
    store = env / "kit-parse-cache" if (env := _side_env(py)) is not None else None
    keyed = [_canonical_port(a) for a in argvs]
    for a, _ in keyed if store is not None else ():
        f = store / _argv_key(a)
        if (py, tuple(a)) not in _CACHE and f.exists():
            _CACHE[(py, tuple(a))] = json.loads(f.read_text())
    todo = list({tuple(a): a for a, _ in keyed if (py, tuple(a)) not in _CACHE}.values())
    if todo:
        from kit.models import write_cache_json

        for a, res in zip(todo, _parse(todo, py, timeout)):
            _CACHE[(py, tuple(a))] = res
            if store is not None:
                write_cache_json(store / _argv_key(a), res)
    return [_with_port(_CACHE[(py, tuple(a))], port) for a, port in keyed]


def _argv_key(argv: list[str]) -> str:
    return hashlib.sha256(json.dumps(argv).encode()).hexdigest()[:20] + ".json"


# A local run gets a fresh port each time (`kit.serving.launch.localize`); any decimal port parses the same
# way (argparse's type=int), so the parse is keyed on this one and the real port is put back in its result.
_KEY_PORT = "30000"


def _canonical_port(argv: list[str]) -> tuple[list[str], int | None]:
    """(argv with a decimal `--port` value replaced by `_KEY_PORT`, the port it had, or None)."""
    out, port = list(argv), None
    for i, a in enumerate(out):
        if a == "--port" and i + 1 < len(out) and out[i + 1].isdecimal():
            port, out[i + 1] = int(out[i + 1]), _KEY_PORT
        elif a.startswith("--port=") and a[7:].isdecimal():
            port, out[i] = int(a[7:]), f"--port={_KEY_PORT}"
    return out, port


def _with_port(res: dict, port: int | None) -> dict:
    if port is None or not (res.get("args") or {}).get("port"):
        return res
    return {**res, "args": {**res["args"], "port": port}}


def _side_env(py: str | None) -> Path | None:
    """The kit side environment `py` belongs to; None for this interpreter or a user-named one."""
    from kit.venvs import venv_root

    env = Path(py).parent.parent if py is not None else None
    return env if env is not None and venv_root().resolve() in env.resolve().parents else None


def _parse(argvs: list[list[str]], py: str | None, timeout: float) -> list[dict]:
    if py is None:
        ns: dict = {}
        exec(compile(_WORKER.replace('if __name__ == "__main__":', "if False:"), "sglang_parser_worker", "exec"), ns)
        return json.loads(json.dumps(ns["parse_many"](argvs), default=str))
    if not Path(py).exists() and "/" in py:
        raise KitInputError(f"{py}: no such interpreter for SGLang's parser")
    sock = _daemon_socket(py)
    return _ask_daemon(py, sock, argvs, timeout) if sock is not None else _ask_worker(py, argvs, timeout)


def _answer(py: str, line: str) -> list[dict]:
    if line.startswith(_MARK):
        return json.loads(line[len(_MARK) :])
    raise KitInputError(f"{py}: SGLang's parser did not run ({line[len(_FAILED) :].strip()})")


def _ask_worker(py: str, argvs: list[list[str]], timeout: float) -> list[dict]:
    w = _worker(py)
    answer: list[str] = []

    def read() -> None:
        for line in w.stdout:
            if line.startswith((_MARK, _FAILED)):
                answer.append(line)
                return

    try:
        w.stdin.write(json.dumps(argvs) + "\n")
        w.stdin.flush()
    except OSError:
        pass  # it died starting: its stderr says why, below
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    if answer:
        return _answer(py, answer[0])
    _WORKERS.pop(py, None)
    w.kill()
    w.wait()
    if reader.is_alive():
        raise KitInputError(f"{py}: cannot run SGLang's parser (no answer in {timeout:.0f} s)")
    w.kit_stderr.seek(0)
    tail = (w.kit_stderr.read().strip().splitlines() or ["no output"])[-1]
    raise KitInputError(f"{py}: SGLang's parser did not run ({tail})")


# A kit side environment's parser is one daemon per machine, shared by every process (importing SGLang's server
# arguments takes ~9-12 s of CPU on a 2-core EPYC): a Unix socket named after the environment, one request per
# connection, exiting after DAEMON_IDLE_S ($KIT_PARSER_IDLE_S) idle; `warm` starts it ahead of need. Any other
# interpreter (a user's, whose packages may change) gets a worker per process, reading a request per stdin line.
DAEMON_IDLE_S = float(os.environ.get("KIT_PARSER_IDLE_S", "600"))
_WORKERS: dict[str, subprocess.Popen] = {}


def _daemon_socket(py: str) -> Path | None:
    """The socket of a kit side environment's parser daemon (None for any other interpreter): in a directory of
    the temp directory only this user can enter (a socket path must stay short; nobody else may answer our
    parses), named by the environment's interpreter and the daemon's code."""
    if _side_env(py) is None:
        return None
    home = Path(tempfile.gettempdir()) / f"kit-{os.getuid()}"
    home.mkdir(mode=0o700, exist_ok=True)
    st = home.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise KitInputError(f"{home}: not this user's private directory; SGLang's parser daemon will not use it")
    st = os.lstat(py)  # and the daemon's code: a daemon of another kit version is never asked
    ident = f"{os.path.abspath(py)}|{st.st_ino}|{st.st_mtime_ns}|{hashlib.sha256(_WORKER.encode()).hexdigest()}"
    return home / f"parse-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.sock"


def _ask_daemon(py: str, sock: Path, argvs: list[list[str]], timeout: float) -> list[dict]:
    for _ in range(2):  # once more if a daemon ended (idle) between our connect and its answer
        conn = _connect(py, sock)
        with conn:
            conn.settimeout(timeout)
            try:
                conn.sendall((json.dumps(argvs) + "\n").encode())
                line = conn.makefile("r").readline()
            except TimeoutError:
                raise KitInputError(f"{py}: cannot run SGLang's parser (no answer in {timeout:.0f} s)") from None
            except OSError:
                line = ""
        if line.startswith((_MARK, _FAILED)):
            return _answer(py, line)
    raise KitInputError(f"{py}: SGLang's parser did not run ({_daemon_log_tail(sock)})")


def warm(version: str | None = None) -> None:
    """Build release `version`'s side environment if not built yet, checked through the parser daemon (its import
    of SGLang is the check, and it stays up for the lint that follows: a first `kit demo` runs this beside notebooks
    01-03). Nothing when already built, or for an in-process or user-named parser."""
    parser_python(version=version, check=lambda py: _ask_daemon(py, _daemon_socket(py), [], timeout=300))


def _connect(py: str, sock: Path):
    """A connection to the daemon on `sock`, started here if none listens (one process starts it: a lock)."""
    from kit.models import cache_lock

    def attempt():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(sock))
            return s
        except OSError:
            s.close()
            return None

    if (s := attempt()) is not None:
        return s
    with cache_lock(sock):
        if (s := attempt()) is not None:
            return s
        sock.unlink(missing_ok=True)  # left by a daemon that was killed
        d = _start_daemon(py, sock)
        deadline = time.monotonic() + 30
        while (s := attempt()) is None:
            if d.poll() is not None or time.monotonic() > deadline:
                d.kill()
                raise KitInputError(f"{py}: SGLang's parser did not run ({_daemon_log_tail(sock)})")
            time.sleep(0.02)
        return s


def _daemon_log_tail(sock: Path) -> str:
    try:
        return (sock.with_suffix(".log").read_text().strip().splitlines() or ["no output"])[-1]
    except OSError:
        return "no output"


def _start_daemon(py: str, sock: Path) -> subprocess.Popen:
    from kit.venvs import side_env

    try:
        with open(sock.with_suffix(".log"), "w") as log:  # its stderr: why it could not start, if it cannot
            return subprocess.Popen([py, "-c", _WORKER, str(sock), str(DAEMON_IDLE_S)], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log, env=side_env(), cwd="/",
                                    start_new_session=True)  # fmt: skip
    except OSError as e:
        raise KitInputError(f"{py}: cannot run SGLang's parser ({e})")


def _worker(py: str) -> subprocess.Popen:
    from kit.venvs import side_env

    w = _WORKERS.get(py)
    if w is not None and w.poll() is None:
        return w
    err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: nothing reads stderr while SGLang imports
    try:
        w = subprocess.Popen([py, "-c", _WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                             text=True, env=side_env(), cwd="/")  # fmt: skip
    except OSError as e:
        raise KitInputError(f"{py}: cannot run SGLang's parser ({e})")
    w.kit_stderr = err
    _WORKERS[py] = w
    return w


def _no_table(version: str, nearest: str, reason: Exception) -> Finding:
    """A release outside every stored flag table, whose parser cannot run here: its flags are not judged (another
    release's flags, choices and prefixes differ: it would convict good commands and pass bad ones)."""
    from kit.sglang.flags import known_versions, missing_reason
    from kit.sglang.versions import derive_command, is_listed

    why = missing_reason(version)
    if why:  # a listed release whose parser could not be read from its wheel: said as such, nothing borrowed
        return PARSER(
            f"flags not checked for SGLang {version}: {why}",
            evidence={"reason": why, "run_reason": str(reason), "sglang_version": version, "checked": False},
            fix=f"install that sglang, set $KIT_SGLANG_PYTHON, or build its side environment "
            f"(python -m kit.sglang.releases --side-env {version})",
        )
    if not is_listed(version):
        fix = f"derive its tables here ({derive_command(version)}), install that sglang or set $KIT_SGLANG_PYTHON"
    else:
        fix = (
            "install that sglang, set $KIT_SGLANG_PYTHON, allow the side environment build (python -m kit.sglang.releases"
            f" --side-env {version}), or store its table (python -m kit.derive.flag_scan --write {version})"
        )
    ev = {
        "reason": str(reason),
        "sglang_version": version,
        "table": nearest,
        "exact": False,
        "tables": known_versions(),
    }
    title = f"flags not checked: the kit stores no flag table for SGLang {version} and its parser could not be "
    title += f"run here (tables: {', '.join(known_versions())}; the nearest, {nearest}, is not used in its place)"
    return PARSER(title, evidence={**ev, "checked": False}, fix=fix)


# what SGLang's own parser checks beyond the recorded table
SKIPPED_WITHOUT_PARSER = (
    "value parsers the table does not name (JSON and list values are read as text)",
    "choices computed at import time (reasoning/tool-call parsers, plugins' additions)",
)


def flag_findings(
    flags: list[str], version: str | None = None, python: str | None = None, build: bool | None = None
) -> list[Finding]:
    """`launch.flag` findings for server flags: the real parser's verdict, else the recorded table's
    (with `launch.parser` saying what was skipped); an info line for flags given as prefixes."""
    from kit.sglang.flags import resolve_flags

    version = version or default_release()
    table = resolve_flags(flags, version)
    out: list[Finding] = []
    try:
        [res] = parse_argvs([flags], python=python, build=build, version=version)
        unknown, errors, judge = res["unknown"], [res["error"]] if res["error"] else [], f"SGLang {version}'s parser"
        if res["error"] and not unknown:  # it stops at the first error; the table still names the unknown flags
            unknown = table.unknown
    except KitInputError as e:
        if not table.exact:
            return [_no_table(version, table.checked, e)]
        skipped = list(SKIPPED_WITHOUT_PARSER)
        if table.unchecked:
            skipped[0] += f": {', '.join('--' + d.replace('_', '-') for d in table.unchecked)}"
        out.append(
            PARSER(
                f"SGLang {version}'s own parser could not be run; flags were checked against the kit's "
                f"recorded table of SGLang {table.checked} (prefixes, types, choices)",
                evidence={"reason": str(e), "table": table.checked, "exact": table.exact, "skipped": skipped},
                fix="install sglang, set $KIT_SGLANG_PYTHON, or allow the side environment build "
                f"(python -m kit.sglang.releases --side-env {version})",
            )
        )
        unknown = table.unknown
        errors = [err["message"] for err in table.errors]
        judge = f"SGLang {table.checked}'s flag table"
    return out + resolution_findings("SGLang", unknown, errors, judge, table.abbreviated())


def resolution_findings(
    engine: str, unknown: list[str], errors: list[str], judge: str, abbrev: list[tuple[str, str]]
) -> list[Finding]:
    """`launch.flag` for what an engine's parser (`judge`) refused: the unknown flags (the first leftover word
    where no flag is among them), its error messages, and (info) the flags given as prefixes."""
    out = [
        FLAG(
            f"{engine} does not accept {flag!r}: the server would exit at startup",
            evidence={"unknown": unknown, "judge": judge},
            fix=f"remove the flag or fix its spelling ({HELP[engine]})",
        )
        for flag in [u for u in unknown if u.startswith("-")] or unknown[:1]
    ]
    out += [
        FLAG(
            f"{engine}'s parser rejects the command: {msg}",
            evidence={"error": msg, "judge": judge},
            fix="write the full flag name" if msg.startswith("ambiguous option") else "fix the flag value",
        )
        for msg in errors
    ]
    if abbrev:
        out.append(
            FLAG(
                "flags given as prefixes, read as: " + ", ".join(f"{w.split('=', 1)[0]} -> {c}" for w, c in abbrev),
                evidence={"abbreviated": [list(x) for x in abbrev]},
                severity="info",
                fix="spell flags out: a later release adding a flag with the same prefix makes it ambiguous",
            )
        )
    return out


if __name__ == "__main__":
    print(json.dumps({k: v for k, v in parse_argvs([sys.argv[1:]])[0].items() if k != "args"}))
