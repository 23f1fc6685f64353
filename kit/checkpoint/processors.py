"""What a multimodal target's processor is made of, for the checks that read a target folder and for the miniature.

SGLang loads a multimodal target's HF processor while it starts (`kit.sglang.loader.processor_archs` names the
classes per release). Data only: which files of a target folder declare a processor, and, per class the kit can
stand one in for, what the vendor's processor carries that SGLang's wrapper reads (and whether it is remote code).

    from kit.checkpoint.processors import PROCESSOR_FILES, STAND_IN_PROCESSORS
"""

from __future__ import annotations

from typing import Any

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json")
# multimodal targets whose processor SGLang's startup accepts from the kit's stand-in (kit/rehearsal/stand_in_processor.py), with
# what the vendor's processor carries that SGLang's wrapper of that class reads: the media placeholder token and
# Kimi-K2.5's `media_proc_cfg` (its preprocessor_config.json; KimiK2_5VLImageProcessor.__init__ copies the keys)
STAND_IN_PROCESSORS: dict[str, dict[str, Any]] = {
    "KimiK25ForConditionalGeneration": {
        # the vendor's processor and tokenizer are remote code (kimi_k25_processor.py, tokenization_kimi.py):
        # without --trust-remote-code AutoProcessor refuses them, and so does it the stand-in
        "vendor_remote_code": True,
        "media_token": "<|media_pad|>",
        "media_proc_cfg": {
            "patch_size": 14,
            "merge_kernel_size": 2,
            "in_patch_limit": 16384,
            "patch_limit_on_one_side": 512,
            "fixed_output_tokens": None,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "in_patch_limit_each_frame": 4096,
            "temporal_merge_kernel_size": 4,
            "sample_fps": 2.0,
        },
    }
}
