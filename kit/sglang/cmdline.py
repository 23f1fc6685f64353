"""Shell text -> the one command that launches SGLang, with the environment it really gets; flag lookup.

Launch lines arrive as people write them (`A=1 && python -m sglang.launch_server ...`, `export`, `env VAR=...`,
continuations, comments, `nohup ... &`, `bash -c "..."`, `docker run -e VAR=... image python3 -m ...`). This module
reads such text as a POSIX shell would (quotes, escapes, `$VAR` / `${VAR:-x}` from the script's own assignments,
command lists, redirections), unwraps launcher prefixes (env, nohup, sudo, taskset, numactl, timeout, uv/conda run,
docker/podman run, apptainer exec, `bash -c`, ...) and hands each argv to a predicate that knows which programs are
launches (by default SGLang's entry points of that release, `kit.sglang.flags`, and `python -m kit serve`). It also
records what the launched process does *not* see: a plain `VAR=1` is an unexported shell variable, and host
variables do not cross into a container unless `-e` passes them.

    from kit.sglang.cmdline import find_launch, split_command
    shell = find_launch(text)                   # ShellLaunch: env, argv, flags_at, notes; None if no launch
    env, argv = split_command("A=1 && python3 -m sglang.launch_server --tp 8")
    kit.sglang.flags.flag_value(argv, "--tp-size")   # "8": prefixes, `=`, repeats as SGLang's argparse reads them

Nothing is run or evaluated: `$(...)` stays literal and is reported as not understood.
Run `python -m kit.sglang.cmdline < launch.sh` to see what is found.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kit.findings import KitInputError

# The seed's launch line: six NCCL variables, one SGLANG variable, TP=8 on 8x RTX PRO 6000, and the `EAGLE`
# algorithm for an EAGLE-3 draft. The notebooks lint it as their example (`launch = None`); never started as written.
SEED_LAUNCH = (
    "NCCL_PROTO=LL NCCL_ALGO=Ring NCCL_P2P_LEVEL=SYS NCCL_MAX_NCHANNELS=16 NCCL_BUFFSIZE=16777216 NCCL_NTHREADS=512 "
    "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 /root/ml-env/bin/python3 -m sglang.launch_server "
    "--model-path /shared/kimi-k2.5-int4 --trust-remote-code --tp-size 8 --mem-fraction-static 0.85 "
    "--host 0.0.0.0 --port 8000 --num-continuous-decode-steps 4 --disable-custom-all-reduce --log-level info "
    "--speculative-algorithm EAGLE --speculative-draft-model-path /data/eagle3/output_10k_sglang/4 "
    "--speculative-num-draft-tokens 5 --speculative-eagle-topk 4 --speculative-num-steps 3"
)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_OPS = ("&&", "||", ";;", ";", "|&", "|", "&", "(", ")")

# commands that neither launch nor change the launch's environment
HARMLESS = set(
    "cd pushd popd echo printf sleep mkdir wait true false : trap ulimit shift exit tee cat tail head "
    "grep ls rm cp mv ln touch chmod kill pkill nvidia-smi git curl wget pip pip3 uv huggingface-cli hf "
    "date which clear set shopt disown tmux screen".split()
)
# commands after which the launch's environment is unknown to us
OPAQUE = {"source", ".", "eval", "conda", "mamba", "micromamba", "module", "ml", "spack", "direnv"}


@dataclass
class Word:
    text: str
    quoted: bool = False  # any part quoted (an empty quoted word is still a word)
    plain: int = -1  # length of the leading unquoted, unexpanded text (-1: all of it)
    opaque: list[str] = field(default_factory=list)  # `$X`, `$(...)` left unexpanded


@dataclass
class ShellLaunch:
    """The launch found in a shell text."""

    argv: list[str]  # the launched program and its arguments
    flags_at: int  # argv[flags_at:] are the server's flags
    entry: str  # what the predicate called the entry point
    env: dict[str, str]  # every assignment the script meant for the server
    env_forms: dict[str, str]  # var -> how it was set (inline, export, env, docker -e, ...)
    unseen: dict[str, str] = field(default_factory=dict)  # var -> why the server does not see it
    notes: list[dict] = field(default_factory=list)  # what the kit could not attribute
    wrappers: list[str] = field(default_factory=list)  # launcher prefixes unwrapped, outermost first

    @property
    def server_env(self) -> dict[str, str]:
        """What the server process sees (and SGLang reads): `env` less the `unseen` variables."""
        return {k: v for k, v in self.env.items() if k not in self.unseen}


# -- lexing -----------------------------------------------------------------------------------
def _expand(text: str, j: int, variables: dict[str, str], used: set) -> tuple[int, str | None, str]:
    """At text[j] == '$': (next index, value or None when unknown here, literal source). `$(...)`/`$((...))` are
    never run; `${K:-default}` / `${K-default}` / `${K:=default}` take the default as the shell would."""
    n = len(text)
    if text.startswith("$(", j):  # `$(...)` and `$((...))`
        depth, k = 0, j + 1
        while k < n:
            depth += text[k] == "("
            depth -= text[k] == ")"
            k += 1
            if depth == 0:
                break
        return k, None, text[j:k]
    if text.startswith("${", j):
        k = text.find("}", j)
        k = n - 1 if k < 0 else k
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)(?::?([-=])(.*))?$", text[j + 2 : k], re.S)
        if not m:
            return k + 1, None, text[j : k + 1]
        name, op, default = m.groups()
        used.add(name)
        if name in variables and (variables[name] or not op):
            return k + 1, variables[name], text[j : k + 1]
        return k + 1, default if op else None, text[j : k + 1]
    m = _NAME.match(text, j + 1)
    if m:
        name = m.group(0)
        used.add(name)
        return m.end(), variables.get(name), text[j : m.end()]
    return j + 1, "$", "$"


_REDIRECTION = re.compile(r"&>>|&>|>>|>&|>\||>|<<<|<<-|<<|<&|<>|<")
_PLACEHOLDER = re.compile(r"<[A-Za-z][\w.\-]*>")


class _Lexer:
    """A POSIX-shell word splitter: quotes, escapes, `$` expansion from known variables (unknown ones kept as written
    and marked opaque), operators, redirections, comments. Each `_scan_*` consumes one construct at `self.i`."""

    def __init__(self, text: str, variables: dict[str, str], used: set):
        self.text, self.n, self.variables, self.used, self.i = text, len(text), variables, used, 0
        self._quotes = {"'": self._scan_single, '"': self._scan_double, "`": self._scan_backtick}
        self._reset()

    def _reset(self) -> None:
        self.buf: list[str] = []
        self.started = False  # a word has begun (an empty quoted string is a word)
        self.quoted = False
        self.plain = -1  # length of the word's plain (unquoted, unexpanded) prefix; -1: all of it
        self.opaque: list[str] = []

    def _flush(self) -> list[tuple[str, object]]:
        w = Word("".join(self.buf), self.quoted, self.plain, self.opaque) if (self.buf or self.started) else None
        self._reset()
        return [("word", w)] if w is not None else []

    def _unplain(self) -> None:
        if self.plain < 0:
            self.plain = len("".join(self.buf))

    def tokens(self) -> Iterator[tuple[str, object]]:
        """('word', Word) | ('op', str) | ('redir', str) | ('placeholder', str). `variables` is read lazily, so
        assignments the consumer records between commands apply to the next command."""
        text = self.text
        while self.i < self.n:
            c = text[self.i]
            if c == "\\" and self.i + 1 < self.n:
                self._scan_escape()
            elif c in self._quotes:
                self._quotes[c]()
            elif c == "$":
                yield from self._scan_dollar()
            elif c in " \t\r\n":
                yield from self._flush()
                if c == "\n":
                    yield "op", "\n"
                self.i += 1
            elif c == "#" and not self.buf and not self.started:
                k = text.find("\n", self.i)
                self.i = self.n if k < 0 else k
            elif c in "<>" or (c == "&" and text.startswith("&>", self.i)):
                yield from self._scan_redirection()
            elif op := next((o for o in _OPS if text.startswith(o, self.i)), None):
                yield from self._flush()
                yield "op", op
                self.i += len(op)
            else:
                self.buf.append(c)
                self.started = True
                self.i += 1
        yield from self._flush()
        yield "op", "\n"

    def _scan_escape(self) -> None:
        text, i = self.text, self.i
        if text[i + 1] == "\n" or text.startswith("\r\n", i + 1):  # a line continuation
            self.i += 2 if text[i + 1] == "\n" else 3
        else:
            self._unplain()
            self.buf.append(text[i + 1])
            self.started = True
            self.i += 2

    def _scan_single(self) -> None:
        self._unplain()
        k = self.text.find("'", self.i + 1)
        if k < 0:
            raise ValueError("no closing quotation")
        self.buf.append(self.text[self.i + 1 : k])
        self.started = self.quoted = True
        self.i = k + 1

    def _scan_double(self) -> None:
        """A double-quoted string: `\\$`, `\\"`, `\\\\`, `\\` newline escapes, `$` expansion, no splitting."""
        text, n = self.text, self.n
        self._unplain()
        self.started = self.quoted = True
        self.i += 1
        while True:
            if self.i >= n:
                raise ValueError("no closing quotation")
            c = text[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.i + 1 < n and text[self.i + 1] in '$`"\\\n':
                if text[self.i + 1] != "\n":
                    self.buf.append(text[self.i + 1])
                self.i += 2
                continue
            if c == "$":
                self.i, val, src = _expand(text, self.i, self.variables, self.used)
                if val is None:
                    self.opaque.append(src)
                    val = src
                self.buf.append(val)
                continue
            self.buf.append(c)
            self.i += 1

    def _scan_backtick(self) -> None:
        """A command substitution: never run, kept as written and marked opaque."""
        self._unplain()
        k = self.text.find("`", self.i + 1)
        k = self.n - 1 if k < 0 else k
        self.opaque.append(self.text[self.i : k + 1])
        self.buf.append(self.text[self.i : k + 1])
        self.started = True
        self.i = k + 1

    def _scan_dollar(self) -> list:
        """An unquoted expansion: a known value is split on whitespace like the shell's field splitting."""
        self._unplain()
        self.i, val, src = _expand(self.text, self.i, self.variables, self.used)
        if val is None:
            self.opaque.append(src)
            self.buf.append(src)
            self.started = True
            return []
        out: list = []
        for pi, part in enumerate(re.split(r"[ \t\n]+", val)):
            if pi:
                out += self._flush()
            self.buf.append(part)
            self.started = self.started or bool(part)
        return out

    def _scan_redirection(self) -> list:
        """A redirection; a preceding all-digit word is its file descriptor."""
        word = "".join(self.buf)
        fd = word if self.buf and word.isdigit() and not self.quoted else ""
        out: list = [] if fd else self._flush()
        self._reset()
        ph = None if fd else _PLACEHOLDER.match(self.text, self.i)
        if ph:  # `<model-path>` written for the reader to fill in: to the shell, two redirections
            out.append(("placeholder", ph.group(0)))
        m = _REDIRECTION.match(self.text, self.i)
        out.append(("redir", fd + m.group(0)))
        self.i = m.end()
        return out


