"""Writes a JSON body from a stand-in http.server handler."""

import json


def reply_json(handler, obj, status=200):
    data = json.dumps(obj).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
