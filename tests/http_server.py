"""A small HTTP server on 127.0.0.1 for the tests that download: it serves
files from memory and can misbehave on purpose (never a real host).

    with FileServer() as server:
        server.files['/a.pth'] = data
        server.modes['/a.pth'] = 'truncate'
        url = server.url('/a.pth')
"""
from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: what :class:`FileServer` does for a path (default ``'ok'``)
MODES = {
    'ok': 'the file; a Range request gets 206 and the rest',
    'no_range': 'the whole file with 200, whatever Range asks',
    'html': 'an HTML page with Content-Type text/html',
    'html_as_binary': 'an HTML page with Content-Type application/octet-stream',
    'truncate': 'Content-Length of the whole file, half of it, then the connection closes',
    'stall': 'half of the file, then nothing until the server stops',
    'slow': 'the file after a pause of 0.3 s',
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
                wanted = re.fullmatch(r'bytes=(\d+)-', self.headers.get('Range', ''))
                start = int(wanted.group(1)) if wanted and mode != 'no_range' else 0
                if start >= len(data) > 0:
                    self._send(416, b'', {'Content-Range': f'bytes */{len(data)}'})
                    return
                headers = {'Content-Type': 'application/octet-stream', 'Accept-Ranges': 'bytes'}
                if start:
                    headers['Content-Range'] = f'bytes {start}-{len(data) - 1}/{len(data)}'
                body = data[start:]
                if mode in ('truncate', 'stall'):
                    self._send(206 if start else 200, body[:len(body) // 2], headers,
                               length=len(body))
                    if mode == 'stall':
                        server._stopped.wait(10)
                    return
                self._send(206 if start else 200, body, headers)

            def _send(self, status: int, body: bytes, headers: dict, length=None) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header('Content-Length', str(len(body) if length is None else length))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

        return Handler
