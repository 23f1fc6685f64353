"""The kit's CPU reference server: SGLang's HTTP API over the kit's own speculative engine (`kit serve`).

`kit.refserver.validate` checks and admits each request body (one 400 naming the field for a bad one),
`kit.refserver.decoder` batches admitted requests through `kit.reference.speculate`, and `kit.refserver.server`
is the HTTP app. What it shares with the measuring side (metric names, server-info fields, its failed-load line)
lives in `kit.serving.engines.reference`.

    kit serve --model-path embedded --speculative-algorithm EAGLE3 --speculative-draft-model-path demo
"""
