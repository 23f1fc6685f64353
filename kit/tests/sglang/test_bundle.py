"""The offline SGLang bundle's file selection, patch and manifest, on synthetic wheels built in the test (CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from kit.findings import KitInputError
from kit.sglang import bundle as B

ELEMENTWISE = (
    "import torch\n\ntry:\n    import flashinfer.norm as _flashinfer_norm\n\n    _has_flashinfer = True\n"
    "except ImportError:\n    _has_flashinfer = False\n\n\ndef rmsnorm(x):\n    return _has_flashinfer\n"
)
KERNEL_MEMBERS = {
    "sgl_kernel/__init__.py": "",
    "sgl_kernel/elementwise.py": ELEMENTWISE,
    "sgl_kernel/sampling.py": ELEMENTWISE.replace("norm", "sampling"),
    "sgl_kernel/sm90/common_ops.abi3.so": "sm90-binary",
    "sgl_kernel/sm100/common_ops.abi3.so": "sm100-binary",
    "sgl_kernel/flash_ops.abi3.so": "fa3" * 100,
    "sgl_kernel/spatial_ops.abi3.so": "spatial",
    "triton_kernels/matmul.py": "",
    "sglang_kernel-9.9.dist-info/METADATA": "Name: sglang-kernel\n",
    "sglang_kernel-9.9.data/scripts/tool": "#!/bin/sh\n",
}
SGLANG_MEMBERS = {
    "sglang/__init__.py": "",
    "sglang/utils.py": "from IPython.display import HTML, display\n",
    "sglang/srt/server/_core.cpython-312-x86_64-linux-gnu.so": "core",
    "sglang/multimodal_gen/runtime/x.py": "",
    "sglang-1.0.dist-info/METADATA": "Name: sglang\nRequires-Dist: sglang-kernel==9.9\nRequires-Dist: numpy\n",
    "sglang-1.0.dist-info/entry_points.txt": "[console_scripts]\nsglang = sglang.cli.main:main\n",
    "sglang/cli/__init__.py": "",
    # like SGLang's, the entry starts a child by spawn, which runs the script again in the child
    "sglang/cli/main.py": (
        "import multiprocessing\nimport sys\n\n\ndef child():\n    pass\n\n\ndef main():\n"
        "    p = multiprocessing.get_context('spawn').Process(target=child)\n    p.start()\n    p.join()\n"
        "    print(sys.argv[0], *sys.argv[1:], p.exitcode)\n    return 3\n"
    ),
}
KERNEL_RULE = B.WheelRule(
    "sglang-kernel",
    "9.9",
    drop=(("sgl_kernel/flash_ops*.so", "FA3"), ("sgl_kernel/sm*/*", "other arch")),
    keep=("sgl_kernel/{arch}/*",),
    patch=(("sgl_kernel/elementwise.py", B.NO_FLASHINFER_ROUTING), ("sgl_kernel/sampling.py", B.NO_FLASHINFER_ROUTING)),
    arch_dir="sgl_kernel/{arch}/common_ops*.so",
)
RELEASE = B.Release(
    version="1.0",
    python="3.12",
    wheels=(
        B.WheelRule(
            "sglang", "1.0", drop=(("sglang/srt/server/_core*.so", "opt-in"), ("sglang/multimodal_gen/*", "mm"))
        ),
        KERNEL_RULE,
    ),
    launch_flags=("--attention-backend", "triton"),
    not_carried=(("flash-attn", "no fa3"),),
)


def _wheel(path: Path, members: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, text in members.items():
            z.writestr(name, text)
    return path


def _wheels(tmp_path: Path, kernel_version: str = "9.9") -> Path:
    d = tmp_path / "wheels"
    d.mkdir()
    _wheel(d / "sglang-1.0-cp312-cp312-manylinux_2_34_x86_64.whl", SGLANG_MEMBERS)
    _wheel(d / f"sglang_kernel-{kernel_version}-cp310-abi3-manylinux2014_x86_64.whl", KERNEL_MEMBERS)
    return d


def test_select_keeps_only_the_chosen_arch():
    kept, dropped = B.select_members(list(KERNEL_MEMBERS), KERNEL_RULE, "sm90")
    assert "sgl_kernel/sm90/common_ops.abi3.so" in kept
    assert "sgl_kernel/spatial_ops.abi3.so" in kept and "sglang_kernel-9.9.dist-info/METADATA" in kept
    why = {d["member"]: d["why"] for d in dropped}
    assert why["sgl_kernel/sm100/common_ops.abi3.so"] == "other arch"
    assert why["sgl_kernel/flash_ops.abi3.so"] == "FA3"
    assert "sglang_kernel-9.9.data/scripts/tool" in why  # console scripts do not travel
    kept100, _ = B.select_members(list(KERNEL_MEMBERS), KERNEL_RULE, "sm100")
    assert "sgl_kernel/sm100/common_ops.abi3.so" in kept100 and "sgl_kernel/sm90/common_ops.abi3.so" not in kept100


def test_select_refuses_an_arch_the_wheel_was_not_built_for():
    members = [m for m in KERNEL_MEMBERS if "sm100" not in m]
    with pytest.raises(KitInputError, match="not built for sm100"):
        B.select_members(members, KERNEL_RULE, "sm100")


def test_data_purelib_lands_in_site_packages():
    assert B.install_path("x-1.data/purelib/x/a.py") == "x/a.py"
    assert B.install_path("x-1.data/scripts/x") is None
    assert B.install_path("x/a.py") == "x/a.py"


def test_patch_forces_flag_off_and_refuses_unknown_source():
    out = B.patch_source(ELEMENTWISE, "sgl_kernel/elementwise.py")
    ns: dict = {}
    exec(compile(out.replace("import torch\n", ""), "e", "exec"), ns)  # flashinfer missing here either way
    assert ns["_has_flashinfer"] is False
    assert "_has_flashinfer = True" not in out and B.PATCH_LINE in out
    with pytest.raises(KitInputError, match="found 0"):
        B.patch_source("x = 1\n", "sgl_kernel/sampling.py")


TOPK = """if _is_cuda:
    try:
        from flashinfer.fused_moe import fused_topk_deepseek as _fused_topk_deepseek

        def fused_topk_deepseek(*a):
            return _fused_topk_deepseek(*a)

    except ImportError:
        fused_topk_deepseek = None
