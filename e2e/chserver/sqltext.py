"""The little SQL chserver has to understand, without parsing SQL: a lexer that knows string
literals, quoted identifiers, comments and parentheses, and what is built on it — where an
INSERT's data starts (`FORMAT <name>` / `VALUES`), the `FORMAT` clause that ends a query,
several statements in one request, a statement's first word, and quoting of strings and
identifiers for the statements chserver writes itself (`SET`, `USE`).
"""

from __future__ import annotations

import re


def _skip_quoted(text: str, i: int, quote: str) -> int:
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == quote:
            if i + 1 < len(text) and text[i + 1] == quote:
                i += 2
                continue
            return i + 1
        i += 1
    return i


def _tokens(text: str):
    """Yield (token, start, end) outside literals and comments: bare words (upper-cased) and
    single punctuation characters; quoted strings and identifiers are skipped."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            i = _skip_quoted(text, i, c)
        elif text.startswith("--", i) or c == "#":
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c.isalpha() or c == "_":
            j = i
            while j < n and (text[j].isalnum() or text[j] == "_"):
                j += 1
            yield text[i:j].upper(), i, j
            i = j
        else:
            if not c.isspace():
                yield c, i, i + 1
            i += 1


def top_level_words(text: str):
    """Yield (word_upper, start, end) of bare words outside literals and comments."""
    for tok, start, end in _tokens(text):
        if tok[0].isalpha() or tok[0] == "_":
            yield tok, start, end


def first_word(text: str) -> str:
    for word, _, _ in top_level_words(text):
        return word
    return ""


def _clause_words(text: str):
    """Yield (word_upper, start, end) of the bare words outside parentheses (so a column named
    `format` or `values` in an INSERT's column list is not taken for the clause)."""
    depth = 0
    for tok, start, end in _tokens(text):
        if tok == "(":
            depth += 1
        elif tok == ")":
            depth = max(depth - 1, 0)
        elif depth == 0 and (tok[0].isalpha() or tok[0] == "_"):
            yield tok, start, end


def split_insert(text: str):
    """For `INSERT … FORMAT X <data>` / `INSERT … VALUES <data>` return (statement, format, data_offset).

    Returns None for an INSERT that carries no data (INSERT … SELECT), or while the text does
    not yet reach the format name.
    """
    words = _clause_words(text)
    for word, start, end in words:
        if word == "VALUES":
            return text[:start].rstrip(), "Values", end
        if word == "FORMAT":
            # The format name is the next token, which must be a word.
            for tok, fstart, fend in _tokens(text[end:]):
                if not (tok[0].isalpha() or tok[0] == "_"):
                    return None
                fmt_end = end + fend
                fmt = text[end + fstart:fmt_end]
                break
            else:
                return None
            # Data begins after the format name, skipping blanks up to and including one newline.
            j = fmt_end
            while j < len(text) and text[j] in " \t\r":
                j += 1
            if j < len(text) and text[j] == "\n":
                j += 1
            return text[:start].rstrip(), fmt, j
        if word == "SELECT" or word == "WITH":
            return None
    return None


def _only_blanks(text: str) -> bool:
    """True when text holds nothing but blanks, comments and semicolons."""
    return all(tok == ";" for tok, _, _ in _tokens(text))


def format_clause(text: str):
    """The `FORMAT <name>` clause that ends a query (optionally followed by SETTINGS):
    (name, start, end), or None when the query names no output format."""
    words = list(_clause_words(text))
    for k in range(len(words) - 1, -1, -1):
        word, start, end = words[k]
        if word != "FORMAT" or k + 1 == len(words):
            continue
        _, nstart, nend = words[k + 1]
        if text[end:nstart].strip():
            continue
        rest_end = words[k + 2][1] if k + 2 < len(words) else len(text)
        if k + 2 < len(words) and words[k + 2][0] != "SETTINGS":
            continue
        if not _only_blanks(text[nend:rest_end]):
            continue
        return text[nstart:nend], start, nend
    return None


def multi_statement_at(text: str) -> int | None:
    """Offset of the `;` that ends the first of several statements, or None for one statement."""
    end = None
    for tok, start, _ in _tokens(text):
        if tok == ";":
            if end is None:
                end = start
        elif end is not None:
            return end
    return None


def strip_trailing_semicolon(text: str) -> str:
    last = None
    for tok, start, _ in _tokens(text):
        last = (tok, start)
    if last and last[0] == ";":
        return text[:last[1]] + text[last[1] + 1:]
    return text


def quote_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _identifier(text: str, i: int):
    """(name, end) of the identifier at text[i] (bare, `back-quoted` or "double-quoted"), or None."""
    if i < len(text) and text[i] in "`\"":
        end = _skip_quoted(text, i, text[i])
        q = text[i]
        raw = text[i + 1:end - 1]
        return re.sub(r"\\(.)", r"\1", raw).replace(q + q, q), end
    m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(text, i)
    return (m.group(0), m.end()) if m else None


def insert_target(statement: str):
    """(database or None, table) that `INSERT INTO [TABLE] [db.]table …` writes to, or None for
    `INSERT INTO FUNCTION …` and text that names no table."""
    words = top_level_words(statement)
    first = next(words, None)
    second = next(words, None)
    if not first or first[0] != "INSERT" or not second or second[0] != "INTO":
        return None
    i = second[2]
    ws = re.compile(r"\s*")
    i = ws.match(statement, i).end()
    m = re.compile(r"(?i)(TABLE|FUNCTION)\b").match(statement, i)
    if m:
        if m.group(1).upper() == "FUNCTION":
            return None
        i = ws.match(statement, m.end()).end()
    name = _identifier(statement, i)
    if name is None:
        return None
    j = ws.match(statement, name[1]).end()
    if statement.startswith(".", j):
        table = _identifier(statement, ws.match(statement, j + 1).end())
        return (name[0], table[0]) if table else None
    return None, name[0]


SETTING_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def infile_statement(statement: str, path: str, fmt: str) -> str:
    """`INSERT INTO t [(cols)] [SETTINGS …]` as `INSERT INTO t [(cols)] FROM INFILE '<path>'
    COMPRESSION 'gzip' [SETTINGS …] FORMAT <fmt>`: ClickHouse's grammar puts FROM INFILE before
    the SETTINGS clause."""
    at = len(statement.rstrip())
    for word, start, _ in _clause_words(statement):
        if word == "SETTINGS":
            at = start
            break
    head, tail = statement[:at].rstrip(), statement[at:].strip()
    return (f"{head} FROM INFILE {quote_string(path)} COMPRESSION 'gzip'"
            f"{' ' + tail if tail else ''} FORMAT {fmt}")
