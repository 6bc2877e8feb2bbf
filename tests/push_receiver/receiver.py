#!/usr/bin/env python3
"""A stand-in for a profile store, for rprof's push tests: listens on 127.0.0.1 (port 0: any free one, which
it writes to DIR/port), accepts POST /ingest as Pyroscope's ingest API takes it, and keeps each request in DIR
as N.json (path, query, headers, the form's sample_type_config) and N.pprof (the form's profile part); an OTLP
request (POST .../v1development/profiles) is kept as N.json and N.otlp (the body as sent).

    receiver.py DIR [PORT [CERT KEY]]

With CERT and KEY (PEM files) it serves https.
"""
import email.parser
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

DIR = sys.argv[1]
PORT = int(sys.argv[2]) if len(sys.argv) > 2 else 0
lock = threading.Lock()
count = [len([f for f in os.listdir(DIR) if f.endswith(".json")])]


def parts(content_type, body):
    msg = email.parser.BytesParser().parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    out = {}
    for part in msg.get_payload():
        name = part.get_param("name", header="content-disposition")
        out[name] = part.get_payload(decode=True)
    return out


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(length)
        url = urlsplit(self.path)
        if url.path.endswith("/v1development/profiles"):
            # An OTLP profiles request: kept as it came, N.otlp beside N.json.
            with lock:
                n = count[0]
                count[0] += 1
                with open(os.path.join(DIR, "%06d.otlp" % n), "wb") as f:
                    f.write(body)
                meta = {"path": url.path, "headers": {k: v for k, v in self.headers.items()}, "bytes": length}
                with open(os.path.join(DIR, "%06d.json" % n), "w") as f:
                    json.dump(meta, f)
            self.send_response(200)
            self.end_headers()
            return
        try:
            form = parts(self.headers.get("Content-Type", ""), body)
        except Exception as e:  # a malformed form is the sender's bug: refuse it
            self.send_response(400)
            self.end_headers()
            self.wfile.write(str(e).encode())
            return
        with lock:
            n = count[0]
            count[0] += 1
            with open(os.path.join(DIR, "%06d.pprof" % n), "wb") as f:
                f.write(form.get("profile", b""))
            meta = {
                "path": url.path,
                "query": {k: v[0] for k, v in parse_qs(url.query).items()},
                "headers": {k: v for k, v in self.headers.items()},
                "sample_type_config": json.loads(form.get("sample_type_config", b"null")),
                "bytes": length,
            }
            with open(os.path.join(DIR, "%06d.json" % n), "w") as f:
                json.dump(meta, f)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
if len(sys.argv) > 4:
    import ssl
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[3], sys.argv[4])
    server.socket = context.wrap_socket(server.socket, server_side=True)
with open(os.path.join(DIR, "port.tmp"), "w") as f:
    f.write(str(server.server_address[1]))
os.rename(os.path.join(DIR, "port.tmp"), os.path.join(DIR, "port"))
server.serve_forever()
