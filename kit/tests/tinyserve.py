"""A tiny random target (with a byte-level tokenizer and chat template) and EAGLE-3 draft on disk.

For server/launch tests that need real model directories, built in code in ~1 s:
`build_pair(tmp_path) -> (target_dir, draft_dir)`; `in_process_server(spec)` serves a launch spec with the
reference server on a thread of the test's process. The target is a 6-layer Llama (hidden 32,
vocab 260 = 256 bytes + 4 specials); the draft is an SGLang-layout EAGLE-3 head (random weights,
so accept lengths are low; tests check protocol, wiring and greedy equality, not quality).
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|im_start|>", "<|im_end|>", "<pad>", "<unk>"]
VOCAB = 260


def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    for s in SPECIALS:
        vocab[s] = len(vocab)
    t = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=t,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=SPECIALS[:2],
    )
    tok.chat_template = CHAT
    return tok


def build_target(out: Path, seed: int = 0) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    tok = byte_tokenizer()
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.25,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    m = LlamaForCausalLM(cfg).eval()
    m.config.architectures = ["LlamaForCausalLM"]
    m.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def build_draft(out: Path, seed: int = 1) -> Path:
    import torch

    from kit.reference.draft import DraftSpec, Eagle3Draft
    from kit.reference.draft_io import save_draft

    torch.manual_seed(seed)
    kw = dict(
        hidden_size=32,
        target_hidden_size=32,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        vocab_size=VOCAB,
        draft_vocab_size=None,
        rms_norm_eps=1e-6,
        max_position_embeddings=512,
        eagle_config={"eagle_aux_hidden_state_layer_ids": [1, 2, 3]},
    )
    cfg = sglang_config(kw)
    d = Eagle3Draft(DraftSpec.from_config(cfg)).eval()
    for p in d.parameters():  # larger random weights so draft predictions are not all one token
        torch.nn.init.normal_(p, std=0.3)
    save_draft(d, out, cfg)
    return out


def build_pair(tmp: Path) -> tuple[Path, Path]:
    tmp = Path(tmp)
    return build_target(tmp / "target"), build_draft(tmp / "draft")


@contextlib.contextmanager
def in_process_server(spec):
    """`spec` served by the reference server on a thread here: yields (base URL, its engine); stopped after."""
    from kit.refserver.server import load_engine, make_server

    server, state = make_server(spec)
    load_engine(state)
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{spec.port}", state.engine
    finally:
        server.should_exit = True
        t.join(timeout=30)
        state.engine.stop()


def sglang_config(spec_kwargs: dict) -> dict:
    """A config.json SGLang loads as LlamaForCausalLMEagle3 (the keys it reads)."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        **spec_kwargs,
    }
