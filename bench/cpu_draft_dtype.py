"""Benchmark: the demo draft's data pass and training on this CPU, natively and as an AVX2-only CPU, per dtype.

Issue 23's question: does `kit train-draft` pick the dtype the CPU does well? bf16 is fast where the CPU
has native bf16 matmul (AMX, AVX512-BF16) and emulated, several times slower than fp32, elsewhere. Each
mode runs `kit train-draft` (reduced size, below) in a fresh process with its environment:

* native, `--data-dtype/--train-dtype auto` (what the kit now picks here), and the two forced dtypes;
* AVX2-only emulated with `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2` (oneDNN and ATen then use
  no AVX-512 kernels, and kit.models.cpu_flags drops the bf16 flags): `auto`, and forced bf16 (the old default).

Recorded per mode: the chosen dtypes and why (the progress line), data-pass and training seconds, generated
tokens, the load average before and after (the machine may be shared), and the flags kit.models sees.
Reduced size by default (--num-prompts 16 --gen-tokens 48 --epochs 2): the shipped demo runs 192 x 96 x 5.

    python bench/cpu_draft_dtype.py [--num-prompts 16 --gen-tokens 48 --epochs 2] > docs/results/cpu_draft_dtype.json

Prints one JSON document (last line).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _run import emit, load_avg, run_timed

AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
MODES = [
    ("native", {}, "auto"),
    ("native", {}, "float32"),
    ("native", {}, "bfloat16"),
    ("avx2_emulated", AVX2, "auto"),
    ("avx2_emulated", AVX2, "bfloat16"),
]


def lscpu_flags() -> list[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return line.split(":", 1)[1].split()
    return []


def run_mode(cpu: str, env_extra: dict, dtype: str, a, cache: Path) -> dict:
    env = {**os.environ, **env_extra, "KIT_CACHE_DIR": str(cache), "PYTHONUNBUFFERED": "1"}
    for k in ("KIT_CPU_FLAGS", *AVX2):
        if k not in env_extra:
            env.pop(k, None)
    args = ["--num-prompts", str(a.num_prompts), "--gen-tokens", str(a.gen_tokens), "--gen-batch",
            str(a.num_prompts), "--epochs", str(a.epochs), "--batch-size", str(a.batch_size),
            "--data-dtype", dtype, "--train-dtype", dtype, "--force", "--json"]  # fmt: skip
    probe = "from kit.models import cpu_flags, pick_dtype, pick_threads; import json; " \
            "f = cpu_flags(); print(json.dumps({'bf16_flags': sorted(x for x in f if 'bf16' in x), " \
            "'avx512': any(x.startswith('avx512') for x in f), 'auto': pick_dtype('auto', 'cpu'), " \
            "'threads': pick_threads(0)}))"  # fmt: skip
    seen = json.loads(subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                                     check=True).stdout.strip().splitlines()[-1])  # fmt: skip
    load0 = load_avg()
    p = run_timed([sys.executable, "-m", "kit", "train-draft", *args], env=env, ok=None)
    row = {"cpu": cpu, "env": env_extra, "requested": dtype, "kit_sees": seen, "wall_s": round(p.seconds, 1),
           "loadavg_before": load0, "loadavg_after": load_avg()}  # fmt: skip
    if p.returncode:
        row["error"] = p.stderr.strip().splitlines()[-1:]
        return row
    prov = json.loads(
        (Path(json.loads(p.stdout.strip().splitlines()[-1])["draft"]) / "kit_provenance.json").read_text()
    )
    row.update(
        data_dtype=prov["data_dtype"],
        train_dtype=prov["train_dtype"],
        threads=prov["threads"],
        data_time_s=prov["data_time_s"],
        train_time_s=prov["train_time_s"],
        generated_tokens=prov["generated_tokens"],
        final_loss=prov["epochs"][-1]["loss"],
    )
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--gen-tokens", type=int, default=48)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8)
    a = ap.parse_args()

    from kit.models import embedded_dir

    src = embedded_dir()  # converted once; every mode reads this copy
    with tempfile.TemporaryDirectory(prefix="kit-dtype-") as tmp:
        cache = Path(tmp)
        (cache / src.name).symlink_to(src)
        rows = [run_mode(cpu, env, dt, a, cache) for cpu, env, dt in MODES]
    doc = {
        "bench": "cpu_draft_dtype",
        "cpu": platform.processor() or platform.machine(),
        "model_name": next(
            (
                l.split(":", 1)[1].strip()
                for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")
            ),
            None,
        ),  # fmt: skip
        "cores": os.cpu_count(),
        "lscpu_flags": lscpu_flags(),
        "python": platform.python_version(),
        "size": {
            "num_prompts": a.num_prompts,
            "gen_tokens": a.gen_tokens,
            "epochs": a.epochs,
            "batch_size": a.batch_size,
            "full_demo": "192 prompts x 96 tokens, 5 epochs, batch 16",
        },  # fmt: skip
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "runs": rows,
    }
    emit(doc)


if __name__ == "__main__":
    main()
