"""Models named by Hugging Face id, resolved as SGLang resolves them, without downloading their weights.

Published EAGLE-3 launch lines name the target and the draft by hub id; SGLang hands it to `huggingface_hub`, which
looks in the local cache first (`HF_HUB_CACHE`, else `HF_HOME/hub`) and goes to the network only when
`HF_HUB_OFFLINE` is unset. `resolve` does the same, in this order:

1. a local path: itself (a revision does not apply to it, as in SGLang);
2. the cache's snapshot for that revision, when it holds the weights;
3. a header view written earlier for that commit (below), beside a cached config.json;
4. offline: the cached config.json alone (the checks of the weights' headers do not run), else a one-line error;
5. online: the repository's listing (one API call; gated, unknown ids and revisions are refused here), its small
   JSON files (into the cache by `hf_hub_download`, as SGLang would), and each safetensors shard's *header* by HTTP
   range reads (as huggingface_hub's safetensors metadata API: the first 100 kB, then the rest of a longer one),
   kept raw in a header view (`safetensors_io.HEADER_VIEW`, under `$KIT_CACHE_DIR/hub/`) that `read_checkpoint`
   validates like a local file. The weights stay on the hub; the small tensors the checks read (`KEPT_TENSORS`)
   are fetched by one range read each and kept in the view, so a view answers offline too.

`download` (for `kit convert`, which rewrites the draft) fetches the whole model into the cache instead.

    m = resolve("lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B", revision=None, flag="--draft")
    m.path, m.source            # a folder the checks read; one line saying where its files came from

Errors are `KitInputError` one-liners naming the flag and the id: offline and not cached, gated, no such repository,
no such revision. How to run: `python -m kit.checkpoint.hub ID [REVISION]` prints the resolution.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kit.checkpoint.safetensors_io import (
    HEADER_VIEW,
    HEADER_VIEW_BYTES,
    INDEX_NAME,
    MAX_HEADER_BYTES,
    CheckpointError,
    _parse_view_shard,
)
from kit.config import is_hub_id, missing_path
from kit.findings import Code, Finding, KitInputError
from kit.hf import hub_cache

SECTION = "ckpt/draft: notebook 02"
SOURCE = Code(
    "ckpt.source",
    SECTION,
    "info",
    "where the files of a model named by Hugging Face id came from (`kit.checkpoint.hub`): the local cache's snapshot, "
    "a header view read earlier, or the hub (config.json and safetensors headers by range reads, bytes read; the "
    "weights not downloaded), with the revision and its commit",
    "none (pin `--revision` / `--speculative-draft-model-revision` to a commit for a repeatable check)",
)

# the first range read of a shard: huggingface_hub's safetensors metadata API reads the same 100 kB
FIRST_READ = 100_000
# top-level JSON files too large to be metadata; every other *.json of the repository is fetched
SKIPPED_JSON = ("tokenizer.json", "vocab.json")
# the tensors whose values the checks read (kit.checkpoint.vocab: the draft-vocabulary maps), kept in the header
# view so a view answers offline; anything above KEPT_LIMIT bytes in all is left on the hub
KEPT_TENSORS = ("d2t", "t2d")
KEPT_LIMIT = 64 << 20


@dataclass(frozen=True)
class ModelFiles:
    """A model as the checks read it: a local folder (or a config.json) and where its files came from."""

    name: str  # as the user gave it (a path or a hub id)
    path: Path  # what the checks read: a folder with config.json (an HF snapshot, a header view) or a file
    source: str  # one line: where the files came from
    repo_id: str | None = None  # set for a hub id
    revision: str | None = None  # as asked (None: main)
    commit: str | None = None  # what the revision resolved to

    def finding(self, flag: str | None) -> Finding:
        """`ckpt.source`: where the files of `flag`'s model came from (info)."""
        ev = {"flag": flag, "name": self.name, "path": str(self.path), "revision": self.revision, "commit": self.commit}
        return SOURCE(
            f"{flag + ' ' if flag else ''}{self.name}{'@' + self.revision if self.revision else ''}: {self.source}",
            evidence=ev,
        )


# where huggingface_hub keeps things, read when called (as the environment says now)
def offline() -> bool:
    from huggingface_hub import constants

    return constants.is_offline_mode() or constants._is_true(os.environ.get("HF_HUB_OFFLINE"))


