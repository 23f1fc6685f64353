"""Speculative parameters (steps, topk, draft tokens) and how SGLang resolves them: the one home of that rule.

SGLang's `_handle_eagle_family` (`srt/arg_groups/speculative_hook.py`, 0.5.23) decides what a launch
really runs:

* all three unset: `_auto_choose_speculative_params` picks them from the target class (5-4-8 for
  LlamaForCausalLM and Grok, else 3-1-4; STANDALONE always 3-1-4; older releases differ: `AUTO_RULES`);
* steps unset but topk or draft tokens set: its `assert` fails at startup;
* steps set, topk unset: the server crashes comparing `None > 1`;
* topk 1 (a chain): draft tokens are replaced by steps + 1, with a warning;
* topk > 1 (a tree): `organize_draft_results` takes `torch.topk` of the `num_draft_tokens - 1` best of
  `topk + (steps - 1) * topk**2` candidates, so draft tokens must lie in 2 .. that + 1;
* topk > 1, from 0.5.13: unless draft tokens >= steps + 1 the server crashes while it starts, at the verify of
  the first request it runs (its warm-up), and never reports ready (`VERIFY_SHAPE`, derived from each release's
  source by `kit.derive.verify_scan`).

The oracle, the reference server, the launch checks and the sweeps all call `resolve`; the field names
are SGLang's own `ServerArgs` names, from the CLI flag to the innermost function.

    >>> resolve(SpecParams(3, 1, 8)).params
    SpecParams(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    >>> resolve(SpecParams(), target_arch="LlamaForCausalLM").params.label()
    '5-4-8'
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kit.findings import Code, KitInputError
from kit.sglang.versions import Version, default_release, pick_recorded

# the finding codes this module declares (kit.codes collects them into docs/findings.md)
SECTION = "launch/process/logs: notebook 04"
SPEC_PARAMS = Code(
    "launch.spec_params",
    SECTION,
    "error",
    (
        "steps/topk/draft tokens partly set (SGLang asserts or crashes), draft tokens outside "
        "2..1+topk+(steps-1)·topk², or EAGLE/EAGLE3 without a draft path; warning: topk 1 with draft tokens ≠"
        " steps+1 (SGLang overrides), speculative flags without an algorithm; info: what SGLang auto-chooses "
        "when all unset"
    ),
    "set all three (e.g. 3-1-4) or none; add `--speculative-draft-model-path`",
)
SPEC_VERIFY = Code(
    "launch.spec_verify",
    SECTION,
    "error",
    (
        "a tree (topk > 1) with draft tokens ≤ steps: SGLang ≥ 0.5.13 crashes while it starts, never ready: its "
        "first request (`srt/entrypoints/http_server.py`: the warm-up `/generate`, `_execute_server_warmup`, or with "
        "`--skip-server-warmup` the first `/health` probe, a one-token generate) runs a verify, which raises "
        "`RuntimeError: The expanded size of the tensor (N) must match the existing size (steps+1)` in "
        "`_compact_accept_to_front` (0.5.13-0.5.15 `eagle_worker_v2.py`, 0.5.16+ `eagle_worker_common.py`: the "
        "accepted path, `accept_index` rows steps+1 wide, is copied into the first slots of each request's N "
        "draft-token block). Derived per release from the real function body (`kit.derive.verify_scan`, rule "
        "`kit.sglang.params.VERIFY_SHAPE`); CUDA-graph capture does not reach it (it captures the target's forward "
        "only). 0.5.12 and older run trees on the v1 worker, unaffected. `kit serve` refuses the same values alike"
    ),
    "`--speculative-num-draft-tokens` ≥ steps+1 (e.g. 3-2-4), or fewer steps",
)

# speculative algorithms that run an EAGLE-style draft worker (NEXTN is SGLang's alias of EAGLE)
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
AUTO_TREE = (5, 4, 8)
AUTO_CHAIN = (3, 1, 4)


@dataclass(frozen=True)
class AutoRule:
    """`_auto_choose_speculative_params` of a release: the triple unlisted target classes get, the classes that
    get the other one, and whether STANDALONE always gets AUTO_CHAIN."""

    default: tuple[int, int, int]
    others: tuple[str, ...]  # the classes that get the triple `default` is not
    standalone_chain: bool = True

    def describe(self) -> str:
        """'3-1-4 unless the target is LlamaForCausalLM/Grok1ForCausalLM/...: 5-4-8' (for an unknown target)."""
        other = AUTO_CHAIN if self.default == AUTO_TREE else AUTO_TREE
        label = "-".join(map(str, self.default))
        if not self.others:
            return f"{label} for every target"
        return f"{label} unless the target is {'/'.join(self.others)}: {'-'.join(map(str, other))}"


_DEEPSEEK = ("DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM")
_GPTOSS_BAILING = ("GptOssForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM")
_DEEPSEEK_GPTOSS_BAILING = ("DeepseekV32ForCausalLM", *_DEEPSEEK, *_GPTOSS_BAILING)
_MISTRAL = ("MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "MiMoV2FlashForCausalLM")
# per release, from the first release that has it (the newest record not after a release answers); derived
# from each release's source by `kit.derive.auto_scan`, checked by kit/tests/sglang/test_auto_scan.py.
# Until 0.5.7 every class not listed gets 5-4-8; from 0.5.8 only Llama and Grok do.
AUTO_RULES: dict[str, AutoRule] = {
    "0.4.5": AutoRule(AUTO_TREE, (), standalone_chain=False),
    "0.4.7": AutoRule(AUTO_TREE, _DEEPSEEK, standalone_chain=False),
    "0.5.1": AutoRule(AUTO_TREE, (*_DEEPSEEK, "GptOssForCausalLM"), standalone_chain=False),
    "0.5.2": AutoRule(AUTO_TREE, (*_DEEPSEEK, "GptOssForCausalLM")),
    "0.5.3": AutoRule(AUTO_TREE, _DEEPSEEK_GPTOSS_BAILING),
    "0.5.7": AutoRule(AUTO_TREE, (*_DEEPSEEK_GPTOSS_BAILING, "Glm4MoeForCausalLM", *_MISTRAL)),
    "0.5.8": AutoRule(AUTO_CHAIN, ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")),
}


def auto_rule(sglang_version: str | None = None) -> AutoRule:
    """The AUTO_RULES record that answers for that release (default: installed, else DEFAULT_RELEASE)."""
    return AUTO_RULES[pick_recorded(sglang_version, AUTO_RULES).checked]


# The verify step's shape assumption for trees (topk > 1), per release (SPEC_VERIFY: the crash, versions, files):
# `out.view(bs, nd)[:, :s1] = gathered.view(bs, s1)` raises whenever nd < steps + 1. From 0.5.16 it is called by
# _finalize_accept_tree_path from run_eagle_verify (`finalize_tree_path and ... topk > 1`; EAGLE/EAGLE3/STANDALONE
# pass True). `kit.derive.verify_scan` runs the real function body over a grid and finds exactly {topk > 1, draft
# tokens <= steps} in 0.5.13-0.5.23; kit/tests/sglang/test_verify_scan.py re-derives it from the wheels.
VERIFY_SHAPE = {
    "since": "0.5.13",
    "function": "_compact_accept_to_front",
    "files": {"0.5.13": "srt/speculative/eagle_worker_v2.py", "0.5.16": "srt/speculative/eagle_worker_common.py"},
}


# SGLANG_ENABLE_SPEC_V2 (the overlap-scheduled worker) with a tree (topk > 1), per release, as
# `ServerArgs._handle_speculative_decoding` (srt/server_args.py) decides it:
#   0.5.5-0.5.6   the variable (default False) turns the overlap worker on and nothing stops topk > 1: the
#                 server starts and the first decode fails on tensor sizes (sglang issues #13352, #14077)
#   0.5.7-0.5.10  set, with topk > 1 it raises ValueError("Spec v2 currently only supports topk = 1 for
#                 speculative decoding.") at startup
#   0.5.11-0.5.12 it defaults to True; topk > 1 falls back to the v1 worker ("Spec v2 is used ... because spec
#                 v2 currently only supports topk = 1" is the reason logged), no error
#   0.5.13-0.5.16 the v2 worker is the only one and runs trees (see VERIFY_SHAPE for its shape rule)
#   0.5.17-0.5.23 the variable is no longer read (`speculative_hook.py` logs "SGLANG_ENABLE_SPEC_V2 has been
#                 removed")
SPEC_V2_TOPK_REFUSED = ("0.5.5", "0.5.10")  # first and last release where it fails
SPEC_V2_TOPK_STARTUP_ERROR = "0.5.7"  # from here on it fails at startup, not at the first decode
SPEC_V2_RUNS_TREES = "0.5.13"  # from here on the v2 worker runs trees


@dataclass(frozen=True)
class SpecParams:
    """One launch's speculative parameters; None = not given on the command line."""

    speculative_num_steps: int | None = field(default=None, metadata={"help": "--speculative-num-steps"})
    speculative_eagle_topk: int | None = field(default=None, metadata={"help": "--speculative-eagle-topk"})
    speculative_num_draft_tokens: int | None = field(default=None, metadata={"help": "--speculative-num-draft-tokens"})

    def given(self) -> dict[str, int | None]:
        return asdict(self)

    def is_unset(self) -> bool:
        return all(v is None for v in self.given().values())

    def label(self) -> str:
        return "-".join("auto" if v is None else str(v) for v in self.given().values())

    def resolved(
        self, algorithm: str = "EAGLE3", target_arch: str | None = None, sglang_version: str | None = None
    ) -> SpecParams:
        """The parameters SGLang runs; a launch SGLang would refuse (or crash on) raises KitInputError."""
        res = resolve(self, algorithm, target_arch, sglang_version)
        if res.params is None:
            raise KitInputError(f"speculative parameters {self.label()}: {res.errors()[0].title}")
        return res.params


