"""Knowledge of SGLang releases, derived from their real source: the one place to touch for a new release.

`versions` (release type, ordering, default, which recorded release answers), `params` (speculative parameters
and SGLang's resolution of them), `loader` (+ `loader_rules.json`: what each draft class's `load_weights` does with
each key), `capture` (+ `capture_rules.json`: which target layers feed the draft's aux hidden states, per target
class), `quant` (+ `quant_rules.json`: a checkpoint's quantization setup), `parser` (SGLang's own argument parser
run on a launch line), `env_vars` (the `SGLANG_*` variables a release reads), `source` (a release's wheel, read as
text, never imported).

Nothing here imports torch or sglang. The tables are re-derived from real wheels by `kit.derive` (the maintainer's
side room, e.g. `python -m kit.derive.loader_scan VERSION`; `releases --derive` runs them all), which nothing here
imports; nor does any core module import the side modules `bundle` and `releases` (a launch needs `bundle_site`).
"""
