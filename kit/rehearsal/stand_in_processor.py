"""The kit's stand-in HF processor for a miniature multimodal target: copied verbatim into the miniature's folder.

SGLang loads the HF processor of a multimodal target while it starts, `--skip-tokenizer-init` or not
(TokenizerManager.init_tokenizer_and_processor), through `AutoProcessor.from_pretrained(..., trust_remote_code)`.
A user's target folder often holds only config.json (the weights and remote code live elsewhere), so a miniature
of it would stop SGLang with "Unrecognized processing class". This module is what the miniature carries instead:
not the model vendor's processor, a small one with the attributes SGLang's processor wrapper for that class reads
at startup (`tokenizer`, `image_processor`, `media_processor.media_proc_cfg` for Kimi-K2.5), built from the
folder's tokenizer.json (a few words) and processor_config.json. A rehearsal sends input_ids only, so it never
processes an image; asked to, it says so.

It is standalone (Transformers only): `transformers.dynamic_module_utils` imports it from the miniature's folder.
Written by kit.rehearsal.miniature.write_stand_in_processor; never imported by the kit itself.
"""

import json
import os

from transformers import PreTrainedTokenizerFast

NO_MEDIA = "the kit's stand-in processor of a rehearsal miniature takes no images, video or audio (input_ids only)"


class KitStandInTokenizer(PreTrainedTokenizerFast):
    """A fast tokenizer under its own class name: SGLang reloads a processor's tokenizer whose class is
    Transformers' generic `TokenizersBackend`, by the class its tokenizer_config.json declares, which this folder
    does not have."""


class StandInMediaProcessor:
    """`media_proc_cfg` (the vendor processor's settings, which SGLang's wrapper copies); nothing processed."""

    def __init__(self, media_proc_cfg):
        self.media_proc_cfg = dict(media_proc_cfg)

    def media_tokens_calculator(self, media):
        raise ValueError(NO_MEDIA)

    def __call__(self, *args, **kwargs):
        raise ValueError(NO_MEDIA)


class KitStandInProcessor:
    """What AutoProcessor returns for the miniature: a tokenizer and a media processor that refuses media."""

    def __init__(self, tokenizer, media_proc_cfg):
        self.tokenizer = tokenizer
        self.media_processor = StandInMediaProcessor(media_proc_cfg)
        self.image_processor = self.media_processor

    @classmethod
    def register_for_auto_class(cls, auto_class="AutoProcessor"):
        """AutoProcessor calls this on a remote-code class before from_pretrained; nothing to register."""

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        folder = str(pretrained_model_name_or_path)
        with open(os.path.join(folder, "processor_config.json")) as f:
            cfg = json.load(f)
        tokenizer = KitStandInTokenizer(
            tokenizer_file=os.path.join(folder, "tokenizer.json"), **cfg.get("special_tokens", {})
        )
        return cls(tokenizer, cfg.get("media_proc_cfg", {}))

    def __call__(self, text=None, images=None, videos=None, audios=None, **kwargs):
        if images or videos or audios:
            raise ValueError(NO_MEDIA)
        return self.tokenizer(text, **kwargs)
