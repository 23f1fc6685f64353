"""The OpenMP wait policy `import kit` picks, and `kit demo` pinning it for the processes it starts."""

import os
import subprocess
import sys


def policy_in_child(then: str = "import torch", **env) -> str:
    """The policy a child process ends with after `import kit` and then `then` (by default, loading torch)."""
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "KIT_OMP_WAIT_POLICY_AUTO")}
    code = (
        f"import kit, os; {then}; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('KIT_OMP_WAIT_POLICY_AUTO'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=base | env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_a_users_policy_wins():
    assert policy_in_child(OMP_WAIT_POLICY="ACTIVE") == "ACTIVE None"


def test_a_pinned_choice_is_kept_as_it_is():
    assert policy_in_child(KIT_OMP_WAIT_POLICY_AUTO="pinned") == "None pinned"  # spin, no new sample
    assert policy_in_child(KIT_OMP_WAIT_POLICY_AUTO="pinned", OMP_WAIT_POLICY="PASSIVE") == "PASSIVE pinned"


def test_an_unpinned_choice_is_made_again(monkeypatch):
    import kit

    got = policy_in_child(KIT_OMP_WAIT_POLICY_AUTO="1", OMP_WAIT_POLICY="PASSIVE")
    assert got.endswith(" 1") and got.split()[0] in ("None", "PASSIVE")  # sampled afresh in the child
    monkeypatch.setenv("KIT_OMP_WAIT_POLICY_AUTO", "1")
    kit.pin_omp_wait_policy()
    assert os.environ["KIT_OMP_WAIT_POLICY_AUTO"] == "pinned"


def test_the_choice_waits_for_torch():
    """`import kit` alone samples nothing (the verbs without torch pay no 50 ms); loading torch makes the choice."""
    assert policy_in_child(then="pass") == "None None"
    got = policy_in_child(then="import json")
    assert got == "None None"
    got = policy_in_child()
    assert got.endswith(" 1") and got.split()[0] in ("None", "PASSIVE")
