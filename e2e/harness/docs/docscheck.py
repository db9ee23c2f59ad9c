"""The pure half of `e2e/docs-check`: fenced blocks of Markdown, and what each must pass.

Every fenced block of README.md and docs/*.md is taken by its info string:

- `yaml`: every document parses. A `TracePipeline` validates against the CRD's OpenAPI schema
  (made strict: a field the schema does not list is an error, as `kubectl apply
  --validate=strict` would say; the CEL rules need an API server, see `e2e/docs-check`). A
  document whose top-level keys are all keys of the chart's values.yaml is a Helm values file,
  rendered by the caller with `helm template`. Anything else (a Secret, a Strimzi KafkaUser,
  an OpenTelemetry Collector configuration) only has to parse.
- `bash`, `sh`, `shell`: the caller runs `bash -n` on it, placeholders such as `<name>` or
  `<registry>` first replaced by a word (`shell_text`): a reader fills them in, and bash
  would read them as redirections.

Outside the blocks, every relative link must name a file that exists and, for a Markdown
file, a heading it has (`broken_links`, GitHub's anchors).
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass, field

import jsonschema
import yaml

SHELL = {"bash", "sh", "shell"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")


_PLACEHOLDER = re.compile(r"<([A-Za-z][\w.-]*)>")


def shell_text(text: str) -> str:
    """A shell block as bash should parse it: each `<placeholder>` becomes `PLACEHOLDER_name`.
    Here-strings and redirections have no letter right after `<` followed by a closing `>`."""
    return _PLACEHOLDER.sub(lambda m: "PLACEHOLDER_" + re.sub(r"\W", "_", m[1]), text)


@dataclass
class Block:
    path: str
    line: int  # 1-based line of the opening fence
    lang: str
    text: str

    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: str, markdown: str) -> list[Block]:
    """Every fenced block, with the first word of its info string as the language."""
    out: list[Block] = []
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        lang = (m["info"].strip().split() or [""])[0].lower()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        out.append(Block(path, i + 1, lang, "\n".join(body) + "\n"))
        i = j + 1
    return out


def openapi_to_jsonschema(node, strict: bool = True, under_metadata: bool = False):
    """A CRD's structural OpenAPI v3 schema as JSON Schema: `nullable` becomes a null type,
    and (when strict) an object with listed properties refuses others, except under
    `metadata`, of which a CRD lists only what it constrains."""
    if isinstance(node, list):
        return [openapi_to_jsonschema(n, strict, under_metadata) for n in node]
    if not isinstance(node, dict):
        return node
    node = copy.copy(node)
    if node.pop("nullable", False) and "type" in node:
        node["type"] = [node["type"], "null"]
    if node.get("x-kubernetes-int-or-string"):
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if "properties" in node:
        node["properties"] = {k: openapi_to_jsonschema(v, strict, under_metadata or k == "metadata")
                              for k, v in node["properties"].items()}
        if strict and not under_metadata and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            node[key] = openapi_to_jsonschema(node[key], strict, under_metadata)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node and isinstance(node[key], list):
            node[key] = openapi_to_jsonschema(node[key], strict, under_metadata)
    return node


@dataclass
class Crd:
    """A CRD's kind and, per served version, its schema as JSON Schema."""

    group: str
    kind: str
    schemas: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, crd: dict) -> "Crd":
        spec = crd["spec"]
        c = cls(spec["group"], spec["names"]["kind"])
        for v in spec["versions"]:
            c.schemas[f"{spec['group']}/{v['name']}"] = openapi_to_jsonschema(v["schema"]["openAPIV3Schema"])
        return c

    def validate(self, doc: dict) -> list[str]:
        """Errors of one object of this kind; [] when it is valid."""
        schema = self.schemas.get(doc.get("apiVersion", ""))
        if schema is None:
            return [f"apiVersion {doc.get('apiVersion')!r} is not served (served: {', '.join(self.schemas)})"]
        body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
        v = jsonschema.Draft7Validator(schema)
        return [f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
                for e in sorted(v.iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))]


@dataclass
class Finding:
    block: Block
    message: str

    def __str__(self) -> str:
        return f"{self.block.where()}: {self.message}"


@dataclass
class YamlVerdict:
    """What one yaml block holds, for the checks that need a tool (helm, an API server)."""

    findings: list[Finding] = field(default_factory=list)
    values_files: list[str] = field(default_factory=list)  # Helm values, as YAML text
    pipelines: list[dict] = field(default_factory=list)  # TracePipelines that passed the schema


def check_yaml(block: Block, crd: Crd, values_keys: set[str]) -> YamlVerdict:
    out = YamlVerdict()
    try:
        docs = [d for d in yaml.safe_load_all(block.text) if d is not None]
    except yaml.YAMLError as e:
        out.findings.append(Finding(block, f"does not parse as YAML: {' '.join(str(e).split())}"))
        return out
    for doc in docs:
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == crd.kind and str(doc.get("apiVersion", "")).startswith(crd.group + "/"):
            errors = crd.validate(doc)
            out.findings += [Finding(block, f"{crd.kind} {doc.get('metadata', {}).get('name')}: {e}") for e in errors]
            if not errors:
                out.pipelines.append(doc)
        elif "apiVersion" not in doc and "kind" not in doc and doc and set(doc) <= values_keys:
            out.values_files.append(yaml.safe_dump(doc))
    return out


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces
    to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(markdown: str) -> set[str]:
    """The anchors of a document's headings (outside fenced blocks)."""
    out, fenced = set(), False
    for line in markdown.split("\n"):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(anchor(line.lstrip("#")))
    return out


def _prose(markdown: str) -> str:
    """The text outside fenced blocks and inline code, where links are links."""
    kept, fenced = [], False
    for line in markdown.split("\n"):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            continue
        if not fenced:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def broken_links(path: str, markdown: str, read=None) -> list[str]:
    """Relative links of `path` whose file is missing, or whose `#anchor` the target lacks.
    `read(path)` gives another document's text (default: the file system)."""
    exists = os.path.exists if read is None else (lambda p: _readable(read, p))
    read = read or (lambda p: open(p, encoding="utf-8").read())
    out = []
    for m in _LINK.finditer(_prose(markdown)):
        target = m[1]
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file, _, frag = target.partition("#")
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not exists(resolved):
            out.append(f"{target}: {resolved} does not exist")
        elif frag and resolved.endswith(".md") and frag not in headings(read(resolved)):
            out.append(f"{target}: {resolved} has no heading #{frag}")
    return out


def _readable(read, p) -> bool:
    if os.path.isdir(p):
        return True
    try:
        read(p)
        return True
    except OSError:
        return False
