"""Shell command splitting. Run: python -m pytest kit/tests/test_cmdline.py"""

import pytest

from kit.findings import KitInputError
from kit.sglang.cmdline import join_command, split_command


def test_env_prefix_and_continuations():
    env, argv = split_command("NCCL_PROTO=LL A='x y' \\\n python3 -m sglang.launch_server --tp-size 8")
    assert env == {"NCCL_PROTO": "LL", "A": "x y"}
    assert argv == ["python3", "-m", "sglang.launch_server", "--tp-size", "8"]
    assert split_command(join_command(env, argv)) == (env, argv)


def test_unbalanced_quote_is_input_error():
    with pytest.raises(KitInputError, match="launch command"):
        split_command("python -m x --a 'oops")