# -- commands ---------------------------------------------------------------------------------
@dataclass
class _State:
    variables: dict[str, str] = field(default_factory=dict)  # shell variables (expansion)
    exported: dict[str, str] = field(default_factory=dict)  # what a child process inherits
    forms: dict[str, str] = field(default_factory=dict)
    unexported: dict[str, str] = field(default_factory=dict)  # plain `VAR=1` commands
    marked: set = field(default_factory=set)  # `export K` before K is set
    used: set = field(default_factory=set)  # names read by `$K` expansions
    allexport: bool = False
    notes: list[dict] = field(default_factory=list)
    launches: list[ShellLaunch] = field(default_factory=list)


def _commands(text: str, st: _State) -> Iterator[list[Word]]:
    words: list[Word] = []
    pending_redirect = False
    for kind, tok in _Lexer(text, st.variables, st.used).tokens():
        if kind == "word":
            if not pending_redirect:
                words.append(tok)
            pending_redirect = False
        elif kind == "redir":
            pending_redirect = True  # its target word is not part of the command
        elif kind == "placeholder":
            _note(st, "placeholder", tok, "a <placeholder> left unfilled: the shell reads it as two redirections")
        else:
            pending_redirect = False
            if words:
                yield words
                words = []


LaunchTest = Callable[[list[str]], tuple[str, int] | None]


