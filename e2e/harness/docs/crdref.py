"""docs/crd-reference.md from the CRD: the pure renderer behind `e2e/crd-reference`.

The CRD (`crds/tracepipelines.yaml`) is generated from the operator's Rust types, so their doc
comments, defaults, bounds, enums and CEL rules are already in its OpenAPI schema; this turns
that schema into one Markdown table per object, spec first, then status. Kubernetes' own types
embedded in the spec (affinity, tolerations, resources, …) are named and linked, not expanded.
"""

from __future__ import annotations

import json

HEADER = ("<!-- Generated from crds/tracepipelines.yaml by `e2e/crd-reference` — do not edit; "
          "run e2e/crd-reference and commit. -->\n")

K8S_API = "https://kubernetes.io/docs/reference/kubernetes-api/"
# Fields whose schema is a Kubernetes type: shown by name, with its reference page.
KUBERNETES_TYPES = {
    "affinity": ("Affinity", "workload-resources/pod-v1/#scheduling"),
    "env": ("[]EnvVar", "workload-resources/pod-v1/#environment-variables"),
    "resources": ("ResourceRequirements", "workload-resources/pod-v1/#resources"),
    "tolerations": ("[]Toleration", "workload-resources/pod-v1/#scheduling"),
    "topologySpreadConstraints": ("[]TopologySpreadConstraint", "workload-resources/pod-v1/#scheduling"),
    "conditions": ("[]Condition", "common-definitions/object-meta/"),
    "imagePullSecrets": ("[]LocalObjectReference", "common-definitions/local-object-reference/"),
    "securityContext": ("SecurityContext", "workload-resources/pod-v1/#security-context-1"),
    "podSecurityContext": ("PodSecurityContext", "workload-resources/pod-v1/#security-context"),
}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _is_object(node: dict) -> bool:
    return node.get("type") == "object" and bool(node.get("properties"))


def type_of(name: str, node: dict) -> str:
    """The field's type as a reader needs it."""
    if name in KUBERNETES_TYPES:
        kind, page = KUBERNETES_TYPES[name]
        return f"[{kind}]({K8S_API}{page})"
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    t = node.get("type", "any")
    if t == "array":
        item = node.get("items", {})
        return f"[]{'object' if _is_object(item) else type_of('', item)}"
    if t == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map[string]{type_of('', node['additionalProperties'])}"
    if node.get("format") and t in ("integer", "string"):
        return f"{t} ({node['format']})"
    return t


def _num(v) -> str:
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


def constraints(node: dict) -> list[str]:
    """Bounds, enums, patterns and CEL rules, each a short sentence."""
    out = []
    if "enum" in node:
        out.append("One of " + ", ".join(f"`{v}`" for v in node["enum"]) + ".")
    lo, hi = node.get("minimum"), node.get("maximum")
    if lo is not None or hi is not None:
        out.append(f"Range {_num(lo) if lo is not None else '…'} to {_num(hi) if hi is not None else '…'}.")
    lo, hi = node.get("minLength"), node.get("maxLength")
    if lo is not None or hi is not None:
        out.append(f"Length {lo or 0} to {hi if hi is not None else '…'}.")
    if node.get("minItems") is not None or node.get("maxItems") is not None:
        out.append(f"Items {node.get('minItems', 0)} to {node.get('maxItems', '…')}.")
    if "pattern" in node:
        out.append(f"Pattern `{node['pattern']}`.")
    for rule in node.get("x-kubernetes-validations", []):
        out.append(f"Rule: {rule.get('message') or rule['rule']}")
    return out


def _default(node: dict) -> str:
    if "default" not in node:
        return ""
    return f"`{json.dumps(node['default'], separators=(', ', ': '))}`"


def sections(node: dict, path: str) -> list[tuple[str, dict]]:
    """Every object to give a table, depth first in field order: (path, schema)."""
    out = [(path, node)]
    for name, child in (node.get("properties") or {}).items():
        if name in KUBERNETES_TYPES:
            continue
        sub = f"{path}.{name}"
        if _is_object(child):
            out += sections(child, sub)
        elif child.get("type") == "array" and _is_object(child.get("items", {})):
            out += sections(child["items"], sub + "[]")
    return out


def table(path: str, node: dict) -> str:
    lines = [f"### `{path}`", ""]
    if node.get("description"):
        lines += [_cell(node["description"]), ""]
    for rule in node.get("x-kubernetes-validations", []):
        lines += [f"- Rule: {_cell(rule.get('message') or rule['rule'])}"]
    if node.get("x-kubernetes-validations"):
        lines.append("")
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    required = set(node.get("required", []))
    for name, child in (node.get("properties") or {}).items():
        link = ""
        if name not in KUBERNETES_TYPES and (_is_object(child) or (
                child.get("type") == "array" and _is_object(child.get("items", {})))):
            sub = f"{path}.{name}" + ("[]" if child.get("type") == "array" else "")
            link = f" ([fields](#{anchor(sub)}))"
        desc = _cell(child.get("description", ""))
        extra = (["**Required.**"] if name in required else []) + [_cell(c) for c in constraints(child)]
        text = " ".join([desc, *extra]).strip() + link
        lines.append(f"| `{name}` | {type_of(name, child)} | {_default(child)} | {text} |")
    return "\n".join(lines) + "\n"


def anchor(path: str) -> str:
    """GitHub's heading anchor for `### \\`path\\``: lower case, punctuation dropped."""
    return "".join(c for c in path.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


def render(crd: dict) -> str:
    names = crd["spec"]["names"]
    parts = [HEADER, f"# {names['kind']} reference", ""]
    for version in crd["spec"]["versions"]:
        group = crd["spec"]["group"]
        schema = version["schema"]["openAPIV3Schema"]
        parts += [
            f"`apiVersion: {group}/{version['name']}`, `kind: {names['kind']}` "
            f"({crd['spec']['scope']}; short name {', '.join(f'`{s}`' for s in names.get('shortNames', []))}; "
            f"`kubectl explain {names['plural']}.spec` shows the same text).",
            "",
            _cell(schema.get("description", "")),
            "",
        ]
        meta = schema.get("properties", {}).get("metadata", {}).get("properties", {}).get("name")
        if meta:
            parts += [f"`metadata.name`: {_cell(meta.get('description', ''))} "
                      + " ".join(constraints(meta)), ""]
        columns = version.get("additionalPrinterColumns", [])
        if columns:
            parts += ["`kubectl get` columns (wide adds those of priority 1):", "",
                      "| column | from | priority |", "|---|---|---|"]
            parts += [f"| {c['name']} | `{_cell(c['jsonPath'])}` | {c.get('priority', 0)} |" for c in columns]
            parts.append("")
        for top in ("spec", "status"):
            node = schema.get("properties", {}).get(top)
            if not node:
                continue
            parts += [f"## {top}", ""]
            for path, sub in sections(node, top):
                parts.append(table(path, sub))
    return "\n".join(parts).rstrip() + "\n"
