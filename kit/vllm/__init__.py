"""Knowledge of vLLM releases, derived from their real wheels: the room for what each vLLM release does with EAGLE-3.

`rules` (+ `rules.json`, `releases.json`): per release, the speculative methods `--speculative-config` accepts, the
speculative CLI flags, the target architectures that emit EAGLE-3 aux hidden states and the default aux layer ids,
the EAGLE-3 draft classes and what their `load_weights` does to checkpoint names, the draft tensor-parallel rule,
speculators-format detection, and the spec-decode Prometheus counters. The table is derived by
`kit.derive.vllm_scan` (the maintainer's side room), which nothing here imports. `runner` (which model runner serves
a deployment) and `loader` (a checkpoint's keys through the release's draft loader) apply it to one deployment;
`cmdline` reads a `vllm serve` line, `checks` turns all of it into doctor's findings. Nothing here imports vllm or
torch.
"""