def _note(st: _State, kind: str, text: str, why: str) -> None:
    st.notes.append({"kind": kind, "text": text, "why": why})


def _is_assignment(w: Word) -> bool:
    """`NAME=value` with NAME= written plainly (`A="x y"` is one; `"A=x"` is a word)."""
    return bool(_ASSIGN.match(w.text)) and (w.plain < 0 or w.text.index("=") < w.plain)


def _strip_prompt(words: list[Word]) -> list[Word]:
    if words and not words[0].quoted and words[0].text in ("$", "%", ">>>"):
        words = words[1:]
    if words and not words[0].quoted and words[0].text.startswith("!") and len(words[0].text) > 1:
        words = [Word(words[0].text[1:])] + words[1:]  # a notebook `!python -m ...` cell
    return words


def _run_command(words: list[Word], st: _State, is_launch: LaunchTest) -> None:
    words = _strip_prompt(words)
    if not words:
        return
    assigns = list(itertools.takewhile(_is_assignment, words))
    # for this command's environment only; the shell's own variables are unchanged
    prefix = dict(w.text.split("=", 1) for w in assigns)
    rest = words[len(assigns) :]
    if not rest:  # `VAR=value` on its own: a shell variable, exported only if marked so
        for k, v in prefix.items():
            st.variables[k] = v
            if k in st.exported or k in st.marked or st.allexport:
                st.forms.setdefault(k, "set -a" if st.allexport else "export")
                st.exported[k] = v
                st.unexported.pop(k, None)
            else:
                st.unexported[k] = v
        return
    argv = [w.text for w in rest]
    opaque = [o for w in rest for o in w.opaque]
    prog = os.path.basename(argv[0])
    if prog in ("export", "declare", "typeset", "local", "readonly"):
        exporting = prog == "export" or any(a.startswith("-") and "x" in a for a in argv[1:])
        for a in (a for a in argv[1:] if not a.startswith("-")):
            m = _ASSIGN.match(a)
            k, v = (m.group(1), m.group(2)) if m else (a, st.variables.get(a))
            if m:
                st.variables[k] = v
            if exporting and v is not None:
                st.exported[k], st.forms[k] = v, prog
                st.unexported.pop(k, None)
            elif exporting:
                st.marked.add(k)  # exported before being set: a later `K=v` exports
            elif m:
                st.unexported[k] = v
        return
    if prog == "unset":
        for a in argv[1:]:
            for d in (st.variables, st.exported, st.unexported):
                d.pop(a, None)
        return
    if prog == "set" and any(a in ("-a", "-o") for a in argv[1:]):
        if "-a" in argv[1:] or argv[1:3] == ["-o", "allexport"]:
            st.allexport = True
        return
    if prog == "set" and "+a" in argv[1:]:
        st.allexport = False
        return
    env = {**st.exported, **prefix}
    forms = {**{k: st.forms.get(k, "export") for k in st.exported}, **dict.fromkeys(prefix, "inline")}
    _unwrap(argv, env, forms, st, is_launch, [], opaque)