@dataclass(frozen=True)
class Issue:
    severity: str  # "error": SGLang refuses or crashes; "warning": it changes what was asked; "info"
    title: str
    fix: str
    evidence: dict[str, Any] = field(default_factory=dict)
    code: str = SPEC_PARAMS.code  # the finding code a launch check reports it under


@dataclass(frozen=True)
class Resolution:
    params: SpecParams | None  # what SGLang runs; None when it would not start
    auto: bool = False  # chosen by `_auto_choose_speculative_params`
    issues: tuple[Issue, ...] = ()

    def errors(self) -> list[Issue]:
        return [i for i in self.issues if i.severity == "error"]


def max_draft_tokens(speculative_num_steps: int, speculative_eagle_topk: int) -> int:
    """The largest num_draft_tokens a tree of that shape can fill (candidates + the root)."""
    k = speculative_eagle_topk
    return k + (speculative_num_steps - 1) * k * k + 1


def auto_params(algorithm: str | None, target_arch: str | None, sglang_version: str | None = None) -> SpecParams:
    """`_auto_choose_speculative_params` of that release: what SGLang picks when none of the three is given."""
    rule = auto_rule(sglang_version)
    if rule.standalone_chain and (algorithm or "").upper() == "STANDALONE":
        return SpecParams(*AUTO_CHAIN)
    other = AUTO_CHAIN if rule.default == AUTO_TREE else AUTO_TREE
    return SpecParams(*(other if target_arch in rule.others else rule.default))