def endpoint() -> str:
    from huggingface_hub import constants

    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def view_dir(repo_id: str, commit: str) -> Path:
    """Where the header view of one commit is kept ($KIT_CACHE_DIR/hub/models--org--name/<commit>)."""
    from kit.models import cache_dir

    return cache_dir() / "hub" / ("models--" + repo_id.replace("/", "--")) / commit


def _local(value: str, flag: str | None, what: str) -> ModelFiles | None:
    """`value` as an existing local path; None for a hub id; KitInputError for a missing path that is no hub id."""
    p = Path(value).expanduser()
    if p.exists():
        return ModelFiles(value, p, f"local path {p}")
    if not is_hub_id(value):
        raise KitInputError(missing_path(value, flag, what))
    return None


def resolve(
    value: str, revision: str | None = None, flag: str | None = None, what: str = "a model directory"
) -> ModelFiles:
    """`value` (a local path or a hub id at `revision`) as a folder the checks read; see the module doc."""
    local = _local(value, flag, what)
    if local is not None:
        return local
    head = f"{flag} {value}" if flag else value
    cached = _from_cache(value, revision)
    if cached is not None:
        snapshot, commit = cached
        at = _at(value, revision, commit)
        view = view_dir(value, commit)
        if _has_weights(snapshot):
            path, source = snapshot, f"Hugging Face cache {snapshot} ({at})"
        elif (view / HEADER_VIEW).is_file():
            path, source = view, f"config.json and safetensors headers read earlier from the hub ({at}; {view})"
        elif offline():
            path = snapshot
            source = f"Hugging Face cache {snapshot} ({at}): config.json only, the weights are not cached and "
            source += "HF_HUB_OFFLINE is set, so checks of the weights' headers did not run"
        else:
            return _fetch_headers(value, revision, head, commit)
        return ModelFiles(value, path, source, value, revision, commit)
    if offline():
        raise not_cached(head, value, revision, "HF_HUB_OFFLINE is set")
    return _fetch_headers(value, revision, head, None)


def not_cached(head: str, repo_id: str, revision: str | None, why: str, weights: bool = False) -> KitInputError:
    """The one line for an id neither cached nor fetchable here (`why`), naming the download to make elsewhere: its
    JSON files, or the whole model where the `weights` are needed (`kit convert`)."""
    rev = f" --revision {revision}" if revision else ""
    what = "its weights are " if weights else ""
    get = "" if weights else " --include '*.json'"
    return KitInputError(
        f"{head}{'@' + revision if revision else ''}: {what}not in the Hugging Face cache ({hub_cache()}) and {why}: "
        f"on a host with network run `hf download {repo_id}{rev}{get}`"
        + ("" if weights else " (config.json and the shard index, no weights)")
        + f", copy its models--{repo_id.replace('/', '--')} folder into {hub_cache()} and run with HF_HUB_OFFLINE=1"
    )


def _at(repo_id: str, revision: str | None, commit: str | None) -> str:
    rev = revision or "main"
    return f"{repo_id} at {rev}" + (f" = commit {commit[:12]}" if commit and commit != rev else "")


def _from_cache(repo_id: str, revision: str | None) -> tuple[Path, str] | None:
    """(snapshot folder, commit) holding the cached config.json of that revision; None: not cached."""
    from huggingface_hub import try_to_load_from_cache

    hit = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache(), revision=revision or "main")
    if not isinstance(hit, str):
        return None
    snapshot = Path(hit).parent
    return snapshot, snapshot.name


def _index_shards(index: Path) -> list[str]:
    """The sorted shard files a shard index names (raises on an unreadable one)."""
    return sorted(set(json.loads(index.read_text())["weight_map"].values()))


_UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError)


def _has_weights(folder: Path) -> bool:
    """Does a snapshot hold every safetensors file its index names (or one without an index)?"""
    if not (folder / INDEX_NAME).is_file():
        return any(folder.glob("*.safetensors"))
    try:
        return all((folder / s).is_file() for s in _index_shards(folder / INDEX_NAME))
    except _UNREADABLE:
        return True  # present but unreadable: read_checkpoint reports it (ckpt.corrupt)