def _unwrap(argv, env, forms, st: _State, is_launch: LaunchTest, wrappers, opaque, unseen=None) -> ShellLaunch | None:
    """Peel launcher prefixes off argv until a launch (recorded in st) or a plain command."""
    unseen = dict(unseen or {})
    while argv:
        prog = os.path.basename(argv[0])
        hit = is_launch(argv)
        if hit is not None:
            return _record_launch(argv, hit, env, forms, st, wrappers, opaque, unseen)
        if prog in _SHELLS and len(argv) >= 3 and argv[1].startswith("-") and "c" in argv[1]:
            return _shell_c(argv, env, forms, st, is_launch, wrappers, unseen)
        peel = _PEELERS.get(prog)
        peeled = peel(argv, env, forms, st, unseen, wrappers) if peel else None
        if peeled is None:
            break
        if peeled is _NO_LAUNCH:
            return None
        argv, env, forms, unseen, wrappers = peeled
    if not argv:
        return None
    prog = os.path.basename(argv[0])
    if prog in OPAQUE and not (argv[-1].endswith("activate") or argv[1:2] in (["activate"], ["deactivate"])):
        _note(st, "opaque", " ".join(argv), "may change the environment; its effect is unknown here")
    elif prog not in HARMLESS and prog not in OPAQUE:
        _note(st, "command", " ".join(argv), "not a server launch; not checked")
    return None


