"""A model hub on loopback that answers the Hugging Face routes llama-server's
downloader uses (refs, tree, resolve), and plain file URLs, for the -hf and
-mu tests. Serves files from a dict; counts the downloads."""

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class ModelHub:
    def __init__(self):
        self.repos = {}  # "owner/name" -> {path: bytes}
        self.files = {}  # "/files/NAME" -> bytes, for -mu
        self.downloads = []  # paths whose bodies were sent
        self.started = threading.Event()  # a body began to go out
        self.slow = False  # bodies in small pieces, a pause after each
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, h, body):
        path = h.path.split("?")[0]
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 5:
            repo = "/".join(parts[2:4])
            if repo not in self.repos:
                return self._send(h, 404, b'{"error":"Repository not found"}', "application/json", body)
            if parts[4] == "refs":
                refs = {"branches": [{"name": "main", "targetCommit": COMMIT}]}
                return self._send(h, 200, json.dumps(refs).encode(), "application/json", body)
            if parts[4] == "tree":
                tree = [{"type": "file", "path": p, "oid": hashlib.sha1(b).hexdigest(),
                         "lfs": {"oid": hashlib.sha256(b).hexdigest(), "size": len(b)}}
                        for p, b in self.repos[repo].items()]
                return self._send(h, 200, json.dumps(tree).encode(), "application/json", body)
        if len(parts) >= 5 and parts[2] == "resolve":
            repo = "/".join(parts[:2])
            data = self.repos.get(repo, {}).get("/".join(parts[4:]))
            if data is not None:
                return self._send(h, 200, data, "application/octet-stream", body, path)
        if path in self.files:
            return self._send(h, 200, self.files[path], "application/octet-stream", body, path)
        return self._send(h, 404, b"not found", "text/plain", body)

    def _send(self, h, status, data, content_type, body, counted=None):
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        if counted:
            h.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
        h.end_headers()
        if not body:
            return
        if counted:
            self.started.set()
        step = 16384 if self.slow and counted else max(1, len(data))
        try:
            for at in range(0, len(data), step):
                h.wfile.write(data[at:at + step])
                if step < len(data):
                    h.wfile.flush()
                    time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client went away
        if counted:
            self.downloads.append(counted)