def hub_error(e: Exception, head: str, repo_id: str, revision: str | None, weights: bool = False) -> KitInputError:
    """huggingface_hub's exception as the kit's one line (the cases users hit, named; `weights`: see not_cached)."""
    from huggingface_hub import errors

    login = "log in (hf auth login, or HF_TOKEN)"
    if isinstance(e, errors.GatedRepoError):
        return KitInputError(f"{head}: a gated repository: accept its terms on {endpoint()}/{repo_id} and {login}")
    if isinstance(e, errors.RevisionNotFoundError):
        rev = revision or "main"
        return KitInputError(f"{head}: revision {rev!r} does not exist (give a branch, a tag or a commit hash)")
    if isinstance(e, errors.RepositoryNotFoundError):
        where = f"the Hugging Face hub ({endpoint()})"
        return KitInputError(f"{head}: no such repository on {where}, or it is private: check the id, or {login}")
    if isinstance(e, errors.OfflineModeIsEnabled):
        return not_cached(head, repo_id, revision, "HF_HUB_OFFLINE is set", weights)
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    if _unreachable(e):
        return not_cached(head, repo_id, revision, f"the hub ({endpoint()}) cannot be reached ({first})", weights)
    return KitInputError(f"{head}: cannot read it from the Hugging Face hub ({endpoint()}): {first}")


def _unreachable(e: BaseException | None) -> bool:
    """Did the request fail before the hub answered (the socket's error under the HTTP client's wrappers)?"""
    import errno
    import socket

    while e is not None:
        if isinstance(e, (ConnectionError, TimeoutError, socket.gaierror)) or (
            isinstance(e, OSError) and e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH)
        ):
            return True
        e = e.__cause__ or e.__context__
    return False


def _fetch_headers(repo_id: str, revision: str | None, head: str, commit: str | None) -> ModelFiles:
    """Online: the repository's listing, its JSON files into the cache, every shard's header into a view."""
    from huggingface_hub import HfApi, hf_hub_download

    try:
        info = HfApi(endpoint=endpoint()).model_info(repo_id, revision=commit or revision or "main")
        commit = info.sha or commit
        files = sorted(s.rfilename for s in (info.siblings or []))
        if "config.json" not in files:
            raise KitInputError(f"{head}: the repository has no config.json at {revision or 'main'}")
        # by the revision asked: huggingface_hub then records refs/<revision> -> commit in the cache, so the next
        # resolution finds this commit offline
        where = dict(revision=revision or "main", cache_dir=hub_cache(), endpoint=endpoint())
        jsons = [f for f in files if "/" not in f and f.endswith(".json") and f not in SKIPPED_JSON]
        local = {f: Path(hf_hub_download(repo_id, f, **where)) for f in jsons}
        if INDEX_NAME in local:
            try:
                shards = _index_shards(local[INDEX_NAME])
            except _UNREADABLE as e:
                raise CheckpointError(f"{head}: {INDEX_NAME}: unreadable shard index ({e})")
        else:
            shards = [f for f in files if "/" not in f and f.endswith(".safetensors")]
        headers, nread = _shard_headers(repo_id, commit, shards)
        kept = _kept_tensors(headers)
    except KitInputError:
        raise
    except Exception as e:  # huggingface_hub's and its HTTP client's errors: one line each
        raise hub_error(e, head, repo_id, revision) from None
    view = view_dir(repo_id, commit)
    _write_view(view, local, headers, kept)
    source = (
        f"{endpoint()} ({_at(repo_id, revision, commit)}): config.json and the safetensors headers of {len(shards)} "
        f"file(s) read ({nread:,} bytes of weight files{', and the ' + '/'.join(kept) + ' values' if kept else ''}), "
        "the weights not downloaded"
    )
    return ModelFiles(repo_id, view, source, repo_id, revision, commit)