def verify_shape_issue(
    speculative_num_steps: int,
    speculative_eagle_topk: int,
    speculative_num_draft_tokens: int,
    sglang_version: str | None,
) -> Issue | None:
    """`launch.spec_verify`: a tree whose accepted path (steps + 1 tokens) does not fit in its draft tokens
    crashes SGLang >= VERIFY_SHAPE["since"] at its first verify (see VERIFY_SHAPE)."""
    s, k, n = speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens
    version, fn, files = sglang_version or default_release(), VERIFY_SHAPE["function"], VERIFY_SHAPE["files"]
    if k <= 1 or n >= s + 1 or Version.parse(version) < Version.parse(VERIFY_SHAPE["since"]):
        return None
    return Issue(
        "error",
        f"steps={s}, topk={k}, num_draft_tokens={n}: SGLang {version} crashes while it starts, and the server "
        "never reports ready: the first request it runs (its warm-up /generate, or with --skip-server-warmup "
        "the first /health probe, a one-token generate) runs a verify, whose "
        f"{VERIFY_SHAPE['function']} cannot fit the accepted path, steps+1={s + 1} wide, in {n} draft tokens "
        f"('The expanded size of the tensor ({n}) must match the existing size ({s + 1})')",
        f"--speculative-num-draft-tokens {s + 1} or more, or --speculative-num-steps {n - 1}",
        {
            **SpecParams(s, k, n).given(),
            "sglang": version,
            "source": f"{files[pick_recorded(version, files).checked]} {fn}",
        },
        code=SPEC_VERIFY.code,
    )


