"""Launch lines as people write them: shell forms, the environment the server really gets, entry points.

Run: python -m pytest kit/tests/sglang/test_cmdline.py -q
"""

from pathlib import Path

import pytest

from kit.findings import KitInputError
from kit.sglang.cmdline import find_launch, join_command, split_command

SEED = (Path(__file__).parents[1] / "data" / "seed_launch.sh").read_text()
LAUNCH = ["python", "-m", "sglang.launch_server"]


def test_env_prefix_and_continuations():
    env, argv = split_command("NCCL_PROTO=LL A='x y' \\\n python3 -m sglang.launch_server --tp-size 8")
    assert env == {"NCCL_PROTO": "LL", "A": "x y"}
    assert argv == ["python3", "-m", "sglang.launch_server", "--tp-size", "8"]
    assert split_command(join_command(env, argv)) == (env, argv)


def test_unbalanced_quote_is_input_error():
    with pytest.raises(KitInputError, match="launch command"):
        split_command("python -m sglang.launch_server --a 'oops")


def test_seed_launch_with_comment_line():
    sl = find_launch(SEED)
    assert sl.entry == "python -m sglang.launch_server" and sl.argv[0] == "/root/ml-env/bin/python3"
    assert len(sl.env) == 7 and set(sl.env_forms.values()) == {"inline"} and not sl.unseen and not sl.notes
    assert sl.argv[sl.flags_at :][:2] == ["--model-path", "/shared/kimi-k2.5-int4"]