def _shard_headers(repo_id: str, commit: str, shards: list[str]) -> tuple[dict[str, dict], int]:
    """{shard: {url, size, header}} by range reads, and the bytes read from the weight files."""
    from concurrent.futures import ThreadPoolExecutor

    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    hdrs = build_hf_headers()

    def one(shard: str) -> tuple[str, dict, int]:
        url = hf_hub_url(repo_id, shard, revision=commit, endpoint=endpoint())
        size = get_hf_file_metadata(url).size
        r = get_session().get(url, headers={**hdrs, "range": f"bytes=0-{FIRST_READ}"})
        hf_raise_for_status(r)
        got = r.content
        if len(got) < 8:
            raise CheckpointError(f"{url}: {len(got)} bytes, shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", got[:8])
        if n > MAX_HEADER_BYTES or (size is not None and n > size - 8):
            raise CheckpointError(f"{url}: header length {n} is not a safetensors header (file of {size} bytes)")
        nread = len(got)
        if n > len(got) - 8:
            r = get_session().get(url, headers={**hdrs, "range": f"bytes={len(got)}-{n + 7}"})
            hf_raise_for_status(r)
            got += r.content
            nread += len(r.content)
        raw = got[8 : 8 + n]
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            raise CheckpointError(f"{url}: the header is not UTF-8 JSON")
        return shard, {"url": url, "size": size if size is not None else 8 + n, "header": text}, nread

    with ThreadPoolExecutor(min(8, max(1, len(shards)))) as pool:
        done = list(pool.map(one, shards))
    return {s: d for s, d, _ in done}, sum(n for _, _, n in done)


def _kept_tensors(headers: dict[str, dict]) -> dict[str, bytes]:
    """{name: bytes} of the KEPT_TENSORS, by one range read each (validated headers: offsets are in range)."""
    from kit.checkpoint.safetensors_io import iter_bytes

    out: dict[str, bytes] = {}
    total = 0
    for shard in headers.values():
        try:
            _, infos = _parse_view_shard(shard["url"], shard["size"], shard["header"].encode())
        except CheckpointError:  # read_checkpoint reports it from the view, as for a local file (ckpt.corrupt)
            continue
        for t in infos:
            if t.name.rsplit(".", 1)[-1] in KEPT_TENSORS and total + t.nbytes <= KEPT_LIMIT:
                out[t.name] = b"".join(iter_bytes(t, max(t.nbytes, 1)))
                total += t.nbytes
    return out


def _write_view(view: Path, files: dict[str, Path], headers: dict[str, dict], kept: dict[str, bytes]) -> None:
    """The view folder, whole or not at all: the JSON files beside the headers and the kept tensors."""
    view.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=view.parent, prefix=f".{view.name}."))
    try:
        for name, src in files.items():
            shutil.copyfile(src, tmp / name)
        offsets, pos = {}, 0
        with open(tmp / HEADER_VIEW_BYTES, "wb") as f:
            for name, data in kept.items():
                f.write(data)
                offsets[name], pos = pos, pos + len(data)
        (tmp / HEADER_VIEW).write_text(json.dumps({"files": headers, "kept": offsets}) + "\n")
        if view.exists():  # another process wrote the same commit's view: both are the same
            shutil.rmtree(tmp)
            return
        tmp.rename(view)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def download(
    value: str, revision: str | None = None, flag: str | None = None, what: str = "a model directory"
) -> ModelFiles:
    """`value` as a local folder with its weights: a local path, or the hub id's snapshot, from the cache or
    downloaded into it (config, JSON files and safetensors; `kit convert` rewrites the tensors themselves)."""
    local = _local(value, flag, what)
    if local is not None:
        return local
    head = f"{flag} {value}" if flag else value
    cached = _from_cache(value, revision)
    if cached is not None and _has_weights(cached[0]):
        snapshot, commit = cached
        source = f"Hugging Face cache {snapshot} ({_at(value, revision, commit)})"
        return ModelFiles(value, snapshot, source, value, revision, commit)
    if offline():
        raise not_cached(head, value, revision, "HF_HUB_OFFLINE is set", weights=True)
    from huggingface_hub import snapshot_download

    where = dict(revision=revision, cache_dir=hub_cache(), endpoint=endpoint())
    try:
        folder = Path(snapshot_download(value, allow_patterns=["*.json", "*.safetensors"], **where))
    except Exception as e:  # huggingface_hub's and its HTTP client's errors: one line each
        raise hub_error(e, head, value, revision, weights=True) from None
    source = f"downloaded from {endpoint()} into the Hugging Face cache {folder} ({_at(value, revision, folder.name)})"
    return ModelFiles(value, folder, source, value, revision, folder.name)


if __name__ == "__main__":
    m = resolve(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps({"path": str(m.path), "source": m.source, "commit": m.commit}))
