"""pytest's settings that apply to every test path (kit/tests and tests): how many workers run the suite.

The suite runs in parallel (pyproject's `-n auto --dist loadfile`: pytest-xdist, each test file on one
worker, so a file's module fixtures are built once): one worker per core, at most four. Most of a
test's wall time is a subprocess, a server or a pip install waiting, and the kit's caches are filled
under a lock (`kit.models.cache_lock`), so two workers needing one entry build it once. `-n 0` runs
serially, e.g. to debug one test:

    python -m pytest -n 0 kit/tests/test_cli.py

Every test runs with HF_HUB_OFFLINE=1 (set below, before huggingface_hub is imported).
"""

import os

# a side environment's parser daemon (kit.sglang.parser) started by a test ends a minute after the last parse
os.environ.setdefault("KIT_PARSER_IDLE_S", "60")
# no test reaches the Hugging Face hub: huggingface_hub refuses every request (a test of the network path
# turns it off for itself, against its loopback stand-in for the hub: kit/tests/checkpoint/test_hub.py)
os.environ["HF_HUB_OFFLINE"] = "1"


def pytest_xdist_auto_num_workers(config):
    return max(1, min(4, len(os.sched_getaffinity(0))))