def _record_launch(argv, hit, env, forms, st: _State, wrappers, opaque, unseen) -> ShellLaunch:
    """The launch found: its environment as the server sees it (plus shell variables it would not see)."""
    entry, flags_at = hit
    for k in st.unexported:
        if k not in env and k not in st.used:  # a variable the script itself reads is no env
            unseen.setdefault(k, "a shell variable (`K=v` on its own or before `&&`/`;`), never exported")
    full_env = {**{k: v for k, v in st.unexported.items() if k in unseen}, **env}
    full_forms = {**{k: "shell variable" for k in st.unexported if k in unseen}, **forms}
    sl = ShellLaunch(list(argv), flags_at, entry, full_env, full_forms, unseen, wrappers=list(wrappers))
    sl.notes += [{"kind": "expansion", "text": o, "why": "not defined in the text: left as written"} for o in opaque]
    st.launches.append(sl)
    return sl


def _shell_c(argv, env, forms, st: _State, is_launch: LaunchTest, wrappers, unseen) -> ShellLaunch | None:
    """`bash -c "..."`: the inner script parsed with the outer environment; its launches are the outer's."""
    prog = os.path.basename(argv[0])
    inner = _State(variables=dict(env), exported=dict(env), forms=dict(forms))
    inner.unexported = {k: v for k, v in st.unexported.items() if k not in env}
    for words in _commands(argv[2], inner):
        _run_command(words, inner, is_launch)
    st.notes.extend(inner.notes)
    for sl in inner.launches:
        sl.wrappers = wrappers + [f"{prog} -c"] + sl.wrappers
        sl.unseen = {**unseen, **sl.unseen}
        st.launches.append(sl)
    return inner.launches[0] if inner.launches else None


# a peeler takes (argv, env, forms, st, unseen, wrappers) of a wrapper command and returns them for the command it
# runs, None when argv is not that wrapper's form, or _NO_LAUNCH when the wrapper ends the search
_NO_LAUNCH = object()
_SHELLS = ("bash", "sh", "zsh", "dash")


def _peel_env(argv, env, forms, st, unseen, wrappers):
    """`env [-i] [-u K] [K=V...] CMD`."""
    j = 1
    while j < len(argv):
        a = argv[j]
        if a in ("-i", "--ignore-environment", "-"):
            env, forms = {}, {}
        elif a in ("-u", "--unset") and j + 1 < len(argv):
            env.pop(argv[j + 1], None)
            j += 1
        elif a.startswith("--unset="):
            env.pop(a.split("=", 1)[1], None)
        elif _ASSIGN.match(a):
            k, v = a.split("=", 1)
            env[k], forms[k] = v, "env"
        elif not a.startswith("-"):
            break
        j += 1
    return argv[j:], env, forms, unseen, wrappers + ["env"]


def _peel_prefix(argv, env, forms, st, unseen, wrappers):
    """`nohup`, `timeout 600`, `numactl ...`, `sudo [-E] [K=V...]`: options skipped, sudo's environment rules kept."""
    prog = os.path.basename(argv[0])
    j = _skip_options(argv, prog)
    if prog == "sudo":
        while j < len(argv) and _ASSIGN.match(argv[j]):
            k, v = argv[j].split("=", 1)
            env[k], forms[k] = v, "sudo"
            j += 1
        if "-E" not in argv[1:j] and "--preserve-env" not in argv[1:j]:
            for k in [k for k, f in forms.items() if f not in ("sudo",)]:
                unseen.setdefault(k, "sudo resets the environment (no -E)")
    return argv[j:], env, forms, unseen, wrappers + [prog]


# environment managers' `run` options that take a value
_RUNNER_VALUED = tuple(
    "-n --name -p --prefix --with --python -e --environment --env-file --project --directory --extra "
    "--group --index --index-url --from".split()
)


def _peel_runner(argv, env, forms, st, unseen, wrappers):
    """`uv run ...`, `conda run -n ENV ...` and the like."""
    if argv[1:2] != ["run"]:
        return None
    j = 2
    while j < len(argv) and argv[j].startswith("-"):
        j += 1 + (argv[j] in _RUNNER_VALUED)
    return argv[j:], env, forms, unseen, wrappers + [f"{os.path.basename(argv[0])} run"]


