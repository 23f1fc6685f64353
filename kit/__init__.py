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

from kit.findings import Finding, KitInputError, Report  # noqa: E402,F401