def spec_v2_refuses_tree(speculative_eagle_topk: int | None, sglang_version: str | None) -> bool:
    """Does that release fail with SGLANG_ENABLE_SPEC_V2 and this topk? (SPEC_V2_TOPK_REFUSED)"""
    v = Version.parse(sglang_version or default_release())
    first, last = (Version.parse(x) for x in SPEC_V2_TOPK_REFUSED)
    return (speculative_eagle_topk or 1) > 1 and first <= v <= last


def _refused(title: str, fix: str, evidence: dict) -> Resolution:
    return Resolution(None, issues=(Issue("error", title, fix, evidence),))


def resolve(
    given: SpecParams,
    algorithm: str | None = "EAGLE3",
    target_arch: str | None = None,
    sglang_version: str | None = None,
) -> Resolution:
    """SGLang's resolution of the three parameters, with every refusal, crash and silent change it makes
    (`sglang_version`: the release whose verify path judges them; default: installed, else DEFAULT_RELEASE)."""
    s, k, n = given.speculative_num_steps, given.speculative_eagle_topk, given.speculative_num_draft_tokens
    ev = given.given()
    if given.is_unset():
        a = auto_params(algorithm, target_arch, sglang_version)
        unknown = "" if target_arch else f" ({auto_rule(sglang_version).describe()})"
        note = Issue(
            "info",
            f"steps/topk/draft tokens unset: SGLang auto-chooses {a.label()}{unknown}",
            "set all three explicitly to know what you benchmark",
            {"target_arch": target_arch, "auto": a.label()},
        )
        return Resolution(a, auto=True, issues=(note,))
    if s is None:
        return _refused(
            "topk/draft tokens set but --speculative-num-steps unset: SGLang's assert fails at startup",
            "set --speculative-num-steps too, or none of the three",
            ev,
        )
    if k is None:
        return _refused(
            "--speculative-eagle-topk unset while steps are set: SGLang crashes comparing None > 1",
            "set --speculative-eagle-topk (1 = chain)",
            ev,
        )
    if s < 1 or k < 1:
        return _refused("steps and topk must be >= 1", "use positive values", ev)
    if k == 1:
        issues: tuple[Issue, ...] = ()
        if n is not None and n != s + 1:
            msg = f"topk 1: SGLang replaces num_draft_tokens={n} by steps+1={s + 1}"
            issues = (Issue("warning", msg, f"--speculative-num-draft-tokens {s + 1}", ev),)
        return Resolution(SpecParams(s, 1, s + 1), issues=issues)
    top = max_draft_tokens(s, k)
    if n is None:
        return _refused("topk > 1 needs --speculative-num-draft-tokens", f"set it between 2 and {top}", ev)
    if n < 2 or n > top:
        return _refused(
            f"num_draft_tokens={n} outside 2..{top} for steps={s}, topk={k}: "
            "torch.topk fails in organize_draft_results",
            f"use at most {top} draft tokens, or more steps/topk",
            {**ev, "max_draft_tokens": top},
        )
    crash = verify_shape_issue(s, k, n, sglang_version)
    if crash is not None:
        return Resolution(None, issues=(crash,))
    return Resolution(SpecParams(s, k, n))
