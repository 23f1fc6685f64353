"""Tests of kit.sglang; `derive_or_skip` and `source_or_skip` serve the tests that re-derive a rule table from a real
release's source."""

import pytest

from kit.findings import KitInputError


def derive_or_skip(derive, version):
    """`derive(version)`, or skip the test when that release's source cannot be had (offline, no cached wheel)."""
    try:
        return derive(version)
    except KitInputError as e:
        pytest.skip(f"sglang {version} source unavailable offline: {e}")


def source_or_skip(version):
    """The folder of that release's source (`kit.sglang.source.source_root`, never downloaded), or skip the test."""
    from kit.sglang.source import source_root

    try:
        return source_root(version, download=False)
    except KitInputError as e:
        pytest.skip(f"sglang {version} source not cached: {e}")
