"""Mock servers on 127.0.0.1 for tests: an OpenAI-compatible chat endpoint with scripted replies,
and a LangSmith API that records the runs it receives. Both run in a thread; nothing leaves the host."""

from __future__ import annotations

import gzip
import json
import threading
import time
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server:
    handler_cls: type[BaseHTTPRequestHandler]

    def __enter__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self.handler_cls)
        self.httpd.owner = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    n = int(handler.headers.get("Content-Length") or 0)
    body = handler.rfile.read(n) if n else b""
    if handler.headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return body


def _send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


# ---------------------------------------------------------------------------------------------


class MockOpenAI(_Server):
    """``POST /v1/chat/completions``: replies in order (the last one repeats). A reply is a string
    (the assistant's content), or ``{"status": 500}`` / ``{"raw": b"not json"}`` for failures."""

    def __init__(self, replies: list[Any], usage: tuple[int, int] = (1200, 300), model: str = "mock-model"):
        self.replies = list(replies)
        self.usage = usage
        self.model = model
        self.requests: list[dict] = []
        self.handler_cls = _OpenAIHandler


class _OpenAIHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        owner: MockOpenAI = self.server.owner  # type: ignore[attr-defined]
        body = json.loads(_read_body(self) or b"{}")
        if not self.path.endswith("/chat/completions"):
            return _send_json(self, 404, {"error": {"message": f"no route {self.path}"}})
        owner.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        reply = owner.replies[min(len(owner.requests), len(owner.replies)) - 1]
        if isinstance(reply, dict) and "status" in reply:
            return _send_json(self, reply["status"], {"error": {"message": "scripted failure", "type": "server_error"}})
        if isinstance(reply, dict) and "raw" in reply:
            return _send_json(self, 200, reply["raw"])
        tin, tout = owner.usage
        _send_json(self, 200, {
            "id": f"chatcmpl-{len(owner.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": owner.model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply}}],
            "usage": {"prompt_tokens": tin, "completion_tokens": tout, "total_tokens": tin + tout},
        })


# ---------------------------------------------------------------------------------------------


class MockLangSmith(_Server):
    """Records run creates and updates sent by the LangSmith client (batch, multipart or single)."""

    def __init__(self):
        self.posts: list[dict] = []
        self.patches: list[dict] = []
        self.requests: list[str] = []
        self.handler_cls = _LangSmithHandler

    def runs(self) -> dict[str, dict]:
        """Run id -> the run with its updates merged."""
        out: dict[str, dict] = {}
        for r in self.posts:
            out.setdefault(str(r.get("id")), {}).update(r)
        for r in self.patches:
            out.setdefault(str(r.get("id")), {}).update({k: v for k, v in r.items() if v is not None})
        return out

    def wait_for(self, predicate, timeout_s: float = 10.0) -> bool:
        end = time.time() + timeout_s
        while time.time() < end:
            if predicate(self):
                return True
            time.sleep(0.05)
        return False


class _LangSmithHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        owner: MockLangSmith = self.server.owner  # type: ignore[attr-defined]
        owner.requests.append(f"GET {self.path}")
        if self.path.startswith("/info"):
            # plain JSON batches: simplest for a mock to read
            return _send_json(self, 200, {"version": "0.10.0", "batch_ingest_config": {
                "use_multipart_endpoint": False, "scale_up_qsize_trigger": 1000, "scale_up_nthreads_limit": 1,
                "scale_down_nempty_trigger": 4, "size_limit": 100, "size_limit_bytes": 20_971_520}})
        _send_json(self, 200, {})

    def do_POST(self):
        owner: MockLangSmith = self.server.owner  # type: ignore[attr-defined]
        owner.requests.append(f"POST {self.path}")
        body = _read_body(self)
        if self.path.startswith("/runs/batch"):
            data = json.loads(body)
            owner.posts.extend(data.get("post", []))
            owner.patches.extend(data.get("patch", []))
        elif self.path.startswith("/runs/multipart"):
            self._multipart(owner, body)
        elif self.path.rstrip("/") == "/runs":
            owner.posts.append(json.loads(body))
        _send_json(self, 200, {})

    def do_PATCH(self):
        owner: MockLangSmith = self.server.owner  # type: ignore[attr-defined]
        owner.requests.append(f"PATCH {self.path}")
        data = json.loads(_read_body(self))
        data.setdefault("id", self.path.rstrip("/").split("/")[-1])
        owner.patches.append(data)
        _send_json(self, 200, {})

    def _multipart(self, owner: MockLangSmith, body: bytes) -> None:
        head = f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode()
        msg = BytesParser(policy=HTTP).parsebytes(head + body)
        runs: dict[tuple[str, str], dict] = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition") or ""
            pieces = name.split(".")  # post.<id>, patch.<id>, post.<id>.inputs, ...
            if len(pieces) < 2:
                continue
            key = (pieces[0], pieces[1])
            payload = json.loads(part.get_payload(decode=True) or b"null")
            run = runs.setdefault(key, {"id": pieces[1]})
            if len(pieces) == 2:
                run.update(payload)
            else:
                run[pieces[2]] = payload
        for (kind, _), run in runs.items():
            (owner.posts if kind == "post" else owner.patches).append(run)
