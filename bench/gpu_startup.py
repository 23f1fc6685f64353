"""Startup failures and per-request acceptance on a real server: what `kit launch` reports, and how fast.

Two launches of a tiny random target + EAGLE-3 draft (`kit.tests.tinyserve`, built in a temp dir, no
download): one whose draft config claims a target width its fc was not trained for (SGLang's scheduler
dies loading it; the parent logs its SIGQUIT line, then sleeps before it kills its tree), one healthy.
For the first it records the seconds until `ServerProcess.wait_ready` raised and the message's first
line (the server's own exception line); for the second, the speculative fields of `/generate`
`meta_info` and of `/v1/chat/completions`, and `kit.measure.client.ask`'s table.

    python bench/gpu_startup.py --out OUT                    # real SGLang (bundle on PYTHONPATH, a GPU)
    python bench/gpu_startup.py --out OUT --engine reference  # the kit's CPU reference server, a dry run

Prints one JSON document (last line) and writes OUT/gpu_startup.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path


def tiny_pair(root: Path) -> tuple[Path, Path, Path]:
    """(target, draft, bad draft): the bad one's config says target_hidden_size 2x what its fc holds."""
    from kit.tests.tinyserve import build_pair

    target, draft = build_pair(root)
    bad = root / "bad_draft"
    shutil.copytree(draft, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["target_hidden_size"] = 2 * cfg["hidden_size"]
    (bad / "config.json").write_text(json.dumps(cfg, indent=1))
    return target, draft, bad


def one(engine: str, target: Path, draft: Path, log: Path, healthy: bool) -> dict:
    from kit.measure.client import ask
    from kit.serving.engines import get_engine
    from kit.serving.launch import LaunchSpec
    from kit.serving.process import ServerExited, ServerProcess, free_port, http_json

    spec = LaunchSpec(
        model_path=str(target),
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=str(draft),
        speculative_num_steps=2,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=3,
        port=free_port(),
        python=sys.executable,
        attention_backend="triton" if engine == "sglang" else None,
        mem_fraction_static=0.3 if engine == "sglang" else None,
        extra_args=["--disable-cuda-graph", "--dtype", "float16"] if engine == "sglang" else [],
        log_file=str(log),
    )
    out: dict = {}
    t0 = time.time()
    srv = ServerProcess.from_spec(spec, engine=engine)
    try:
        srv.wait_ready(420)
        out["ready_s"] = round(time.time() - t0, 1)
        if healthy:
            eng = get_engine(engine)
            from kit.models import chat_renderer

            path, body = eng.generate_request(chat_renderer(target)("hello there"), 16)
            _, g = http_json(srv.base_url + path, timeout=120, data=body)
            out["generate_spec"] = eng.spec_fields(g, "sglang") if isinstance(g, dict) else str(g)[:300]
            chat = {"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 16, "temperature": 0}
            _, c = http_json(
                srv.base_url + "/v1/chat/completions", timeout=120, data={**chat, **(eng.request_extra("chat") or {})}
            )
            out["chat_spec"] = eng.spec_fields(c, "chat") if isinstance(c, dict) else str(c)[:300]
            out["ask"] = ask(srv.base_url, ["hello there", "abc"], max_tokens=16, engine=engine).to_dict("records")
    except ServerExited as e:
        out["failed_after_s"] = round(time.time() - t0, 1)
        out["message_head"] = str(e).splitlines()[0][:600]
    except Exception:
        out["exception"] = traceback.format_exc()[-2000:]
    finally:
        out["exit_code"] = srv.stop()
        out["stopped_after_s"] = round(time.time() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--engine", default="sglang", choices=["sglang", "reference"])
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"engine": a.engine}
    try:
        import importlib.metadata

        res["sglang"] = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        res["sglang"] = None
    with tempfile.TemporaryDirectory() as tmp:
        target, draft, bad = tiny_pair(Path(tmp))
        res["bad_draft"] = one(a.engine, target, bad, out / "bad_draft.log", healthy=False)
        res["healthy"] = one(a.engine, target, draft, out / "healthy.log", healthy=True)
    (out / "gpu_startup.json").write_text(json.dumps(res, indent=1, default=str))
    print(json.dumps(res, default=str))


if __name__ == "__main__":
    main()