def _peel_container(argv, env, forms, st, unseen, wrappers):
    """`docker run|create|exec ...` (podman, nvidia-docker): `_container`."""
    if argv[1:2] not in (["run"], ["create"], ["exec"]):
        return None
    res = _container(argv, env, forms, st, unseen, wrappers)
    return _NO_LAUNCH if res is None else res


# apptainer/singularity exec|run options that take a value
_APPTAINER_VALUED = tuple(
    "-B --bind --home -H --overlay -W --workdir --pwd --app --security --network --hostname --env --env-file".split()
)


def _peel_apptainer(argv, env, forms, st, unseen, wrappers):
    """`apptainer exec|run [opts] IMAGE CMD`: APPTAINERENV_/SINGULARITYENV_ variables and `--env` reach CMD."""
    if argv[1:2] not in (["exec"], ["run"]):
        return None
    prog = os.path.basename(argv[0])
    j, prefixed = 2, ("APPTAINERENV_", "SINGULARITYENV_")
    cenv = {**env, **{k.split("_", 1)[1]: v for k, v in env.items() if k.startswith(prefixed)}}
    while j < len(argv) and argv[j].startswith("-"):
        a, val = argv[j], argv[j + 1] if j + 1 < len(argv) else None
        if a == "--env" and val is not None:
            for k, v in (kv.split("=", 1) for kv in val.split(",") if "=" in kv):
                cenv[k], forms[k] = v, f"{prog} --env"
        elif a == "--env-file" and val is not None:
            _note(st, "env-file", val, "variables in an env file were not read")
        j += 1 + (a in _APPTAINER_VALUED)
    return argv[j + 1 :], cenv, forms, unseen, wrappers + [prog]


_PREFIXES = tuple(
    "nohup exec command builtin time stdbuf nice ionice chrt taskset numactl timeout sudo srun xargs "
    "setsid unbuffer".split()
)
_RUNNERS = ("uv", "conda", "mamba", "micromamba", "poetry", "pixi", "pipenv", "hatch", "rye")
_PEELERS = {
    "env": _peel_env,
    **dict.fromkeys(_PREFIXES, _peel_prefix),
    **dict.fromkeys(_RUNNERS, _peel_runner),
    **dict.fromkeys(("docker", "podman", "nvidia-docker"), _peel_container),
    **dict.fromkeys(("apptainer", "singularity"), _peel_apptainer),
}


# docker/podman run options that take no value; every other option takes one
_DOCKER_BOOL = set(
    "-d --detach -i --interactive -t --tty --rm --privileged --init --read-only -P --publish-all "
    "--no-healthcheck --oom-kill-disable -q --quiet --sig-proxy --help --replace --tls-verify "
    "--disable-content-trust".split()
)


def _container(argv, env, forms, st: _State, unseen, wrappers):
    prog, sub, j = os.path.basename(argv[0]), argv[1], 2
    cenv: dict[str, str] = {}
    cforms: dict[str, str] = {}
    while j < len(argv) and argv[j].startswith("-") and argv[j] != "-":
        a = argv[j]
        name, inline = (a.split("=", 1) + [None])[:2] if a.startswith("--") else (a, None)
        if not a.startswith("--") and len(a) > 2:  # -it, -eVAR=1
            if a[:2] == "-e":
                name, inline = "-e", a[2:]
            elif all(f"-{ch}" in _DOCKER_BOOL for ch in a[1:]):
                j += 1
                continue
        takes = name not in _DOCKER_BOOL
        val = inline if inline is not None else (argv[j + 1] if takes and j + 1 < len(argv) else None)
        if name in ("-e", "--env") and val is not None:
            if "=" in val:
                k, v = val.split("=", 1)
                cenv[k], cforms[k] = v, f"{prog} -e"
            elif val in env:
                cenv[val], cforms[val] = env[val], f"{prog} -e (from the host)"
            else:
                _note(st, "env", f"-e {val}", "passes a host variable the text does not set")
        elif name == "--env-file" and val is not None:
            _note(st, "env-file", val, "variables in an env file were not read")
        j += 1 if (inline is not None or not takes) else 2
    if j < len(argv):
        j += 1  # the image (exec: the container name)
    for k in env:
        if k not in cenv:
            unseen.setdefault(k, f"set on the host; `{prog} {sub}` passes only -e variables into the container")
    st_env = {**{k: v for k, v in env.items() if k in unseen}, **cenv}
    st_forms = {**{k: forms.get(k, "host") for k in env if k in unseen}, **cforms}
    # host-only variables stay in the record (what the user meant), marked unseen
    return argv[j:], st_env, st_forms, unseen, wrappers + [f"{prog} {sub}"]


