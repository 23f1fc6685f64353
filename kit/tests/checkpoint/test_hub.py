"""Models named by Hugging Face id (`kit.checkpoint.hub`): the same deployment gives the same findings from local
paths, from hub ids in a Hugging Face cache offline, and from hub ids over HTTP with only headers read.

The cache is written by the test in huggingface_hub's own layout (`models--org--name/blobs/<sha256>`,
`snapshots/<commit>/<file>` linking to the blob, `refs/<revision>` holding the commit). The network path runs
against `Hub`, a loopback HTTP server that stands in for the Hugging Face hub: it answers only the requests
huggingface_hub makes for what the kit asks (the repository listing `GET /api/models/{id}/revision/{rev}`,
`HEAD`/`GET /{id}/resolve/{rev}/{file}`, with or without a Range header) and the hub's error headers
(`X-Error-Code`). Every other test of the suite runs with HF_HUB_OFFLINE=1 (the root conftest.py); the tests
here that go online turn it off for themselves, against that server only.

Run: python -m pytest kit/tests/checkpoint/test_hub.py -q
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from kit.checkpoint.random_draft import write_random_draft
from kit.checkpoint.safetensors_io import WriteEntry, read_checkpoint, write_stream
from kit.cli import main
from kit.findings import KitInputError
from kit.preflight import DoctorConfig, diagnose
from kit.tests.checkpoint.test_checkpoint import TINY

TARGET_ID, DRAFT_ID = "acme/tiny-target", "acme/tiny-eagle3"
COMMITS = {name: hashlib.sha1(name.encode()).hexdigest() for name in ("target", "draft", "draft-v2")}
PARAMS = "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"


def line(target, draft, extra: str = "") -> str:
    return (
        f"python -m sglang.launch_server --model-path {target} --speculative-algorithm EAGLE3 "
        f"--speculative-draft-model-path {draft} {PARAMS} {extra}"
    ).strip()


# -- the deployment, as local folders ------------------------------------------------------------
def write_target(d: Path) -> Path:
    """A tiny Llama target: config.json and a safetensors file of zeros, large enough (~530 kB) that reading it
    past its first 100 kB would be reading weights."""
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({**TINY, "model_type": "llama"}))
    shapes = {"model.embed_tokens.weight": (64, 16), "model.layers.0.mlp.down_proj.weight": (16, 8192)}

    def zeros(n):
        return lambda: [bytes(n)]

    entries = [WriteEntry(k, "F32", s, zeros(4 * s[0] * s[1])) for k, s in shapes.items()]
    write_stream(d / "model.safetensors", entries, {"format": "pt"})
    return d


def write_draft(d: Path, **config) -> Path:
    write_random_draft(d, "sglang", TINY, draft_vocab_size=32)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **config}))
    return d


@pytest.fixture
def local(tmp_path):
    """The deployment on disk: the draft's context (64) is shorter than the target's (128), an error SGLang
    raises at startup; a second draft revision without that fault."""
    root = tmp_path / "local"
    return {
        "target": write_target(root / "target"),
        "draft": write_draft(root / "draft", max_position_embeddings=64),
        "draft-v2": write_draft(root / "draft-v2"),
    }


@pytest.fixture(autouse=True)
def kit_env(tmp_path, monkeypatch):
    """Own caches (never the user's), the recorded flag tables (no side environment built)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "kit"))
    monkeypatch.setenv("KIT_VENV_DIR", str(tmp_path / "venvs"))
    monkeypatch.setenv("KIT_NO_VENV_BUILD", "1")
    monkeypatch.delenv("HF_HOME", raising=False)


# -- a Hugging Face cache, in huggingface_hub's layout ---------------------------------------------------
def cache_model(repo_id: str, folder: Path, commit: str, refs=("main",), only=None) -> Path:
    """`folder`'s files as hf_hub_download leaves them in $HF_HUB_CACHE; `only`: just those file names."""
    repo = Path(os.environ["HF_HUB_CACHE"]) / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    for f in sorted(folder.iterdir()):
        if only is not None and f.name not in only:
            continue
        data = f.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / f.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "refs").mkdir(exist_ok=True)
    for r in refs:
        (repo / "refs" / r).write_text(commit)
    return snap