"""


def test_grouped_topk_patch_leaves_sglang_on_its_triton_router():
    """SGLang takes flashinfer's JIT noaux_tc kernel only when fused_topk_deepseek is not None."""
    out = B.patch_source(TOPK, "sglang/srt/layers/moe/topk.py", B.NO_FLASHINFER_TOPK)
    ns: dict = {"_is_cuda": True}
    exec(compile(out, "topk", "exec"), ns)
    assert ns["fused_topk_deepseek"] is None
    with pytest.raises(KitInputError, match="found 0"):
        B.patch_source(TOPK.replace("fused_topk_deepseek as", "other as"), "topk.py", B.NO_FLASHINFER_TOPK)


def test_the_0517_patches_match_its_real_source():
    """Each SourcePatch of the 0.5.17 table matches exactly once in that release's file (sglang's own wheel)."""
    from kit.sglang.source import source_text

    rule = next(w for w in B.RELEASES["0.5.17"].wheels if w.project == "sglang")
    try:
        texts = {m: source_text("0.5.17", m.removeprefix("sglang/")) for m, _ in rule.patch}
    except KitInputError as e:
        pytest.skip(f"SGLang 0.5.17 source not available: {e}")
    for member, patch in rule.patch:
        assert "raise ImportError" in B.patch_source(texts[member], member, patch)


def test_pins_from_metadata_checked_against_table():
    pins = B.parse_pins(SGLANG_MEMBERS["sglang-1.0.dist-info/METADATA"] + "Requires-Dist: fi[cu13]==0.6.1\n")
    assert pins == {"sglang-kernel": "9.9", "fi": "0.6.1"}
    assert B.check_pins(pins, RELEASE) == []
    assert B.check_pins({"sglang-kernel": "9.8"}, RELEASE) == ["sglang-kernel: table has 9.9, sglang 1.0 pins 9.8"]


def test_release_0_5_17_table_is_consistent():
    r = B.release_for("0.5.17")
    assert {B.normalize(w.project) for w in r.wheels} >= {"sglang", "sglang-kernel", "flashinfer-python", "xgrammar"}
    assert len({B.normalize(w.project) for w in r.wheels}) == len(r.wheels)  # one version of each
    with pytest.raises(KitInputError, match="no bundle table"):
        B.release_for("0.0.1")
    names = {B.normalize(w.project) for w in B.wheel_rules(r, deep_gemm=False, bench_serving=True)}
    assert "sgl-deep-gemm" not in names and {"datasets", "multiprocess"} <= names


def test_every_bundle_release_has_its_launch_flags_in_the_core_table():
    """A launch here reads a bundle's flags from `kit.sglang.bundle_site` (the core never imports this builder):
    every release row carries that table's flags, and the table names no release without a row."""
    from kit.sglang.bundle_site import LAUNCH_FLAGS

    assert {v: r.launch_flags for v, r in B.RELEASES.items()} == LAUNCH_FLAGS


