"""A Hugging Face Hub on 127.0.0.1 for ``lmms-egoplan prepare``'s tests: it serves datasets (a folder of files
each, in the layout the real dataset has) through the three parts of the Hub's API that ``huggingface_hub`` asks
(a dataset's info at a revision, its file tree, a file's metadata and bytes, ranges too, as the Hub answers
them), gates a dataset behind a token as the Hub does (HTTP 401 with ``X-Error-Code: GatedRepo``), and
counts the requests for each file, so that a test sees what a second run fetched again. Point ``HF_ENDPOINT`` at
``url``."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


@dataclass
class HubDataset:
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    token: str | None = None  # gated: only this token reads it


@dataclass
class LoopbackHub:
    datasets: dict[str, HubDataset] = field(default_factory=dict)
    file_requests: dict[str, int] = field(default_factory=dict)  # "<repo>/<path>" -> GETs of its bytes

    def add(self, repo_id: str, folder: Path, *, token: str | None = None) -> None:
        """Serve every file under ``folder`` as dataset ``repo_id``'s."""
        files = {path.relative_to(folder).as_posix(): path.read_bytes()
                 for path in sorted(folder.rglob("*")) if path.is_file()}
        sha = hashlib.sha1(repo_id.encode()).hexdigest()
        self.datasets[repo_id] = HubDataset(files, sha, token)

    def __enter__(self) -> LoopbackHub:
        hub = self

        class Handler(_Handler):
            served = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add_the_suites_datasets(self, folder: Path, *, egointent_token: str | None = None) -> list[dict]:
        """Serve the suite's Hub datasets, the demo's data in their layouts, written under ``folder`` (EgoIntent
        gated behind ``egointent_token`` where given; Cosmos-Reason1's official layout with its clips unpacked, and
        PAI-Bench-U's; RoboVQA's 16-frame copy, its frames in frames.tar as the Hub holds them); returns
        EgoPlan-Bench2's records."""
        import shutil
        import tarfile

        from lmms_egoplan.cosmos_reason1.sources import HUB, PAIBENCH_U
        from lmms_egoplan.demo import cosmos_reason1, egointent, egoplan_bench2, egothink, robovqa
        from lmms_egoplan.robovqa.sources import FRAMES16_HUB

        bench2 = egoplan_bench2.build_fixture(folder / "bench2")
        bench2_repo = folder / "bench2-repo"
        bench2_repo.mkdir()
        shutil.copy(bench2.annotation_file, bench2_repo / "EgoPlan-Bench2.json")
        (bench2_repo / "README.md").write_text("# EgoPlan-Bench2\n")
        self.add("EgoThink/EgoThink", egothink.write_release(folder / "egothink-repo"))
        self.add("py2279105943/EgoIntent", egointent.write_release(folder / "egointent-repo"), token=egointent_token)
        self.add("qiulu66/EgoPlan-Bench2", bench2_repo)
        cosmos = cosmos_reason1.build_fixture(folder / "cosmos-reason1")
        official = folder / "cosmos-reason1-repo"
        shutil.copytree(cosmos.root, official, ignore=shutil.ignore_patterns(cosmos.paibench_u_root.name, ".complete"))
        self.add(HUB.repo_id, official)
        self.add(PAIBENCH_U.repo_id, cosmos.paibench_u_root)
        frames16 = robovqa.build_fixture(folder / "robovqa").layout("frames16")
        frames16_repo = folder / "robovqa-repo"
        frames16_repo.mkdir()
        shutil.copy(frames16 / "qa.jsonl", frames16_repo)
        with tarfile.open(frames16_repo / "frames.tar", "w") as archive:
            archive.add(frames16 / "frames", arcname="frames")
        self.add(FRAMES16_HUB.repo_id, frames16_repo)
        return bench2.records()


_INFO = re.compile(r"/api/datasets/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<revision>[^/]+))?")
_TREE = re.compile(r"/api/datasets/(?P<repo>[^/]+/[^/]+)/tree/(?P<revision>[^/]+)(?:/(?P<path>.*))?")
_FILE = re.compile(r"/datasets/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<path>.+)")


class _Handler(BaseHTTPRequestHandler):
    served: LoopbackHub

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        path = unquote(urlparse(self.path).path)
        for pattern, answer in ((_INFO, self._info), (_TREE, self._tree), (_FILE, self._file)):
            if match := pattern.fullmatch(path):
                dataset = self._dataset(match["repo"], match["revision"] or "main")
                if dataset is not None:
                    answer(match, dataset, body)
                return
        self._send(404, {"error": f"no route {path}"}, body=body)

    def _dataset(self, repo: str, revision: str) -> HubDataset | None:
        dataset = self.served.datasets.get(repo)
        if dataset is None:
            self._send(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
            return None
        if dataset.token and self.headers.get("authorization") != f"Bearer {dataset.token}":
            self._send(401, {"error": f"Access to dataset {repo} is restricted. You must have access to it and be "
                                      f"authenticated to access it. Please log in."}, {"X-Error-Code": "GatedRepo"})
            return None
        if revision not in ("main", dataset.sha):
            self._send(404, {"error": f"Invalid rev id: {revision}"}, {"X-Error-Code": "RevisionNotFound"})
            return None
        return dataset

    def _info(self, match: re.Match, dataset: HubDataset, body: bool) -> None:
        siblings = [{"rfilename": name, "size": len(content), "blobId": _oid(content)}
                    for name, content in dataset.files.items()]
        self._send(200, {"id": match["repo"], "sha": dataset.sha, "siblings": siblings, "private": False,
                         "gated": "auto" if dataset.token else False, "tags": []}, body=body)

    def _tree(self, match: re.Match, dataset: HubDataset, body: bool) -> None:
        under = (match["path"] or "").strip("/")
        entries = [{"type": "file", "path": name, "size": len(content), "oid": _oid(content)}
                   for name, content in dataset.files.items() if not under or name.startswith(under + "/")]
        self._send(200, entries, body=body)

    def _file(self, match: re.Match, dataset: HubDataset, body: bool) -> None:
        content = dataset.files.get(match["path"])
        if content is None:
            self._send(404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"}, body=body)
            return
        start = 0
        if ranged := re.fullmatch(r"bytes=(\d+)-", self.headers.get("range", "")):
            start = int(ranged[1])
        if body:
            key = f"{match['repo']}/{match['path']}"
            self.served.file_requests[key] = self.served.file_requests.get(key, 0) + 1
        headers = {"X-Repo-Commit": dataset.sha, "ETag": f'"{_oid(content)}"', "Accept-Ranges": "bytes"}
        if start:
            headers["Content-Range"] = f"bytes {start}-{len(content) - 1}/{len(content)}"
        self._send(206 if start else 200, content[start:], headers, body=body)

    def _send(self, status: int, payload, headers: dict[str, str] | None = None, body: bool = True) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if isinstance(payload, bytes)
                         else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


def _oid(content: bytes) -> str:
    """A file's git blob id, as the Hub reports it."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
