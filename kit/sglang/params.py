"""Speculative parameters (steps, topk, draft tokens) and how SGLang resolves them: the one home of that rule.

SGLang's `_handle_eagle_family` (`srt/arg_groups/speculative_hook.py`, 0.5.23) decides what a launch
really runs:

* all three unset: `_auto_choose_speculative_params` picks them from the target class (5-4-8 for
  LlamaForCausalLM and Grok, else 3-1-4; STANDALONE always 3-1-4);
* steps unset but topk or draft tokens set: its `assert` fails at startup;
* steps set, topk unset: the server crashes comparing `None > 1`;
* topk 1 (a chain): draft tokens are replaced by steps + 1, with a warning;
* topk > 1 (a tree): `organize_draft_results` takes `torch.topk` of the `num_draft_tokens - 1` best of
  `topk + (steps - 1) * topk**2` candidates, so draft tokens must lie in 2 .. that + 1.

The oracle, the reference server, the launch checks and the sweeps all call `resolve`; the field names
are SGLang's own `ServerArgs` names, from the CLI flag to the innermost function.

    >>> resolve(SpecParams(3, 1, 8)).params
    SpecParams(speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
    >>> resolve(SpecParams(), target_arch="LlamaForCausalLM").params.label()
    '5-4-8'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kit.findings import KitInputError

# speculative algorithms that run an EAGLE-style draft worker (NEXTN is SGLang's alias of EAGLE)
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
# target classes for which `_auto_choose_speculative_params` picks 5-4-8 (everything else: 3-1-4)
AUTO_TREE_TARGETS = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")
AUTO_TREE = (5, 4, 8)
AUTO_CHAIN = (3, 1, 4)


@dataclass(frozen=True)
class SpecParams:
    """One launch's speculative parameters; None = not given on the command line."""

    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None

    def given(self) -> dict[str, int | None]:
        return {
            "speculative_num_steps": self.speculative_num_steps,
            "speculative_eagle_topk": self.speculative_eagle_topk,
            "speculative_num_draft_tokens": self.speculative_num_draft_tokens,
        }

    def is_unset(self) -> bool:
        return all(v is None for v in self.given().values())

    def label(self) -> str:
        return "-".join("auto" if v is None else str(v) for v in self.given().values())

    def resolved(self, algorithm: str = "EAGLE3", target_arch: str | None = None) -> SpecParams:
        """The parameters SGLang runs; a launch SGLang would refuse raises KitInputError."""
        res = resolve(self, algorithm, target_arch)
        if res.params is None:
            raise KitInputError(f"speculative parameters {self.label()}: {res.errors()[0].title}")
        return res.params


@dataclass(frozen=True)
class Issue:
    severity: str  # "error": SGLang refuses or crashes; "warning": it changes what was asked; "info"
    title: str
    fix: str
    evidence: dict[str, Any] = field(default_factory=dict)


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


def auto_params(algorithm: str | None, target_arch: str | None) -> SpecParams:
    """`_auto_choose_speculative_params`: what SGLang picks when none of the three is given."""
    if (algorithm or "").upper() == "STANDALONE":
        return SpecParams(*AUTO_CHAIN)
    return SpecParams(*(AUTO_TREE if target_arch in AUTO_TREE_TARGETS else AUTO_CHAIN))


def resolve(given: SpecParams, algorithm: str | None = "EAGLE3", target_arch: str | None = None) -> Resolution:
    """SGLang's resolution of the three parameters, with every refusal and silent change it makes."""
    s, k, n = given.speculative_num_steps, given.speculative_eagle_topk, given.speculative_num_draft_tokens
    ev = given.given()
    if given.is_unset():
        a = auto_params(algorithm, target_arch)
        unknown = "" if target_arch else " (3-1-4 unless the target is LlamaForCausalLM/Grok: 5-4-8)"
        note = Issue(
            "info",
            f"steps/topk/draft tokens unset: SGLang auto-chooses {a.label()}{unknown}",
            "set all three explicitly to know what you benchmark",
            {"target_arch": target_arch, "auto": a.label()},
        )
        return Resolution(a, auto=True, issues=(note,))
    if s is None:
        return Resolution(
            None,
            issues=(
                Issue(
                    "error",
                    "topk/draft tokens set but --speculative-num-steps unset: SGLang's assert fails at startup",
                    "set --speculative-num-steps too, or none of the three",
                    ev,
                ),
            ),
        )
    if k is None:
        return Resolution(
            None,
            issues=(
                Issue(
                    "error",
                    "--speculative-eagle-topk unset while steps are set: SGLang crashes comparing None > 1",
                    "set --speculative-eagle-topk (1 = chain)",
                    ev,
                ),
            ),
        )
    if s < 1 or k < 1:
        return Resolution(None, issues=(Issue("error", "steps and topk must be >= 1", "use positive values", ev),))
    if k == 1:
        issues: tuple[Issue, ...] = ()
        if n is not None and n != s + 1:
            issues = (
                Issue(
                    "warning",
                    f"topk 1: SGLang replaces num_draft_tokens={n} by steps+1={s + 1}",
                    f"--speculative-num-draft-tokens {s + 1}",
                    ev,
                ),
            )
        return Resolution(SpecParams(s, 1, s + 1), issues=issues)
    top = max_draft_tokens(s, k)
    if n is None:
        return Resolution(
            None,
            issues=(
                Issue(
                    "error",
                    "topk > 1 needs --speculative-num-draft-tokens",
                    f"set it between 2 and {top}",
                    ev,
                ),
            ),
        )
    if n < 2 or n > top:
        return Resolution(
            None,
            issues=(
                Issue(
                    "error",
                    f"num_draft_tokens={n} outside 2..{top} for steps={s}, topk={k}: "
                    "torch.topk fails in organize_draft_results",
                    f"use at most {top} draft tokens, or more steps/topk",
                    {**ev, "max_draft_tokens": top},
                ),
            ),
        )
    return Resolution(SpecParams(s, k, n))
