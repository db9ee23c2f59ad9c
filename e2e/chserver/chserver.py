#!/usr/bin/env python3
"""chserver: ClickHouse's HTTP interface in front of the real ClickHouse engine (chdb).

There is no clickhouse-server binary on these machines, but the `chdb-core` package embeds
the full ClickHouse engine in-process. This server gives that engine the network face that
unmodified ClickHouse clients expect (the Rust `clickhouse` crate, Go's `clickhouse-go` over
HTTP, curl), following ClickHouse's HTTP interface documentation. The server never decodes
rows: INSERT bodies, in any input format the engine reads, are streamed to the engine as
they arrive. See README.md beside this file for what is and is not implemented.

The entry point: the command line, the users file and the server's lifetime. The roles live in
the modules beside it:

- `server.py`: the HTTP server (request handling, authentication, body reading, the engine);
- `sqltext.py`: the SQL lexer (where an INSERT's data starts, FORMAT clauses, statements);
- `blocks.py`: ClickHouse compressed block framing (`compress=1`, `decompress=1`);
- `native.py`: Native output for clients that announce a protocol revision;
- `httpcompression.py`: HTTP Content-Encoding of requests and responses;
- `errors.py`: ClickHouse-shaped errors and their HTTP statuses;
- `faults.py`: the chaos runner's fault switches (off unless `CHSERVER_FAULTS` names a file).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import sys
import threading
from http.server import ThreadingHTTPServer

import chdb

from errors import ENGINE_VERSION
from server import Engine, Handler

LOG = logging.getLogger("chserver")


def load_users(path: str) -> dict[str, str]:
    users = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                name, _, password = line.partition(":")
                users[name] = password
    if not users:
        raise SystemExit(f"chserver: no users in {path}")
    return users


def handle_error(_request, client_address):
    """A client that goes away mid-response is routine; anything else is logged with its trace."""
    exc = sys.exc_info()[1]
    if isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        LOG.debug("%s: connection closed by the client: %s", client_address, exc)
    else:
        LOG.exception("unexpected error handling a request from %s", client_address)


class TLSServer(ThreadingHTTPServer):
    """The same handler behind TLS. The handshake runs in the request's own thread (not in
    `accept`), so a client that never finishes it cannot stall the listener."""

    def __init__(self, address, context: ssl.SSLContext):
        self.context = context
        super().__init__(address, Handler)

    def finish_request(self, request, client_address):
        request.settimeout(10)  # a handshake that never completes is dropped
        try:
            tls = self.context.wrap_socket(request, server_side=True)
            tls.settimeout(None)
        except (ssl.SSLError, OSError) as e:
            # Plaintext clients, unknown CAs and missing client certificates end here.
            LOG.info("%s: TLS handshake failed: %s", client_address, e)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            try:
                tls.close()
            except OSError:
                pass


def tls_servers(args) -> list[ThreadingHTTPServer]:
    """The HTTPS listeners asked for: `--https-listen` and `--mtls-listen` (client certificate
    required)."""
    servers = []
    for listen, mutual in ((args.https_listen, False), (args.mtls_listen, True)):
        if not listen:
            continue
        if not (args.tls_cert and args.tls_key) or (mutual and not args.tls_ca):
            raise SystemExit("chserver: HTTPS needs --tls-cert and --tls-key (and --tls-ca for mutual TLS)")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(args.tls_cert, args.tls_key)
        if mutual:
            ctx.load_verify_locations(args.tls_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        h, _, p = listen.rpartition(":")
        srv = TLSServer((h, int(p)), ctx)
        srv.handle_error = handle_error
        servers.append(srv)
        LOG.info("listening on https://%s:%s%s", h, p, " (client certificate required)" if mutual else "")
    return servers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:8123", help="host:port to listen on")
    ap.add_argument("--data", required=True, help="directory where the engine keeps its data")
    ap.add_argument("--users-file", required=True, help="file of `user:password` lines")
    ap.add_argument("--custom-disks-dir", help="ClickHouse's custom_local_disks_base_directory: where "
                    "tables may put local disks of their own (`SETTINGS disk = disk(type = 'local', …)`)")
    ap.add_argument("--log-level", default=os.environ.get("CHSERVER_LOG", "INFO"))
    ap.add_argument("--https-listen", help="host:port for HTTPS (needs --tls-cert/--tls-key)")
    ap.add_argument("--mtls-listen", help="host:port for HTTPS that requires a client certificate "
                    "signed by --tls-ca")
    ap.add_argument("--tls-cert", help="PEM certificate chain of the HTTPS listeners")
    ap.add_argument("--tls-key", help="PEM private key of the HTTPS listeners")
    ap.add_argument("--tls-ca", help="PEM CA bundle that client certificates must chain to")
    args = ap.parse_args()
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    host, _, port = args.listen.rpartition(":")
    os.makedirs(args.data, exist_ok=True)
    Handler.engine = Engine(os.path.abspath(args.data), load_users(args.users_file),
                            args.custom_disks_dir and os.path.abspath(args.custom_disks_dir))
    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer.request_queue_size = 128
    server = ThreadingHTTPServer((host, int(port)), Handler)
    server.handle_error = handle_error
    secured = tls_servers(args)

    def stop(signum, _frame):
        LOG.info("signal %s: shutting down", signum)
        for s in [server, *secured]:
            threading.Thread(target=s.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    LOG.info("chserver %s (ClickHouse engine %s via chdb) listening on http://%s:%s, data in %s",
             "0.1", chdb.engine_version if hasattr(chdb, "engine_version") else ENGINE_VERSION,
             host, port, args.data)
    for s in secured:
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    server.serve_forever(poll_interval=0.2)
    server.server_close()
    Handler.engine.close()
    LOG.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())

