"""The maintainer's side room: the scanners that derive `kit.sglang`'s per-release tables from each release's wheel.

What a release does (its flags, its aux capture, what it auto-chooses, which trees its verify step crashes on) is
read by `kit.sglang` from recorded tables and rules; the code that derives them from SGLang's real source runs only
when a release is added or a table re-checked, never while the kit diagnoses, launches or measures. It lives
here, beside the runtime rather than in it (as tzdata's build tools stay out of zoneinfo): no core module imports
`kit.derive` (tests/test_architecture.py), and the scanners import `kit.sglang`, never the reverse. On a user's
machine `python -m kit.sglang.releases --derive V` runs them for a release newer than the tables.

* `flag_scan`: the flag table (`kit/sglang/server_flags.json`), by running each release's real parser once.
* `capture_scan`: the aux-capture rules (`kit/sglang/capture_rules.json`), method bodies executed on probe ids.
* `auto_scan`: `_auto_choose_speculative_params` read as data (checked against `kit.sglang.params.AUTO_RULES`).
* `verify_scan`: the verify step's crash set (checked against `kit.sglang.params.VERIFY_SHAPE`).

    python -m kit.derive.flag_scan --write V...        # re-derive and store the flag rows of these releases
    python -m kit.derive.capture_scan --write          # every release in the loader table
    python -m kit.derive.auto_scan V                   # print what V auto-chooses, as JSON
    python -m kit.derive.verify_scan V                 # print V's verify-shape derivation, as JSON

Wheels are downloaded once into the kit cache (`kit.sglang.source`); docs/architecture.md ("A new SGLang
release") walks the whole procedure.
"""