def test_and_chain_of_assignments_is_found_and_flagged_unexported():
    """The line from an SGLang PR: `A=1 && B=1 && python -m ...`; in a shell A and B are not exported."""
    text = (
        "SGLANG_ENABLE_SPEC_V2=1 && SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 && "
        "python -m sglang.launch_server --model-path X --speculative-algo EAGLE3"
    )
    sl = find_launch(text)
    assert sl.argv[:3] == LAUNCH and sl.argv[-2:] == ["--speculative-algo", "EAGLE3"]
    assert sl.env == {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert set(sl.unseen) == set(sl.env) and "never exported" in sl.unseen["SGLANG_ENABLE_SPEC_V2"]
    # the same with `;`, exported, or under `set -a`: seen
    for exported in (
        "export SGLANG_ENABLE_SPEC_V2=1; export SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\n",
        "set -a; SGLANG_ENABLE_SPEC_V2=1; SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\n",
        "export SGLANG_ENABLE_SPEC_V2 SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN\n"
        "SGLANG_ENABLE_SPEC_V2=1 SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1\n",
    ):
        sl = find_launch(exported + "python -m sglang.launch_server --model-path X")
        assert sl.env == {"SGLANG_ENABLE_SPEC_V2": "1", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
        assert not sl.unseen, exported


def test_script_with_exports_variables_redirects_and_background():
    text = """#!/bin/bash
# serve the draft
export NCCL_DEBUG=INFO
MODEL=/models/llama   # a script variable, read below
PORT=30001
CUDA_VISIBLE_DEVICES=0,1 nohup python3 -u -m sglang.launch_server \\
    --model-path "$MODEL" --port ${PORT} --host ${HOST:-127.0.0.1} \\
    --tp 2 > server.log 2>&1 &
sleep 30 && curl localhost:30001/health
"""
    sl = find_launch(text)
    assert sl.argv[:4] == ["python3", "-u", "-m", "sglang.launch_server"] and sl.wrappers == ["nohup"]
    assert sl.argv[sl.flags_at :] == [
        "--model-path",
        "/models/llama",
        "--port",
        "30001",
        "--host",
        "127.0.0.1",
        "--tp",
        "2",
    ]
    assert sl.env == {"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert not sl.unseen and not sl.notes  # MODEL/PORT are read by the script, not meant for the server


def test_unquoted_variable_splits_into_flags():
    sl = find_launch('ARGS="--tp 8 --port 30000"\nsglang serve org/model $ARGS')
    assert sl.entry == "sglang serve" and sl.argv[sl.flags_at :] == ["org/model", "--tp", "8", "--port", "30000"]


def test_env_prefix_command_and_docker():
    sl = find_launch("env -u HOME CUDA_VISIBLE_DEVICES=3 python3 -m sglang.launch_server --model-path m")
    assert sl.env == {"CUDA_VISIBLE_DEVICES": "3"} and sl.env_forms["CUDA_VISIBLE_DEVICES"] == "env"
    text = (
        "export HF_TOKEN=hf_x NCCL_DEBUG=INFO\n"
        "docker run --gpus all --shm-size 32g -p 30000:30000 -v ~/.cache:/root/.cache --ipc=host -it \\\n"
        "  -e SGLANG_ENABLE_SPEC_V2=1 --env HF_TOKEN --env=NCCL_P2P_LEVEL=NVL \\\n"
        "  lmsysorg/sglang:latest python3 -m sglang.launch_server --model-path m --host 0.0.0.0"
    )
    sl = find_launch(text)
    assert sl.wrappers == ["docker run"] and sl.argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert sl.env == {"SGLANG_ENABLE_SPEC_V2": "1", "HF_TOKEN": "hf_x", "NCCL_P2P_LEVEL": "NVL", "NCCL_DEBUG": "INFO"}
    assert set(sl.unseen) == {"NCCL_DEBUG"} and "only -e variables" in sl.unseen["NCCL_DEBUG"]


def test_bash_c_inside_a_container_and_sglang_serve():
    text = "docker run --rm img bash -lc 'SGLANG_X=2 sglang serve org/m --tp 2 --model-type llm'"
    sl = find_launch(text)
    assert sl.wrappers == ["docker run", "bash -c"] and sl.entry == "sglang serve"
    assert sl.env == {"SGLANG_X": "2"} and sl.argv[2:] == ["org/m", "--tp", "2", "--model-type", "llm"]


def test_what_cannot_be_attributed_is_noted():
    text = (
        "source ./env.sh && cd /work && python convert.py && "
        "python -m sglang.launch_server --model-path $(cat path.txt) --served-model-name $NAME"
    )
    sl = find_launch(text)
    kinds = {(n["kind"], n["text"]) for n in sl.notes}
    assert ("opaque", "source ./env.sh") in kinds and ("command", "python convert.py") in kinds
    assert ("expansion", "$(cat path.txt)") in kinds and ("expansion", "$NAME") in kinds
    assert not any(n["text"].startswith("cd") for n in sl.notes)  # harmless, attributed
    activate = find_launch("source .venv/bin/activate && python -m sglang.launch_server --model-path m")
    assert activate.notes == []


def test_no_launch_and_prompts():
    assert find_launch("python -m vllm.entrypoints.openai.api_server --model m") is None
    assert find_launch("ls -l; echo hi") is None
    assert find_launch("$ python -m sglang.launch_server --model-path m").argv[:3] == LAUNCH
    assert find_launch("!python -m sglang.launch_server --model-path m").argv[:3] == LAUNCH
    # a non-launch text still splits the old way for callers that take any command
    assert split_command("A=1 ls -l") == ({"A": "1"}, ["ls", "-l"])


def test_second_launch_is_noted():
    sl = find_launch("sglang serve a --port 1 &\nsglang serve b --port 2 &\nwait")
    assert sl.argv[2] == "a" and [n["kind"] for n in sl.notes] == ["launch"]


def test_an_unfilled_placeholder_is_noted_and_a_plain_redirection_is_not():
    sl = find_launch(
        "python3 -m sglang.launch_server \\\n  --model <target-model-path> \\\n  --speculative-algorithm EAGLE3 \\\n"
        "  --speculative-draft-model-path <draft-model-path> --speculative-num-steps 3\n"
    )
    assert [n["text"] for n in sl.notes if n["kind"] == "placeholder"] == ["<target-model-path>", "<draft-model-path>"]
    assert sl.argv[3:5] == ["--model", "EAGLE3"]  # what a shell runs: the placeholder's flag took the next word
    plain = find_launch("python -m sglang.launch_server --model-path /m < in.txt > log 2>&1")
    assert not plain.notes and plain.argv[-1] == "/m"
