"""Knowledge of SGLang releases, derived from their real source: the one place to touch for a new release.

* `versions`: the release type, its ordering, the default release, and which recorded release's rules
  answer for a requested one.
* `params`: speculative parameters (steps, topk, draft tokens) and how SGLang resolves them.
* `loader` (+ `loader_rules.json`): what `load_weights` of each EAGLE-3 draft class does with each key.
* `capture` (+ `capture_rules.json`, derived by `kit.derive.capture_scan`): which target layers SGLang captures for
  the draft's aux hidden states, per target class.
  `bare_forward` there names classes whose forward never sees the layers their setter writes.
* `quant` (+ `quant_rules.json`): how each release sets a checkpoint's quantization up from its
  `hf_quant_config.json`, the draft's included (its own `_parse_quant_hf_config`, executed).
* `parser`: SGLang's own argument parser (`ServerArgs.add_cli_args`) run on a launch line.
* `env_vars`: the `SGLANG_*` environment variables a release reads.
* `source`: a release's wheel, read as text (never imported): for the scanners, and for a release the tables lack.

Nothing here imports torch or sglang; `python -m kit.derive.loader_scan VERSION` and
`python -m kit.derive.capture_scan VERSION` re-derive the tables from a real wheel (the scanners live in
`kit.derive`, the maintainer's side room, which nothing here imports; `releases --derive` runs them). The side
modules `bundle` (the offline bundle's builder) and `releases` (the release list and its derivation) are imported
by no core module either; what a launch needs of a bundle is `bundle_site`.
"""