def test_build_and_install_roundtrip(tmp_path):
    cfg = B.BuildConfig(sglang_version="1.0", arch="sm90", out=str(tmp_path / "out"), wheels=str(_wheels(tmp_path)))
    tar_path = B.build_bundle(cfg, release=RELEASE, log=lambda *_: None)
    assert tar_path.name == "sglang-1.0-sm90-cp312.tar.xz"
    manifest = json.loads((tmp_path / "out" / "sglang-1.0-sm90-cp312.manifest.json").read_text())
    paths = {f["path"] for f in manifest["files"]}
    assert "sgl_kernel/sm90/common_ops.abi3.so" in paths and "IPython/display.py" in paths
    assert not {"sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/flash_ops.abi3.so"} & paths
    assert "sglang/srt/server/_core.cpython-312-x86_64-linux-gnu.so" not in paths
    kernel = next(w for w in manifest["wheels"] if w["project"] == "sglang-kernel")
    assert kernel["patched"] == ["sgl_kernel/elementwise.py", "sgl_kernel/sampling.py"]
    assert {d["why"] for d in kernel["dropped"]} >= {"FA3", "other arch"}
    assert manifest["bundle_bytes"] == tar_path.stat().st_size
    with tarfile.open(tar_path) as t:
        assert B.MANIFEST_MEMBER in t.getnames()

    target = tmp_path / "site"
    B.install_bundle(B.InstallConfig(bundle=str(tar_path), target=str(target)), log=lambda *_: None)
    assert "_has_flashinfer = False" in (target / "sgl_kernel" / "elementwise.py").read_text()
    assert (target / "sgl_kernel" / "sm90" / "common_ops.abi3.so").read_text() == "sm90-binary"
    with pytest.raises(KitInputError, match="not empty"):
        B.install_bundle(B.InstallConfig(bundle=str(tar_path), target=str(target)), log=lambda *_: None)
    # the release's own entry, as pip would write it: runs under this interpreter without PYTHONPATH
    script = target / B.SCRIPTS_DIR / "sglang"
    assert script.read_text().startswith(f"#!{sys.executable}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([str(script), "serve", "--port", "1"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert (run.returncode, run.stdout) == (3, "sglang serve --port 1 0\n"), run.stderr


def test_build_refuses_table_that_disagrees_with_pins(tmp_path):
    wheels = _wheels(tmp_path)
    meta = SGLANG_MEMBERS["sglang-1.0.dist-info/METADATA"].replace("9.9", "9.8")
    _wheel(next(wheels.glob("sglang-1.0*.whl")), {**SGLANG_MEMBERS, "sglang-1.0.dist-info/METADATA": meta})
    cfg = B.BuildConfig(sglang_version="1.0", arch="sm90", out=str(tmp_path / "out"), wheels=str(wheels))
    with pytest.raises(KitInputError, match="disagrees with its pins"):
        B.build_bundle(cfg, release=RELEASE, log=lambda *_: None)
    assert not list((tmp_path / "out").glob("*.tar.xz"))  # no partial output


def test_cli_bad_version_exits_2(tmp_path, capsys):
    assert B.main(["build", "--sglang-version", "0.0.1", "--out", str(tmp_path)]) == 2
    assert "no bundle table" in capsys.readouterr().err
    assert B.main(["build", "--vllm-version", "0.0.1", "--out", str(tmp_path)]) == 2
    assert "--vllm-version 0.0.1: no bundle table" in capsys.readouterr().err


def test_the_vllm_table_keeps_what_vllm_serve_imports_and_pins_what_vllm_pins():
    rel = B.release_for("0.5.17", vllm_version="0.24.0")
    assert (rel.project, rel.version, rel.ipython_stub) == ("vllm", "0.24.0", False)
    vllm = next(w for w in rel.wheels if w.project == "vllm")
    fa2, fa3 = (f"vllm/vllm_flash_attn/_vllm_fa{n}_C.abi3.so" for n in (2, 3))
    members = ["vllm/_C_stable_libtorch.abi3.so", fa2, fa3, "vllm/vllm-rs", "vllm/third_party/pynvml.py"]
    members += ["vllm/third_party/deep_gemm/_C.cpython-312-x86_64-linux-gnu.so"]
    kept, dropped = B.select_members(members, vllm, "sm90")
    # each imported at start on a GPU host: without FA2 or FA3, vllm_flash_attn's import fails every model's
    assert kept == ["vllm/_C_stable_libtorch.abi3.so", fa3, "vllm/third_party/pynvml.py"]
    assert len(dropped) == 3
    # openai 3's client, fastapi's and uvicorn's imports (bench/bundle_imports.py); the kit's own
    assert {"httpx2", "annotated-doc", "click", "orjson", "gguf"} <= {w.project for w in rel.wheels}
    # vllm 0.24.0's own == pins (METADATA), as the build checks them against the wheel
    pins = {
        "diskcache": "5.6.3",
        "lark": "1.2.2",
        "depyf": "0.20.0",
        "apache-tvm-ffi": "0.1.9",
        "outlines-core": "0.2.14",
    }
    assert B.check_pins(pins, rel) == []
