"""A small HTTP server on 127.0.0.1 for the tests that download: it serves
files from memory and can misbehave on purpose (never a real host).

    with FileServer() as server:
        server.files['/a.pth'] = data
        server.modes['/a.pth'] = 'truncate'
        url = server.url('/a.pth')
"""
from __future__ import annotations

import hashlib
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: what :class:`FileServer` does for a path (default ``'ok'``)
MODES = {
    'ok': 'the file with its ETag; a Range request gets 206 and the rest (the whole file with 200 '
          'when its If-Range names another ETag)',
    'no_range': 'the whole file with 200, whatever Range asks',
    'html': 'an HTML page with Content-Type text/html',
    'html_as_binary': 'an HTML page with Content-Type application/octet-stream',
    'truncate': 'Content-Length of the whole file, half of it, then the connection closes',
    'stall': 'half of the file, then nothing until the server stops',
    'slow': 'the file after a pause of 0.3 s',
    'no_length': 'the file without Content-Length (the connection closes after it)',
    'no_length_truncate': 'half of the file without Content-Length, then the connection closes',
    'no_length_no_range': 'the whole file without Content-Length, whatever Range asks',
}
HTML_PAGE = b'<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>...</body></html>\n'


class FileServer:
    """A threaded HTTP/1.0 server on ``127.0.0.1:<free port>``.

    ``files`` maps a URL path to its bytes (other paths answer 404),
    ``modes`` a path to a key of :data:`MODES`; ``requests`` lists
    ``(path, headers)`` of every request received.
    """

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, str] = {}
        self.requests: list[tuple[str, dict]] = []
        self._stopped = threading.Event()
        self._httpd = ThreadingHTTPServer(('127.0.0.1', 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def url(self, path: str) -> str:
        return f'http://127.0.0.1:{self._httpd.server_address[1]}{path}'

    def requests_for(self, path: str) -> list[dict]:
        """Headers of the requests for ``path``."""
        return [headers for p, headers in self.requests if p == path]

    def __enter__(self) -> 'FileServer':
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stopped.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                server.requests.append((self.path, dict(self.headers)))
                data = server.files.get(self.path)
                if data is None:
                    self.send_error(404, 'Not Found')
                    return
                mode = server.modes.get(self.path, 'ok')
                if mode not in MODES:
                    raise ValueError(f'unknown mode {mode!r}')
                if mode.startswith('html'):
                    kind = 'text/html; charset=utf-8' if mode == 'html' \
                        else 'application/octet-stream'
                    self._send(200, HTML_PAGE, {'Content-Type': kind})
                    return
                if mode == 'slow':
                    server._stopped.wait(0.3)
                etag = f'"{hashlib.sha256(data).hexdigest()[:16]}"'
                wanted = re.fullmatch(r'bytes=(\d+)-(\d*)', self.headers.get('Range', ''))
                if mode in ('no_range', 'no_length_no_range') or \
                        self.headers.get('If-Range', etag) != etag:
                    wanted = None
                start = int(wanted.group(1)) if wanted else 0
                end = int(wanted.group(2)) + 1 if wanted and wanted.group(2) else len(data)
                if start >= len(data) > 0:
                    self._send(416, b'', {'Content-Range': f'bytes */{len(data)}'})
                    return
                headers = {'Content-Type': 'application/octet-stream', 'Accept-Ranges': 'bytes',
                           'ETag': etag}
                if wanted:
                    headers['Content-Range'] = f'bytes {start}-{end - 1}/{len(data)}'
                body, status = data[start:end], 206 if wanted else 200
                if mode in ('truncate', 'stall'):
                    self._send(status, body[:len(body) // 2], headers, length=len(body))
                    if mode == 'stall':
                        server._stopped.wait(10)
                    return
                if mode.startswith('no_length'):
                    cut = len(body) // 2 if mode == 'no_length_truncate' and not wanted else None
                    self._send(status, body[:cut], headers, length=False)
                    return
                self._send(status, body, headers)

            def _send(self, status: int, body: bytes, headers: dict, length=None) -> None:
                """``length``: the Content-Length to announce (None: the body's;
                False: none, the body ends when the connection closes)."""
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if length is not False:
                    self.send_header('Content-Length', str(len(body) if length is None else length))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

        return Handler
