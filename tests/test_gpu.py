"""GPU paths, run on a CUDA machine (an H200 for the recorded figures): `python -m pytest -m gpu tests/test_gpu.py`.

CI has no GPU, so every test here is skipped there; they exist so the GPU-only code paths
(CUDA probing, bf16 decoding on the device, the reference server on CUDA) cannot rot unseen.
"""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_env_probe_reads_the_real_gpu(tmp_path):
    from kit.env.machine import gpu_list

    rec = tmp_path / "facts.json"
    r = subprocess.run(
        [sys.executable, "-m", "kit", "env", "--json", "--record", str(rec)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    codes = {f["code"] for f in doc["findings"]}
    assert "env.no_gpu" not in codes and "env.gpu" in codes
    gpus = gpu_list(json.loads(rec.read_text()))
    major, minor = torch.cuda.get_device_capability(0)
    assert gpus and gpus[0]["cc"] == (major, minor) and gpus[0]["memory_mib"] > 1000


@pytest.mark.parametrize("topk,ndt", [(1, 4), (4, 8)])
def test_speculative_equals_greedy_on_cuda_bf16(topk, ndt):
    from kit.reference.speculate import Wiring, greedy_generate, speculative_generate
    from kit.sglang.params import SpecParams
    from kit.tests.tinymodels import tiny_draft, tiny_target

    torch.set_default_device("cuda")
    try:
        t = tiny_target(dtype=torch.bfloat16).cuda()
        d = tiny_draft(t, dtype=torch.bfloat16).cuda()
        ids = [5, 17, 33, 2, 9]
        g = greedy_generate(t, ids, 24, None)
        s = speculative_generate(t, d, ids, 24, SpecParams(3, topk, ndt), Wiring(), None)
        assert list(s.tokens) == list(g.tokens)
        assert s.verify_steps >= 1 and all(1 <= a <= 4 for a in s.accept_lengths)
    finally:
        torch.set_default_device("cpu")


def test_reference_server_on_cuda(tmp_path):
    import httpx

    from kit.serving.process import ServerProcess
    from kit.tests.tinyserve import build_pair

    target, draft = build_pair(tmp_path)
    argv = [
        sys.executable,
        "-m",
        "kit",
        "serve",
        "--model-path",
        str(target),
        "--device",
        "cuda",
        "--dtype",
        "bfloat16",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        str(draft),
        "--speculative-num-steps",
        "3",
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        "4",
        "--port",
        "31877",
    ]
    with ServerProcess(argv, port=31877, log_file=str(tmp_path / "log")) as srv:
        srv.wait_ready(timeout=300)
        r = httpx.post(
            srv.base_url + "/generate", json={"text": "hello", "sampling_params": {"max_new_tokens": 16}}, timeout=120
        ).json()
        assert r["meta_info"]["completion_tokens"] > 0 and r["meta_info"]["spec_verify_ct"] >= 1
