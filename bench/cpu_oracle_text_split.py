"""Benchmark: why the oracle on a bf16 server's captured states reads higher than the kit's fp32 forward.

On the H200, the oracle on states captured inside SGLang (bf16) read 2.195 / 2.509 at 2-1-3 / 3-1-4 against 2.113 /
2.361 from the kit's fp32 forward on the same prompts (docs/results/h200_server_oracle). Two things differ between
them: the *text* (a bf16 target's greedy continuation is not the fp32 one) and the *states* (bf16 numbers, computed
in bf16). This bench separates the two on the CPU, with the embedded SmolLM2 and the shipped draft, without SGLang:

  * `fp32`: the kit's oracle as `kit oracle` runs it (fp32 forward, its own greedy text);
  * `bf16_states`: a capture made here the way a bf16 server makes one (transformers in bf16: its greedy text, and
    its states at the draft's points, computed in bf16), read by `kit oracle --hidden-states`;
  * `fp32_on_bf16_text`: the kit's fp32 forward on that capture's text (`kit oracle --token-path`).

`bf16_states` vs `fp32_on_bf16_text` is the states' share (same text); `fp32_on_bf16_text` vs `fp32` is the text's.

    python bench/cpu_oracle_text_split.py [--num-prompts 24 --max-new-tokens 128] > docs/results/cpu_oracle_text_split.json

Prints one JSON document (last line). About 2 min on 2 cores at the defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _run import emit  # noqa: E402

CHAINS = {"2-1-3": (2, 1, 3), "3-1-4": (3, 1, 4)}


def bf16_capture(out: Path, points: list[int], prompts: list[list[int]], max_new_tokens: int) -> dict:
    """The embedded target in transformers bf16: greedy text per prompt, then one forward over it for the states."""
    import torch

    from kit.models import load_target
    from kit.reference.captured import Capture, write_capture

    model, tok = load_target("embedded", dtype="bfloat16")
    ids, aux, final = [], [], []
    t0 = time.perf_counter()
    with torch.no_grad():
        for p in prompts:
            seq = model.generate(
                torch.tensor([p]), max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.eos_token_id
            )[0]
            hs = model(seq[None], output_hidden_states=True).hidden_states
            ids.append(seq.tolist())
            aux.append(torch.cat([hs[q][0] for q in points], dim=-1))
            final.append(hs[-1][0])
    cfg = model.config
    write_capture(
        out,
        Capture(
            source="transformers bf16 (bench/cpu_oracle_text_split.py)",
            num_hidden_layers=cfg.num_hidden_layers,
            hidden_size=cfg.hidden_size,
            points=points,
            ids=ids,
            prompt_lens=[len(p) for p in prompts],
            aux=aux,
            final=final,
        ),
    )
    return {"seconds": round(time.perf_counter() - t0, 1), "tokens": sum(map(len, ids))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-prompts", type=int, default=24)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    args = ap.parse_args(argv)

    from kit.reference.captured import read_capture
    from kit.reference.oracle import OracleConfig, run_config
    from kit.sglang.params import SpecParams

    def accept(chain: tuple, **kw) -> dict:
        cfg = OracleConfig(
            num_prompts=args.num_prompts, max_new_tokens=args.max_new_tokens, spec=SpecParams(*chain), **kw
        )
        r = run_config(cfg, log=lambda *a, **k: None).results["requested"]
        return {"meta_accept_length": r.meta_accept_length, "verify_steps": r.verify_steps}

    from kit.reference.train import cpu_name

    doc: dict = {"bench": "cpu_oracle_text_split", "machine": f"{cpu_name()}, {os.cpu_count()} cores"}
    with tempfile.TemporaryDirectory() as tmp:
        fp32_dir, bf16_dir = Path(tmp) / "fp32", Path(tmp) / "bf16"
        first = accept(CHAINS["2-1-3"], save_states=str(fp32_dir))
        ref = read_capture(fp32_dir)
        doc["bf16_capture"] = bf16_capture(
            bf16_dir, ref.points, [s[:n] for s, n in zip(ref.ids, ref.prompt_lens)], args.max_new_tokens
        )
        bf16 = read_capture(bf16_dir)
        doc["texts_differing"] = sum(a != b for a, b in zip(ref.ids, bf16.ids))
        doc["requests"] = len(ref.ids)
        doc["points"] = ref.points
        rows = {}
        for name, chain in CHAINS.items():
            fp32 = first if name == "2-1-3" else accept(chain)
            states = accept(chain, hidden_states=str(bf16_dir))
            text = accept(chain, token_path=str(bf16_dir))
            rows[name] = {
                "fp32": fp32,
                "bf16_states": states,
                "fp32_on_bf16_text": text,
                "text_share": round(text["meta_accept_length"] / fp32["meta_accept_length"] - 1, 4),
                "states_share": round(states["meta_accept_length"] / text["meta_accept_length"] - 1, 4),
            }
        doc["chains"] = rows
    emit(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
