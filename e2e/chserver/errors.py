"""ClickHouse-shaped errors: the exception chserver reports to clients, the HTTP status of each
exception name, and the translation of the engine's (chdb's) exception text into one.

The body of an error is ClickHouse's text, `Code: N. DB::Exception: <message> (<NAME>) (version
…)`; the status follows ClickHouse's `exceptionCodeToHTTPStatus`.
"""

from __future__ import annotations

import re

ENGINE_VERSION = "26.9.2.1"

# HTTP statuses by exception name, as ClickHouse's exceptionCodeToHTTPStatus maps them.
STATUS_BY_NAME = {
    **{n: 401 for n in ("REQUIRED_PASSWORD",)},
    **{n: 403 for n in ("UNKNOWN_USER", "WRONG_PASSWORD", "AUTHENTICATION_FAILED",
                        "SET_NON_GRANTED_ROLE", "ACCESS_DENIED")},
    **{n: 400 for n in (
        "BAD_ARGUMENTS", "CANNOT_COMPILE_REGEXP", "CANNOT_PARSE_TEXT", "CANNOT_PARSE_ESCAPE_SEQUENCE",
        "CANNOT_PARSE_QUOTED_STRING", "CANNOT_PARSE_DATE", "CANNOT_PARSE_DATETIME",
        "CANNOT_PARSE_NUMBER", "CANNOT_PARSE_DOMAIN_VALUE_FROM_STRING", "CANNOT_PARSE_IPV4",
        "CANNOT_PARSE_IPV6", "CANNOT_PARSE_INPUT_ASSERTION_FAILED", "CANNOT_PARSE_UUID",
        "DUPLICATE_COLUMN", "ILLEGAL_COLUMN", "UNKNOWN_ELEMENT_IN_AST", "UNKNOWN_TYPE_OF_AST_NODE",
        "THERE_IS_NO_COLUMN", "TOO_DEEP_AST", "TOO_BIG_AST", "UNEXPECTED_AST_STRUCTURE",
        "SYNTAX_ERROR", "INCORRECT_DATA", "TYPE_MISMATCH", "VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE")},
    **{n: 404 for n in (
        "UNKNOWN_TABLE", "UNKNOWN_FUNCTION", "UNKNOWN_IDENTIFIER", "UNKNOWN_TYPE",
        "UNKNOWN_STORAGE", "UNKNOWN_DATABASE", "UNKNOWN_SETTING", "UNKNOWN_DIRECTION_OF_SORTING",
        "UNKNOWN_AGGREGATE_FUNCTION", "UNKNOWN_FORMAT", "UNKNOWN_DATABASE_ENGINE",
        "UNKNOWN_TYPE_OF_QUERY", "UNKNOWN_ROLE")},
    "QUERY_IS_TOO_LARGE": 413,
    "NOT_IMPLEMENTED": 501,
    "SOCKET_TIMEOUT": 503,
    "CANNOT_OPEN_FILE": 503,
    "CANNOT_SCHEDULE_TASK": 503,
    "HTTP_LENGTH_REQUIRED": 411,
    "TIMEOUT_EXCEEDED": 408,
    "UNSUPPORTED_MEDIA_TYPE": 415,
}


class CHError(Exception):
    """An error reported to the client the way ClickHouse reports it."""

    def __init__(self, code: int, name: str, message: str):
        super().__init__(message)
        self.code, self.name, self.message = code, name, message

    def body(self) -> bytes:
        return (f"Code: {self.code}. DB::Exception: {self.message} ({self.name}) "
                f"(version {ENGINE_VERSION} (chserver))\n").encode()

    @property
    def status(self) -> int:
        return STATUS_BY_NAME.get(self.name, 500)


ENGINE_ERROR = re.compile(r"Code: (\d+)\. DB::Exception: (.*)", re.S)
TRAILING_NAME = re.compile(r"\s*\(([A-Z_0-9]+)\)(?:\s*\(version [^)]*\))?\s*$")


# A data error of `INSERT … FROM INFILE` (infile.py) is raised on the engine's client side,
# which wraps the engine's whole text once more: `Code: N. DB::Exception: <text> (NAME) (version
# …). (NAME)`, where <text> is itself `Code: N. DB::Exception: …`.
CLIENT_WRAPPED = re.compile(r"Code: (\d+)\. DB::Exception: (Code: \1\. DB::Exception: .*)\. \([A-Z_0-9]+\)\s*$", re.S)


def without_infile(text: str, path: str) -> str:
    """The engine's text of an INSERT whose body came through chserver's FIFO at `path`, as a
    server that read the body itself words it: without the client-side wrapping and without
    the parts that name the FIFO (`(in file/uri <path>)`, `While executing File: data for
    INSERT was parsed from file`)."""
    m = CLIENT_WRAPPED.match(text.strip())
    if m:
        text = m.group(2)
    for fragment in (f" (in file/uri {path}):", f"(in file/uri {path}): ", f"While reading from: {path}: ",
                     f"While reading from: {path}", ": While executing File: data for INSERT was parsed from file"):
        text = text.replace(fragment, "")
    return text


def engine_error(exc: Exception, infile: str | None = None) -> CHError:
    """Turn an exception raised by chdb into a ClickHouse-shaped error (`infile`: the FIFO the
    INSERT's body came through, see `without_infile`)."""
    text = str(exc)
    if infile:
        text = without_infile(text, infile)
    m = ENGINE_ERROR.search(text)
    if not m:
        return CHError(1001, "STD_EXCEPTION", text.strip() or type(exc).__name__)
    code, message = int(m.group(1)), m.group(2).strip()
    name = "UNKNOWN_EXCEPTION"
    n = TRAILING_NAME.search(message)
    if n:
        name, message = n.group(1), message[: n.start()].rstrip()
    return CHError(code, name, message)


ENGINE_USER = "default"  # every chdb connection runs as this user (chdb authenticates it so)
READONLY_TEXT = "Cannot execute query in readonly mode"


def as_request(err: CHError, user: str, http_get: bool) -> CHError:
    """An engine error worded as a server that ran the query for this request words it: the
    engine names its own user in access errors (`default: Cannot execute query in readonly
    mode`); ClickHouse names the request's user, and for an HTTP GET says why (ContextAccess)."""
    if err.name == "READONLY" and err.message.startswith(f"{ENGINE_USER}: {READONLY_TEXT}"):
        message = f"{user}: {READONLY_TEXT}"
        if http_get:
            message += (". For queries over HTTP, method GET implies readonly. "
                        "You should use method POST for modifying queries")
        return CHError(err.code, err.name, message)
    return err
