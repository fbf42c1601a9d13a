"""An OTLP/HTTP trace receiver for `cargo xtask it otlp`.

    python otlp_receiver.py PORT_FILE

Listens on a free loopback port (written to PORT_FILE), takes `POST /v1/traces` bodies in
OTLP/JSON, decodes each into `ExportTraceServiceRequest` with the official `opentelemetry-proto`
package (strictly: an unknown field or a wrong type is a 400), converting the hex trace and span
ids as the OTLP/JSON encoding requires, and answers `GET /spans` with every decoded span as JSON
(ids in hex, attributes as a dict, events, status, times), `GET /requests` with the number of
export requests it accepted.
"""

import base64
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

SPANS = []
REQUESTS = [0]


def hex_ids_to_base64(doc):
    """OTLP/JSON writes trace and span ids as hex; protobuf's JSON mapping reads bytes as base64."""
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if link.get(key):
                            link[key] = base64.b64encode(bytes.fromhex(link[key])).decode()


def value_of(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def decoded(req):
    out = []
    for rs in req.resource_spans:
        resource = {a.key: value_of(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append({
                    "resource": resource,
                    "scope": ss.scope.name,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "name": s.name,
                    "kind": s.kind,
                    "start_ns": s.start_time_unix_nano,
                    "end_ns": s.end_time_unix_nano,
                    "attributes": {a.key: value_of(a.value) for a in s.attributes},
                    "events": [
                        {"name": e.name, "time_ns": e.time_unix_nano,
                         "attributes": {a.key: value_of(a.value) for a in e.attributes}}
                        for e in s.events
                    ],
                    "status": {"code": s.status.code, "message": s.status.message},
                })
    return out


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/v1/traces":
            return self.reply(404, {"error": "not found"})
        if not self.headers.get("content-type", "").startswith("application/json"):
            return self.reply(415, {"error": "expected application/json"})
        try:
            doc = json.loads(body)
            hex_ids_to_base64(doc)
            req = ExportTraceServiceRequest()
            json_format.ParseDict(doc, req)
        except Exception as e:  # noqa: BLE001 - any decoding failure is the client's fault
            return self.reply(400, {"error": f"{type(e).__name__}: {e}"})
        SPANS.extend(decoded(req))
        REQUESTS[0] += 1
        self.reply(200, {})

    def do_GET(self):
        if self.path == "/spans":
            return self.reply(200, SPANS)
        if self.path == "/requests":
            return self.reply(200, {"requests": REQUESTS[0]})
        self.reply(404, {"error": "not found"})


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(sys.argv[1], "w") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
