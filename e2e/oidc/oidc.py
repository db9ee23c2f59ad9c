#!/usr/bin/env python3
"""A stand-in OIDC provider for the stack's OAUTHBEARER listener: the client-credentials
grant only, with RS256 JWTs the broker's secured validator
(OAuthBearerValidatorCallbackHandler) accepts.

    oidc.py jwks  --key KEY.pem                   print the JWKS of the signing key
    oidc.py serve --key KEY.pem --client-id ID --client-secret-file FILE
                  [--port 0] [--cert CRT --cert-key KEY] [--lifetime SECONDS]

`serve` prints `listening <url>` once it accepts requests, then answers
POST /oauth2/token: HTTP basic authentication (or client_id/client_secret in the form) that
matches gets {access_token, token_type, expires_in}; a wrong client or secret 401
`invalid_client`; another grant 400 `unsupported_grant_type`. Each request is logged on
stderr with its status (`oidc: "POST /oauth2/token HTTP/1.1" 200 -`). The secret is read
from a file, never from the command line; nothing logs it.

The broker (e2e/lib/kafka.sh) reads the same key's JWKS from a file and expects ISSUER and
AUDIENCE. Standard library only: the key's numbers come from `openssl rsa -text` (openssl is
what e2e/lib/tls.sh makes the stack's certificates with), the signature is RSASSA-PKCS1-v1_5
over SHA-256 computed with Python's integers.
"""

import argparse
import base64
import hashlib
import http.server
import json
import re
import ssl
import subprocess
import sys
import time
import uuid
from urllib.parse import parse_qs

ISSUER = "https://oidc.tracehouse.local"
AUDIENCE = "kafka"
KID = "tracehouse-stack"
# DER of DigestInfo(SHA-256) before the hash (RFC 8017 §9.2, note 1).
SHA256_PREFIX = bytes.fromhex("3031300d060960864801650304020105000420")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def rsa_numbers(key_path: str) -> tuple[int, int, int]:
    """(n, e, d) of a PEM RSA private key."""
    text = subprocess.run(
        ["openssl", "rsa", "-in", key_path, "-noout", "-text"],
        check=True, capture_output=True, text=True,
    ).stdout

    def block(name: str) -> int:
        m = re.search(rf"^{name}:\s*\n((?:\s+[0-9a-f:]+\n)+)", text, re.M)
        if not m:
            raise SystemExit(f"{key_path}: no {name} in `openssl rsa -text`")
        return int(re.sub(r"[\s:]", "", m.group(1)), 16)

    e = re.search(r"^publicExponent: (\d+)", text, re.M)
    if not e:
        raise SystemExit(f"{key_path}: no publicExponent")
    return block("modulus"), int(e.group(1)), block("privateExponent")


def int_bytes(i: int, length: int) -> bytes:
    return i.to_bytes(length, "big")


def sign_rs256(message: bytes, n: int, d: int) -> bytes:
    k = (n.bit_length() + 7) // 8
    t = SHA256_PREFIX + hashlib.sha256(message).digest()
    em = b"\x00\x01" + b"\xff" * (k - len(t) - 3) + b"\x00" + t
    return int_bytes(pow(int.from_bytes(em, "big"), d, n), k)


def jwks(n: int, e: int) -> dict:
    k = (n.bit_length() + 7) // 8
    return {"keys": [{
        "kty": "RSA", "use": "sig", "alg": "RS256", "kid": KID,
        "n": b64url(int_bytes(n, k)), "e": b64url(int_bytes(e, (e.bit_length() + 7) // 8)),
    }]}


def jwt(claims: dict, n: int, d: int) -> str:
    header = {"alg": "RS256", "typ": "JWT", "kid": KID}
    signing_input = (b64url(json.dumps(header).encode()) + "." + b64url(json.dumps(claims).encode()))
    return signing_input + "." + b64url(sign_rs256(signing_input.encode(), n, d))


class Provider:
    def __init__(self, n, d, client_id, client_secret, lifetime):
        self.n, self.d = n, d
        self.client_id, self.client_secret = client_id, client_secret
        self.lifetime = lifetime

    def token(self, headers, body: str):
        """(status, JSON answer) of a token request."""
        form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
        client_id, secret = form.get("client_id"), form.get("client_secret")
        auth = headers.get("Authorization", "")
        if auth.startswith("Basic "):
            try:
                client_id, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
            except ValueError:
                client_id = secret = None
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type"}
        if client_id != self.client_id or secret != self.client_secret:
            return 401, {"error": "invalid_client", "error_description": "client authentication failed"}
        now = int(time.time())
        claims = {
            "iss": ISSUER, "aud": AUDIENCE, "sub": client_id, "iat": now,
            "exp": now + self.lifetime, "jti": str(uuid.uuid4()),
            "scope": form.get("scope", "kafka"),
        }
        return 200, {"access_token": jwt(claims, self.n, self.d), "token_type": "Bearer",
                     "expires_in": self.lifetime}


def serve(args):
    n, _e, d = rsa_numbers(args.key)
    with open(args.client_secret_file) as f:
        secret = f.read().rstrip("\r\n")
    provider = Provider(n, d, args.client_id, secret, args.lifetime)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self, status, doc):
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", "replace")
            if self.path.split("?")[0] != "/oauth2/token":
                return self.answer(404, {"error": "not_found"})
            self.answer(*provider.token(self.headers, body))

        def do_GET(self):
            self.answer(404, {"error": "not_found"})

        def log_message(self, fmt, *a):
            sys.stderr.write("oidc: %s\n" % (fmt % a))

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    scheme = "http"
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.cert_key)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    print(f"listening {scheme}://127.0.0.1:{server.server_address[1]}/oauth2/token", flush=True)
    server.serve_forever()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("jwks", help="print the JWKS of the signing key")
    j.add_argument("--key", required=True)
    s = sub.add_parser("serve", help="answer client-credentials token requests")
    s.add_argument("--key", required=True)
    s.add_argument("--client-id", required=True)
    s.add_argument("--client-secret-file", required=True)
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--cert")
    s.add_argument("--cert-key")
    s.add_argument("--lifetime", type=int, default=300)
    args = p.parse_args()
    if args.cmd == "jwks":
        n, e, _d = rsa_numbers(args.key)
        json.dump(jwks(n, e), sys.stdout)
        print()
    else:
        serve(args)


if __name__ == "__main__":
    main()
