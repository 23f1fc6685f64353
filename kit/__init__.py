"""kit — diagnose and measure an EAGLE-3 draft before and while SGLang serves it.

Two flows share this package:

* static diagnosis: config.json files, safetensors headers, a launch command and the
  environment become *findings* (code, severity, title, evidence, fix) — no GPU, no weights;
* measurement: a target, a draft and speculative parameters become accept lengths and
  throughput — offline (the oracle) or against a live server (SGLang or the CPU reference).

`import kit` is cheap and safe on a CPU laptop: heavy imports (torch, transformers, sglang)
happen inside the functions that need them. Run `python -m kit --help` for the verbs.
"""

__version__ = "0.1.0"

import os as _os  # noqa: E402
import sys as _sys  # noqa: E402
import time as _time  # noqa: E402


def _busy_cores(sample_s: float = 0.05) -> float | None:
    """Cores busy now with work at normal priority, from /proc/stat over `sample_s` (None without it). Niced
    work counts as free: it yields its core to ours (the kit's background builds run niced, `kit.demo.prefetch`)."""

    def read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[1] + v[3] + (v[4] if len(v) > 4 else 0)  # total, nice + idle + iowait

    try:
        t0, i0 = read()
        _time.sleep(sample_s)
        t1, i1 = read()
        cores = len(_os.sched_getaffinity(0))
    except (OSError, ValueError, AttributeError):
        return None
    return cores * (1 - (i1 - i0) / max(t1 - t0, 1))


def _other_work() -> bool:
    """Whether other work at normal priority holds half a core or more now (False where it cannot be read)."""
    return (_busy_cores() or 0.0) >= 0.5


def _choose_omp_wait_policy() -> None:
    """Set OMP_WAIT_POLICY (libgomp reads it once, as torch loads) unless the user set it: PASSIVE when other work
    holds half a core or more, else libgomp's spinning default. Spinning is fastest on a quiet machine and worst
    on a busy one: on a 2-core AMD EPYC the reference server's 3-token verify took 106 ms spinning vs 188 ms
    passive when quiet, 447 ms vs 165 ms beside one busy process. A parent kit's choice (marked "1") is made
    again here, unless the parent pinned it for its children (marked "pinned": servers started together would
    each read their loading siblings as other work)."""
    mark = _os.environ.get("KIT_OMP_WAIT_POLICY_AUTO")
    if mark != "pinned" and ("OMP_WAIT_POLICY" not in _os.environ or mark == "1"):
        _os.environ.pop("OMP_WAIT_POLICY", None)
        if _other_work():
            _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
        _os.environ["KIT_OMP_WAIT_POLICY_AUTO"] = "1"


class _BeforeTorch:
    """A meta-path finder that makes the choice just before torch is first imported, so a verb that never loads
    torch (`kit doctor`, `kit inspect`) pays no 50 ms sample."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name == "torch":
            _choose_if_pending()
        return None  # the real finders import it


def _choose_if_pending() -> None:
    if _BeforeTorch in _sys.meta_path:  # removed first: it fires once
        _sys.meta_path.remove(_BeforeTorch)
        _choose_omp_wait_policy()


if "torch" in _sys.modules:  # too late for libgomp; choose anyway, for the processes this one starts
    _choose_omp_wait_policy()
elif _BeforeTorch not in _sys.meta_path:
    _sys.meta_path.insert(0, _BeforeTorch)


def pin_omp_wait_policy() -> None:
    """Keep this process's OpenMP wait policy (chosen as torch loaded, or now) for every process it starts."""
    _choose_if_pending()
    if _os.environ.get("KIT_OMP_WAIT_POLICY_AUTO") == "1":
        _os.environ["KIT_OMP_WAIT_POLICY_AUTO"] = "pinned"


from kit.findings import Finding, KitInputError, Report  # noqa: E402,F401