# -- a loopback stand-in for the hub ----------------------------------------------------------------------
class Hub(ThreadingHTTPServer):
    """Stands in for the Hugging Face hub on 127.0.0.1: the endpoints huggingface_hub calls, nothing more."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), HubHandler)
        self.repos: dict[str, dict] = {}
        self.log: list[dict] = []  # every request: method, repository, file, range

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, repo_id: str, folder: Path, commit: str, revisions=("main",), gated=False) -> None:
        r = self.repos.setdefault(repo_id, {"commits": {}, "refs": {}, "gated": gated})
        r["commits"][commit] = {f.name: f.read_bytes() for f in folder.iterdir()}
        r["refs"].update({rev: commit for rev in revisions})

    def safetensors_reads(self) -> list[dict]:
        return [e for e in self.log if e["method"] == "GET" and e["file"] and e["file"].endswith(".safetensors")]


class HubHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _error(self, status: int, code: str) -> None:
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _commit(self, repo: dict, rev: str) -> str | None:
        return repo["refs"].get(rev) or (rev if rev in repo["commits"] else None)

    def _route(self, method: str) -> None:
        hub: Hub = self.server
        parts = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        rng = self.headers.get("range")
        if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
            repo_id, rev, file = f"{parts[2]}/{parts[3]}", parts[5], None
        elif len(parts) >= 5 and parts[2] == "resolve":
            repo_id, rev, file = f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:])
        else:
            return self._error(404, "EntryNotFound")
        hub.log.append({"method": method, "repo": repo_id, "file": file, "range": rng})
        repo = hub.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound")
        commit = self._commit(repo, rev)
        if commit is None:
            return self._error(404, "RevisionNotFound")
        files = repo["commits"][commit]
        if file is None:  # the listing: huggingface_hub's model_info
            body = json.dumps(
                {
                    "id": repo_id,
                    "sha": commit,
                    "private": False,
                    "gated": "auto" if repo["gated"] else False,
                    "siblings": [{"rfilename": n} for n in sorted(files)],
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            if repo["gated"]:  # the hub lists a gated repository but serves its files only to accepted users
                return self._error(403, "GatedRepo")
            if file not in files:
                return self._error(404, "EntryNotFound")
            data = files[file]
            body, status = data, 200
            if rng and method == "GET":
                a, b = rng.removeprefix("bytes=").split("-")
                a, b = int(a), min(int(b), len(data) - 1)
                body, status = data[a : b + 1], 206
            self.send_response(status)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if method == "GET":
            self.wfile.write(body)

    def do_GET(self):
        self._route("GET")

    def do_HEAD(self):
        self._route("HEAD")


@pytest.fixture
def hub(monkeypatch):
    """The stand-in hub, and this test online against it (HF_ENDPOINT, HF_HUB_OFFLINE off)."""
    from huggingface_hub import constants

    server = Hub()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    yield server
    server.shutdown()
    server.server_close()


def publish(hub: Hub, local: dict) -> None:
    hub.add(TARGET_ID, local["target"], COMMITS["target"])
    hub.add(DRAFT_ID, local["draft"], COMMITS["draft"], revisions=("main",))
    hub.add(DRAFT_ID, local["draft-v2"], COMMITS["draft-v2"], revisions=("v2",))


def cache_all(local: dict) -> None:
    cache_model(TARGET_ID, local["target"], COMMITS["target"])
    cache_model(DRAFT_ID, local["draft"], COMMITS["draft"])
    cache_model(DRAFT_ID, local["draft-v2"], COMMITS["draft-v2"], refs=("v2",))


def seen(report) -> list[tuple[str, str, str]]:
    """The findings as a user reads them, less where the files came from (which differs by design)."""
    return [(f.code, f.severity, f.title) for f in report.findings if f.code != "ckpt.source"]


def sources(report) -> list[str]:
    return [f.title for f in report.findings if f.code == "ckpt.source"]


def errors(report) -> set[str]:
    return {f.code for f in report.findings if f.severity == "error"}


# -- the same findings three ways --------------------------------------------------------------------------
def test_paths_the_cache_and_the_hub_over_http_give_the_same_findings(local, hub, monkeypatch, tmp_path):
    from huggingface_hub import constants

    by_path = diagnose(DoctorConfig(launch=line(local["target"], local["draft"])))
    assert "draft.context_short" in errors(by_path) and not sources(by_path)

    publish(hub, local)
    over_http = diagnose(DoctorConfig(launch=line(TARGET_ID, DRAFT_ID)))  # empty cache, online: headers only
    assert seen(over_http) == seen(by_path)

    def mem(report):  # the target's weight bytes, from its headers (launch.mem)
        return [f.evidence for f in report.findings if f.code == "launch.mem"]

    assert mem(over_http) == mem(by_path) and mem(by_path)[0]["target_bytes"] > 500_000
    assert all("the weights not downloaded" in s and hub.url in s for s in sources(over_http))
    # only headers were read from the weight files: every read is a range read, the first 100 kB
    # (huggingface_hub's safetensors metadata read) or the draft's d2t/t2d maps; no weight file reached the cache
    reads = hub.safetensors_reads()
    assert reads and all(e["range"] for e in reads)
    maps = [read_checkpoint(local["draft"]).tensors[n] for n in ("d2t", "t2d")]
    allowed = {"bytes=0-100000", *(f"bytes={t.start}-{t.end - 1}" for t in maps)}
    assert {e["range"] for e in reads} <= allowed
    target_size = (local["target"] / "model.safetensors").stat().st_size
    assert target_size > 500_000 and not [p for p in Path(os.environ["HF_HUB_CACHE"]).rglob("*.safetensors")]

    # the same ids from a Hugging Face cache, offline, in a fresh process state
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf2"))
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "kit2"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cache_all(local)
    n = len(hub.log)
    from_cache = diagnose(DoctorConfig(launch=line(TARGET_ID, DRAFT_ID)))
    assert seen(from_cache) == seen(by_path) and mem(from_cache) == mem(by_path) and len(hub.log) == n
    assert [s.split(":")[0] for s in sources(from_cache)] == [
        f"--model-path {TARGET_ID}",
        f"--speculative-draft-model-path {DRAFT_ID}",
    ]
    assert all("Hugging Face cache" in s for s in sources(from_cache))


def test_doctor_launch_file_alone_checks_the_launchs_own_models(local, tmp_path, capsys):
    f = tmp_path / "launch.sh"
    f.write_text(line(local["target"], local["draft"]))
    alone = diagnose(DoctorConfig(launch_file=str(f)))
    given = diagnose(DoctorConfig(target=str(local["target"]), draft=str(local["draft"]), launch_file=str(f)))
    assert seen(alone) == seen(given) and "draft.context_short" in errors(alone)
    assert main(["doctor", "--launch-file", str(f), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "draft.context_short" in {x["code"] for x in doc["findings"] if x["severity"] == "error"}


def test_kit_launch_dry_run_checks_hub_ids_from_the_cache(local, capsys):
    cache_all(local)
    rc = main(["launch", "--from", line(TARGET_ID, DRAFT_ID), "--dry-run", "--json"])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 1 and "draft.context_short" in {x["code"] for x in doc["findings"] if x["severity"] == "error"}
    assert len([x for x in doc["findings"] if x["code"] == "ckpt.source"]) == 2
    assert doc["argv"][doc["argv"].index("--model-path") + 1] == TARGET_ID  # SGLang gets the id as written


def test_revisions_choose_the_snapshot(local):
    cache_all(local)
    v2 = diagnose(DoctorConfig(launch=line(TARGET_ID, DRAFT_ID, "--speculative-draft-model-revision v2")))
    assert "draft.context_short" not in errors(v2) and "@v2" in sources(v2)[1]
    assert COMMITS["draft-v2"][:12] in sources(v2)[1]
    flag = diagnose(DoctorConfig(target=TARGET_ID, draft=DRAFT_ID, draft_revision=COMMITS["draft-v2"]))
    assert "draft.context_short" not in errors(flag)
    main_rev = diagnose(DoctorConfig(target=TARGET_ID, draft=DRAFT_ID, launch=line(TARGET_ID, DRAFT_ID)))
    assert "draft.context_short" in errors(main_rev)
    # the CLI flag wins over the launch's own revision
    both = DoctorConfig(draft=DRAFT_ID, draft_revision="main", launch=line(TARGET_ID, DRAFT_ID, "--revision main"))
    assert "draft.context_short" in errors(diagnose(both))


# -- the cases users hit: one line each ---------------------------------------------------------------------
def test_offline_and_not_cached_is_one_line_on_the_command_line_and_a_finding_in_a_launch(capsys):
    assert main(["doctor", "--draft", "acme/absent"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--draft acme/absent" in err and "HF_HUB_OFFLINE" in err
    rep = diagnose(DoctorConfig(launch=line("acme/absent-target", "acme/absent")))
    paths = {f.evidence["path"]: f for f in rep.findings if f.code == "launch.path"}
    assert paths["acme/absent"].severity == "error" and "acme/absent" in paths["acme/absent"].title
    assert paths["acme/absent-target"].severity == "warning"


@pytest.mark.parametrize(
    "args,says",
    [
        (["--draft", "acme/gated"], "a gated repository"),
        (["--draft", "acme/nobody"], "no such repository"),
        (["--draft", DRAFT_ID, "--draft-revision", "nope"], "revision 'nope' does not exist"),
    ],
)
def test_hub_refusals_are_one_line(local, hub, capsys, args, says):
    publish(hub, local)
    hub.add("acme/gated", local["draft"], COMMITS["draft"], gated=True)
    assert main(["doctor", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and says in err and args[1] in err


def test_no_network_is_one_line(monkeypatch, capsys, tmp_path):
    """The hub unreachable (a laptop offline, HF_HUB_OFFLINE unset) and the id not cached: the one line names the
    cache looked in and gives the download a host with network makes (JSON files only), as HF_HUB_OFFLINE=1 does."""
    import socket

    from huggingface_hub import constants

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    download = f"hf download {DRAFT_ID} --include '*.json'"
    assert main(["doctor", "--draft", DRAFT_ID]) == 2  # HF_HUB_OFFLINE=1 (the suite's)
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert f"not in the Hugging Face cache ({tmp_path / 'hf'}) and HF_HUB_OFFLINE is set" in err and download in err
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 2, raising=False)
    assert main(["doctor", "--draft", DRAFT_ID, "--draft-revision", "v2"]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert f"--draft {DRAFT_ID}@v2: not in the Hugging Face cache ({tmp_path / 'hf'})" in err
    assert f"the hub (http://127.0.0.1:{port}) cannot be reached ([Errno 111] Connection refused)" in err
    assert f"hf download {DRAFT_ID} --revision v2 --include '*.json'" in err and "HF_HUB_OFFLINE=1" in err


def test_a_cached_config_without_weights_is_checked_as_a_lone_config_offline(local):
    cache_model(DRAFT_ID, local["draft"], COMMITS["draft"], only={"config.json"})
    rep = diagnose(DoctorConfig(target=str(local["target"]), draft=DRAFT_ID))
    assert "config.json only" in sources(rep)[0] and "HF_HUB_OFFLINE" in sources(rep)[0]
    assert "draft.context_short" in errors(rep)  # a config-level check still runs
    assert "draft.layout" not in {f.code for f in rep.findings}  # the header checks did not


def test_headers_read_once_answer_offline_later(local, hub, monkeypatch):
    from huggingface_hub import constants

    from kit.checkpoint.hub import resolve

    publish(hub, local)
    first = resolve(DRAFT_ID, "v2", "--draft")
    assert first.commit == COMMITS["draft-v2"] and "the weights not downloaded" in first.source
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    n = len(hub.log)
    again = resolve(DRAFT_ID, "v2", "--draft")
    assert again.path == first.path and "read earlier" in again.source and len(hub.log) == n
    assert read_checkpoint(again.path).shapes() == read_checkpoint(local["draft-v2"]).shapes()
    # the whole doctor, offline from the view: the d2t/t2d values its checks read were kept with the headers
    hub.add(TARGET_ID, local["target"], COMMITS["target"])
    by_path = diagnose(DoctorConfig(target=str(local["target"]), draft=str(local["draft-v2"])))
    from_view = diagnose(DoctorConfig(target=str(local["target"]), draft=DRAFT_ID, draft_revision="v2"))
    assert seen(from_view) == seen(by_path) and len(hub.log) == n


def test_a_corrupt_header_on_the_hub_is_a_corrupt_checkpoint(local, hub, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_bytes((local["draft"] / "config.json").read_bytes())
    data = (local["draft"] / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[:-8])  # truncated: the header declares 8 bytes more
    hub.add("acme/truncated", bad, COMMITS["draft"])
    rep = diagnose(DoctorConfig(target=str(local["target"]), draft="acme/truncated"))
    (f,) = [f for f in rep.findings if f.code == "ckpt.corrupt"]
    assert f.severity == "error" and "truncated" in f.title


# -- kit inspect, kit convert, kit rehearse ------------------------------------------------------------------
def _inspect(capsys, *argv):
    rc = main(["inspect", *argv, "--json"])
    doc = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return rc, {(t["name"], t["dtype"], tuple(t["shape"]), t["bytes"]) for t in doc["tensors"]}, doc


def test_inspect_a_hub_id_lists_what_the_path_lists(local, hub, monkeypatch, capsys):
    from huggingface_hub import constants

    rc, by_path, doc = _inspect(capsys, str(local["draft-v2"]))
    publish(hub, local)
    rc2, over_http, doc2 = _inspect(capsys, DRAFT_ID, "--revision", "v2")
    assert (rc2, over_http) == (rc, by_path) and by_path
    codes = [f["code"] for f in doc["findings"]]
    assert [f["code"] for f in doc2["findings"]] == ["ckpt.source", *codes]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    cache_model("acme/cached", local["draft-v2"], COMMITS["draft-v2"])
    rc3, from_cache, _ = _inspect(capsys, "acme/cached")
    assert (rc3, from_cache) == (rc, by_path)


def test_convert_takes_a_hub_draft_from_the_cache(local, tmp_path, capsys):
    cache_all(local)
    by_path = tmp_path / "by-path"
    assert (
        main(["convert", str(local["draft"]), str(by_path), "--to", "speculators", "--target", str(local["target"])])
        == 0
    )
    by_id = tmp_path / "by-id"
    assert main(["convert", DRAFT_ID, str(by_id), "--to", "speculators", "--target", TARGET_ID]) == 0
    assert f"{DRAFT_ID}: Hugging Face cache" in capsys.readouterr().out
    a, b = read_checkpoint(by_path), read_checkpoint(by_id)
    assert a.shapes() == b.shapes()
    assert (by_path / "model.safetensors").read_bytes() == (by_id / "model.safetensors").read_bytes()
    # the weights are needed: a cached config alone is refused, offline
    cache_model("acme/config-only", local["draft"], COMMITS["draft"], only={"config.json"})
    assert main(["convert", "acme/config-only", str(tmp_path / "x"), "--to", "speculators", "--target", TARGET_ID]) == 2
    assert "weights are not in the Hugging Face cache" in capsys.readouterr().err


def test_rehearse_dry_run_takes_hub_ids(local, tmp_path, capsys):
    cache_all(local)
    f = tmp_path / "launch.sh"
    f.write_text(line(TARGET_ID, DRAFT_ID, "--speculative-draft-model-revision v2"))
    out = tmp_path / "rehearsal"
    argv = ["rehearse", "--target", TARGET_ID, "--draft", DRAFT_ID, "--draft-revision", "v2"]
    assert main([*argv, "--launch-file", str(f), "--out", str(out), "--dry-run", "--gpus", "1"]) == 0
    text = capsys.readouterr().out
    assert "target: Hugging Face cache" in text and COMMITS["draft-v2"][:12] in text
    plan = json.loads((out / "plan.json").read_text())
    assert "--speculative-draft-model-revision" not in plan["argv"]  # the miniatures are local folders
    with pytest.raises(KitInputError, match="HF_HUB_OFFLINE"):
        from kit.rehearsal.runner import RehearsalConfig
        from kit.rehearse import rehearse

        rehearse(RehearsalConfig(target="acme/absent", draft=DRAFT_ID, launch_file=str(f), out=str(out), dry_run=True))


def test_the_suite_never_reaches_the_network():
    """The root conftest.py sets HF_HUB_OFFLINE=1 before huggingface_hub is imported: a hub call raises."""
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import OfflineModeIsEnabled

    assert os.environ["HF_HUB_OFFLINE"] == "1" and constants.HF_HUB_OFFLINE
    with pytest.raises(OfflineModeIsEnabled):
        HfApi().model_info(DRAFT_ID)
