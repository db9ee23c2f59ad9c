"""chserver with the engine's query log on: e2e/grants-probe's private ClickHouse.

The stack's chserver runs every statement as the engine's one internal user and the embedded
engine has no writable access storage (`CREATE USER` fails with
ACCESS_STORAGE_FOR_INSERTION_NOT_FOUND), so a user with only some GRANTs cannot be made here.
What the engine does record, with `system.query_log` configured, is every privilege it checked
for each statement (`used_privileges`). This wrapper starts chserver unchanged, its engine
given a configuration file that turns the query log on; e2e/grants-probe reads the log.

Usage: logged_chserver.py CONFIG_XML <chserver arguments…>
"""

import sys

import chdb

CONFIG = sys.argv.pop(1)
_connect = chdb.connect


def connect(dsn="", *args, **kwargs):
    # The engine reads its configuration once, at the first connection; later ones share it.
    sep = "&" if "?" in dsn else "?"
    return _connect(f"{dsn}{sep}config-file={CONFIG}", *args, **kwargs)


chdb.connect = connect

import chserver  # noqa: E402  (after the patch: its engine connects through it)

if __name__ == "__main__":
    sys.exit(chserver.main())
