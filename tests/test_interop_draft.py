"""The kit's reference draft (kit.reference.draft) computes the same logits as the real speculators 0.9.0 and
SpecForge 0.2.0 forward passes, for the same weights and inputs.

The checkpoints and the two libraries' forward functions come from tests/test_interop_checkpoints.py
(MAKE builds a tiny verifier plus one genuine checkpoint per library; FORWARD's helpers run each
library's own forward) inside the `speculators` side venv (kit.venvs). The kit loads the same
directories in this interpreter (speculators layout through kit.checkpoint.convert) and must agree.
"""

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.interop, pytest.mark.slow]

DUMP = r"""
torch.save({"spec": speculators_logits(w / "spec")[0], "sf": specforge_logits(w / "sf")[0], "ids": ids, "hid": hid},
           w / "ref_logits.pt")
print("dumped")
"""


@pytest.fixture(scope="module")
def ref():
    from test_interop_checkpoints import FORWARD, MAKE

    from kit.venvs import ensure_venv

    py = str(ensure_venv("speculators"))
    w = Path(tempfile.mkdtemp(prefix="kit-interop-draft-"))
    try:
        for script in (MAKE, FORWARD.split("res = {}")[0] + DUMP):
            r = subprocess.run([py, "-c", script, str(w)], capture_output=True, text=True, timeout=900)
            assert r.returncode == 0, r.stderr[-3000:]
        yield w
    finally:
        shutil.rmtree(w, ignore_errors=True)


@pytest.mark.parametrize("name", ["spec", "sf"])
def test_equal_logits(ref, name):
    import torch

    from kit.reference.draft_io import load_draft

    data = torch.load(ref / "ref_logits.pt")
    d = load_draft(ref / name)  # no target: the checkpoint's own embedding
    T = data["ids"].shape[1]
    with torch.no_grad():
        logits, _, _ = d(data["ids"], data["hid"], torch.arange(T)[None])
    want = data[name]
    assert logits.shape == want.shape
    err = float((logits - want).abs().max())
    assert err <= 1e-4 * max(1.0, float(want.abs().max())), err
    assert torch.equal(logits.argmax(-1), want.argmax(-1))
    assert d.load_report["dropped"] == [], d.load_report
