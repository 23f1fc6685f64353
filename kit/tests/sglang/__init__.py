"""Tests of kit.sglang; `derive_or_skip` serves every test that re-derives a rule table from a real release's source."""

import pytest

from kit.findings import KitInputError


def derive_or_skip(derive, version):
    """`derive(version)`, or skip the test when that release's source cannot be had (offline, no cached wheel)."""
    try:
        return derive(version)
    except KitInputError as e:
        pytest.skip(f"sglang {version} source unavailable offline: {e}")
