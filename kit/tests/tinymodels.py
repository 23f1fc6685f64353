"""Tiny random target / draft pairs for hermetic unit tests (no files, < 1 s to build)."""

from __future__ import annotations

import pytest
import torch

from kit.reference.draft import DraftSpec, Eagle3Draft


def tiny_target(seed: int = 0, layers: int = 6, hidden: int = 32, vocab: int = 96, dtype=torch.float64):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.25,
    )
    cfg._attn_implementation = "sdpa"
    m = LlamaForCausalLM(cfg).to(dtype).eval()
    return m


def tiny_spec(hidden: int = 32, vocab: int = 96, draft_vocab=None, ids=(0, 2, 3), **kw) -> DraftSpec:
    return DraftSpec(
        hidden_size=hidden,
        target_hidden_size=hidden,
        num_aux=len(ids),
        num_layers=1,
        num_heads=4,
        num_kv_heads=2,
        head_dim=hidden // 4,
        intermediate_size=2 * hidden,
        vocab_size=vocab,
        draft_vocab_size=draft_vocab,
        aux_layer_ids=list(ids),
        has_target_hidden_size=True,
        **kw,
    )


def tiny_draft(target=None, seed: int = 1, dtype=torch.float64, **kw) -> Eagle3Draft:
    torch.manual_seed(seed)
    d = Eagle3Draft(tiny_spec(**kw)).to(dtype).eval()
    if target is not None:
        d.attach_target(target)
    return d


class CopyDraft(torch.nn.Module):
    """A draft that predicts exactly what the target would (it re-runs the target on the token
    history it keeps in its 'KV cache'). A test double for "perfect draft => max accept length"."""

    def __init__(self, target, first_token: int, sharpness: float = 50.0):
        super().__init__()
        self.target, self.first, self.sharp = target, first_token, sharpness
        self.spec = tiny_spec(hidden=target.config.hidden_size, vocab=target.config.vocab_size)

    def to_target_ids(self, idx):
        return idx

    def use_plan(self, plan) -> None:  # the draft interface BatchDecoder calls: its products are the target's
        pass

    def forward(self, input_ids, hidden, positions, past_kv=None, mask=None, logits_at=None):
        B, T = input_ids.shape
        hist = past_kv[0][0][:, 0, :, 0].long() if past_kv else input_ids[:, :0]
        if mask is not None and mask.dim() == 4:  # per-row visibility (the oracle's batched trees)
            vis = mask[:, 0, -1, : hist.shape[1]]
            rows = [torch.cat([torch.tensor([self.first]), hist[b][vis[b]], input_ids[b]]) for b in range(B)]
            logits = torch.cat([self.target(input_ids=r[None]).logits[:, -T:] for r in rows]).float() * self.sharp
        else:
            seq = torch.cat([torch.full((B, 1), self.first), hist, input_ids], 1)
            logits = self.target(input_ids=seq).logits[:, -T:].float() * self.sharp
        tok = input_ids[:, None, :, None].to(torch.float64)
        if logits_at is not None:  # the one position per row the caller wants (Eagle3Draft.forward's contract)
            logits = logits[torch.arange(B), logits_at][:, None]
        return logits, torch.zeros(B, T, hidden.shape[-1], dtype=hidden.dtype), [(tok, tok)]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models: one torch thread (several threads only spin on 2 shared cores)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
