"""The table of bad (and a few good) requests sent to one SGLang-API server, or two such runs compared.

Why: the kit's reference server (`kit serve`) must answer every bad request as SGLang does, with a 4xx that
names the field, never a 5xx or a dropped connection. This sends every row of `kit.tests.request_table`
(endpoint, body, what it tests, what the reference server answers) with the kit's client, one after another,
recording per row the status, the first line of the error message (or of an SSE error event in a 200 stream),
whether the connection dropped and the time; then a long prompt whose client gives up after a few seconds and
the latency of a 4-token request sent right after it (bounded: abandon-after + 25 s); then a normal request.

    python bench/serve_table.py --url http://127.0.0.1:30000 [--context-length N] [--out FILE]
    python bench/serve_table.py --compare reference.json sglang.json [--names reference sglang] [--out FILE.md]

(--compare also reads bench/serve_table_sglang.py's sglang_table.json, whose "table" is such a run.)

Prints one JSON document (rows + summary; with --out also written there). --compare prints markdown: the rows
whose code or message differ between the two runs. Bad input: one line naming the flag, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _run import emit  # noqa: E402

from kit.findings import KitInputError  # noqa: E402


def _read(path: str, flag: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise KitInputError(f"{flag} {path}: cannot read a table run ({type(e).__name__}: {e})")
    if isinstance(doc, dict) and isinstance(doc.get("table"), dict):  # serve_table_sglang.py's file: the run inside
        doc = doc["table"]
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise KitInputError(f"{flag} {path}: not a table run (no 'rows'; write one with --url ... --out)")
    return doc


def main(argv: list[str] | None = None) -> int:
    from kit.tests.request_table import TableConfig, compare, run_table

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="the server's base URL")
    ap.add_argument(
        "--context-length", "--context-len", type=int, help="its context length (default: /v1/models max_model_len)"
    )
    ap.add_argument("--out", help="write the JSON (with --compare: the markdown) here too")
    ap.add_argument("--row-timeout-s", type=float, default=TableConfig.row_timeout_s)
    ap.add_argument("--deadline-s", type=float, default=TableConfig.deadline_s, help="rows after it are skipped")
    ap.add_argument("--abandon-after-s", type=float, default=TableConfig.abandon_after_s)
    ap.add_argument("--compare", nargs=2, metavar=("A.json", "B.json"), help="line two runs up instead")
    ap.add_argument("--names", nargs=2, default=("reference", "sglang"), help="the two runs' column names")
    args = ap.parse_args(argv)
    try:
        if args.compare:
            a, b = (_read(p, "--compare") for p in args.compare)
            text = compare(a, b, *args.names)
            if args.out:
                Path(args.out).write_text(text)
            print(text, end="")
            return 0
        if not args.url:
            raise KitInputError("--url: give the server's base URL (or --compare A.json B.json)")
        if args.context_length is not None and args.context_length < 64:
            raise KitInputError(
                f"--context-length {args.context_length}: at least 64 (the abandoned prompt needs room)"
            )
        if not 0 < args.abandon_after_s <= 5:
            raise KitInputError(f"--abandon-after-s {args.abandon_after_s}: in (0, 5] (the case is bounded to 30 s)")
        from kit.measure.client import check_server, run_sync

        url = args.url.rstrip("/")
        check_server(url, "--url")
        cfg = TableConfig(
            context_length=args.context_length,
            row_timeout_s=args.row_timeout_s,
            deadline_s=args.deadline_s,
            abandon_after_s=args.abandon_after_s,
        )
        load = os.getloadavg()
        doc = run_sync(run_table(url, cfg))
        # this machine while it ran (on a shared CPU, the server's timings move with its neighbours)
        doc["client_machine"] = {
            "cpus": os.cpu_count(),
            "load_avg_1m": [round(load[0], 2), round(os.getloadavg()[0], 2)],
        }
    except KitInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    emit(doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
