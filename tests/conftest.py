"""Fixtures shared by the integration tests: the drafts they run, each made at most once per session.

`shipped_draft` is the kit's shipped demo draft (`kit.models.shipped_draft`, SHA-256 checked): what a
test needs when it needs a trained draft. `trained_quick_draft` is the one draft the suite trains, the
CPU path `kit demo --train-draft --quick` takes (`kit.reference.train.ensure_demo_draft`), kept in the
kit cache so a second session trains nothing. Run: python -m pytest tests/
"""

import pytest


@pytest.fixture(scope="session")
def shipped_draft():
    from kit.models import shipped_draft

    return shipped_draft()


@pytest.fixture(scope="session")
def trained_quick_draft():
    from kit.reference.train import ensure_demo_draft

    return ensure_demo_draft(quick=True)
