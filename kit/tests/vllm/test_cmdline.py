"""A vLLM launch line read through the kit's one shell reader (kit.sglang.cmdline.find_launch + kit.vllm.cmdline):
both entry forms, `--speculative-config` JSON as the shell hands it over, the legacy flags, a malformed JSON, and the
same deployment in SGLang's names (kit.serving.launch.parse_launch).

Run: python -m pytest -q -n 0 kit/tests/vllm/test_cmdline.py
"""

import pytest

from kit.findings import KitInputError
from kit.serving.launch import parse_launch, spec_from_command
from kit.sglang.cmdline import find_launch
from kit.vllm.cmdline import launch_test, read_argv

SPEC = '{"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}'


def read(text):
    found = find_launch(text, launch_test)
    assert found is not None, text
    return found, read_argv(found.argv)


def test_vllm_serve_line_is_the_sglang_deployment():
    found, v = read(f"vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2 --speculative-config '{SPEC}' --port 8001")
    assert (found.entry, v.target, v.method, v.draft, v.tp, v.draft_tp) == (
        "vllm serve",
        "meta-llama/Llama-3.1-8B-Instruct",
        "eagle3",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        2,
        None,
    )
    spec = spec_from_command(f"vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 2 --speculative-config '{SPEC}'")
    assert (spec.model_path, spec.speculative_algorithm, spec.speculative_draft_model_path, spec.tp_size) == (
        "meta-llama/Llama-3.1-8B-Instruct",
        "EAGLE3",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        2,
    )
    assert (spec.speculative_num_steps, spec.speculative_eagle_topk, spec.speculative_num_draft_tokens) == (3, 1, 4)


def test_api_server_entry_with_underscores_and_equals():
    text = f"python3 -m vllm.entrypoints.openai.api_server --model /m/t --speculative_config='{SPEC}' --dtype=float16"
    found, v = read(text)
    assert found.entry == "python -m vllm.entrypoints.openai.api_server" and v.target == "/m/t"
    assert v.method == "eagle3" and v.flags["--dtype"] == "float16"
    _, spec, shell = parse_launch(text)
    assert spec.python == "python3" and spec.extra_args == ["--dtype", "float16"] and not shell
    # the flags as vLLM's argparse receives them: its own rewriting done, the model (a positional) left out
    _, v = read("vllm serve T --max_model_len=8 --speculative-config.method eagle3 --enforce-eager -tp 2")
    assert v.args == ["--max-model-len=8", "--speculative-config", "{}", "--enforce-eager", "-tp", "2"]


def test_json_through_the_shell_machinery():
    """Env prefixes, a shell variable holding the JSON, `bash -c` with escaped quotes, the dotted form."""
    script = f"export CUDA_VISIBLE_DEVICES=0,1\nSPEC='{SPEC}'\nnohup vllm serve T --speculative-config \"$SPEC\" &"
    found, v = read(script)
    assert v.method == "eagle3" and found.env["CUDA_VISIBLE_DEVICES"] == "0,1" and "nohup" in found.wrappers
    _, v = read('bash -c "vllm serve T --speculative-config \'{\\"method\\": \\"eagle\\", \\"model\\": \\"D\\"}\'"')
    assert (v.method, v.draft) == ("eagle", "D")
    _, v = read("vllm serve T --speculative-config.method eagle3 --speculative-config.num_speculative_tokens 2")
    assert v.spec == {"method": "eagle3", "num_speculative_tokens": 2}


def test_legacy_flags_fold_into_the_config():
    _, v = read(
        "vllm serve T --speculative-model D --num-speculative-tokens 5 --speculative-draft-tensor-parallel-size 1"
    )
    assert v.legacy == ["--speculative-model", "--num-speculative-tokens", "--speculative-draft-tensor-parallel-size"]
    assert (v.draft, v.spec["num_speculative_tokens"], v.draft_tp, v.method) == ("D", 5, 1, None)


def test_malformed_json_is_one_line_naming_the_problem():
    # double quotes around JSON that holds double quotes: the shell hands vLLM `{method: eagle3}`
    _, v = read('vllm serve T --speculative-config "{"method": "eagle3"}"')
    assert v.problem.startswith("--speculative-config is not JSON (Expecting property name enclosed in double quotes")
    assert "\n" not in v.problem and v.spec == {}
    assert read("vllm serve T --speculative-config '[1]'")[1].problem.startswith("--speculative-config is list JSON")


def test_no_launch_still_says_so():
    with pytest.raises(KitInputError, match="no SGLang launch"):
        parse_launch("vllm bench serve --model T")


def test_the_line_is_read_as_the_judged_release_reads_it():
    line = 'vllm serve T --speculative-config \'{"method": "eagle3", "model": "D", "num_speculative_tokens": 2}\''
    assert parse_launch(line, vllm_version="0.10.2")[1].speculative_num_steps == 2
    with pytest.raises(KitInputError, match="vLLM 0.0.1 is not in the kit's vLLM table"):
        parse_launch(line, vllm_version="0.0.1")
    assert parse_launch("python -m sglang.launch_server --model-path T", vllm_version="0.0.1")  # no vLLM line
