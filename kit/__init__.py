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

# torch's OpenMP threads spin while they wait for each other; on a small or shared machine a spinning
# thread starves the one it waits for, and a 2-thread forward ran 10x slower than a 1-thread one on a
# busy 2-core box. Waiting passively (libgomp reads this once, when torch loads) keeps 2 threads at
# least as fast as 1; a value the user set wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from kit.findings import Finding, KitInputError, Report  # noqa: E402,F401