def _skip_options(argv: list[str], prog: str) -> int:
    """Index of the wrapped command after `prog`'s own options."""
    valued = {
        "nice": {"-n", "--adjustment"},
        "ionice": {"-c", "-n", "-p", "-t"},
        "stdbuf": {"-i", "-o", "-e"},
        "numactl": {"-C", "-N", "-m", "-p", "-i"},
        "timeout": {"-s", "--signal", "-k", "--kill-after"},
        "sudo": {"-u", "-g", "-C", "-h", "-p", "-U"},
        "srun": {"-n", "-N", "-c", "-p", "-t", "-J", "-w", "-G", "-A", "-q"},
        "time": {"-f", "-o"},
    }.get(prog, set())
    j = 1
    while j < len(argv) and argv[j].startswith("-") and argv[j] != "--":
        j += 1 + (argv[j] in valued)
    if j < len(argv) and argv[j] == "--":
        j += 1
    if j < len(argv) and (prog in ("taskset", "timeout") or (prog == "chrt" and argv[j].isdigit())):
        j += 1  # taskset's mask / cpu list, timeout's duration, chrt's priority
    return j


# -- public -----------------------------------------------------------------------------------
def sglang_launch_test(version: str | None = None) -> LaunchTest:
    """SGLang's entry points of that release, plus `python -m kit serve` (the kit's server takes SGLang's flags)."""
    from kit.sglang.flags import PYTHON_PROG, launch_entry

    def test(argv: list[str]) -> tuple[str, int] | None:
        if len(argv) >= 4 and PYTHON_PROG.match(os.path.basename(argv[0])) and argv[1:4] == ["-m", "kit", "serve"]:
            return ("python -m kit serve", 4)
        return launch_entry(argv, version)

    return test


def find_launch(
    text: str, is_launch: LaunchTest | None = None, source: str = "launch command", version: str | None = None
) -> ShellLaunch | None:
    """The first launch in a shell text (None if there is none); its notes list what was not attributed."""
    is_launch = is_launch or sglang_launch_test(version)
    st = _State()
    try:
        for words in _commands(text, st):
            _run_command(words, st, is_launch)
    except ValueError as e:
        raise KitInputError(f"{source}: cannot parse shell words ({e})")
    if not st.launches:
        return None
    first = st.launches[0]
    first.notes = st.notes + first.notes
    for other in st.launches[1:]:
        first.notes.append(
            {"kind": "launch", "text": " ".join(other.argv), "why": "a further launch; only the first is checked"}
        )
    return first


def split_command(
    command: str, source: str = "launch command", version: str | None = None
) -> tuple[dict[str, str], list[str]]:
    """(environment, argv) of the launch in a shell text (`find_launch`); for a text without one, the
    leading `VAR=value` words (and an `env` prefix) and the rest of a single command."""
    found = find_launch(command, source=source, version=version)
    if found is not None:
        return dict(found.env), list(found.argv)
    text = command.replace("\\\r\n", " ").replace("\\\n", " ").strip()
    try:
        words = shlex.split(text, comments=True)
    except ValueError as e:
        raise KitInputError(f"{source}: cannot parse shell words ({e})")
    words = words[1:] if words[:1] == ["env"] else words
    assigns = list(itertools.takewhile(_ASSIGN.match, words))
    return dict(a.split("=", 1) for a in assigns), words[len(assigns) :]


def join_command(env: dict[str, str], argv: list[str]) -> str:
    parts = [f"{k}={shlex.quote(v)}" for k, v in env.items()] + [shlex.quote(a) for a in argv]
    return " ".join(parts)


if __name__ == "__main__":
    import dataclasses
    import json
    import sys

    found = find_launch(sys.stdin.read(), source="stdin")
    print(json.dumps(dataclasses.asdict(found) if found else None, indent=1))
