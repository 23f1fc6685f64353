"""The rehearsal: the user's own launch run on real SGLang with a miniature of its target and draft.

`kit.rehearsal.miniature` builds the miniatures (same class, layer count, vocabulary and context, small widths,
dummy weights; the draft with the user's tensor names and dtypes), `kit.rehearsal.runner` adjusts the launch to
them, runs it through the kit's process lifecycle with the recorder (`kit.rehearsal.hooks`, copied onto SGLang's
PYTHONPATH as `sitecustomize.py`) and maps what SGLang did to finding codes; `kit.rehearsal.stand_in_processor` is
the small HF processor a multimodal miniature carries (copied as remote code, never imported by the kit).
`kit rehearse` (`kit.rehearse`) is the verb:

    kit rehearse --target T --draft D --launch-file launch.sh [--dry-run]
"""
