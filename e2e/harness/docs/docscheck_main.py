"""Entry point of `e2e/docs-check`: every fenced block of README.md and docs/*.md checked.

Usage: python -m harness.docs.docscheck_main --helm HELM [--kubectl KUBECTL] [FILE…]
With --kubectl (an API server the CRD is installed on), every TracePipeline is also sent with
`kubectl apply --dry-run=server` into namespace `default`, so its CEL rules run too.
"""

from __future__ import annotations

import argparse
import glob
import pathlib
import subprocess
import sys
import tempfile

import yaml

from harness.docs.docscheck import SHELL, Block, Crd, Finding, blocks, broken_links, check_yaml, shell_text

CHART = "charts/tracehouse"


def run(cmd: list[str], stdin: str | None = None) -> tuple[int, str]:
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=120)
    return p.returncode, (p.stderr or p.stdout).strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--helm", required=True)
    ap.add_argument("--kubectl")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    files = args.files or ["README.md", *sorted(glob.glob("docs/*.md")), "charts/tracehouse/README.md"]
    crd = Crd.load(yaml.safe_load(pathlib.Path("crds/tracepipelines.yaml").read_text()))
    values_keys = set(yaml.safe_load(pathlib.Path(CHART, "values.yaml").read_text())) | {"global"}
    findings: list[Finding] = []
    counts = {"yaml": 0, "pipelines": 0, "values": 0, "shell": 0, "links": 0}
    for path in files:
        text = pathlib.Path(path).read_text()
        counts["links"] += 1
        findings += [Finding(Block(path, 0, "link", ""), f"broken link {e}") for e in broken_links(path, text)]
        for b in blocks(path, text):
            if b.lang in ("yaml", "yml"):
                counts["yaml"] += 1
                v = check_yaml(b, crd, values_keys)
                findings += v.findings
                counts["pipelines"] += len(v.pipelines)
                for values in v.values_files:
                    counts["values"] += 1
                    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                        f.write(values)
                        f.flush()
                        rc, err = run([args.helm, "template", "tracehouse", CHART, "--namespace",
                                       "tracehouse-system", "--kube-version", "1.36.0", "-f", f.name])
                    if rc != 0:
                        findings.append(Finding(b, f"helm template refuses these values: {err}"))
                if args.kubectl:
                    for p in v.pipelines:
                        p = dict(p, metadata=dict(p.get("metadata", {}), namespace="default"))
                        rc, err = run([args.kubectl, "apply", "--dry-run=server", "-f", "-"], yaml.safe_dump(p))
                        if rc != 0:
                            findings.append(Finding(b, f"the API server refuses it: {err}"))
            elif b.lang in SHELL:
                counts["shell"] += 1
                rc, err = run(["bash", "-n"], shell_text(b.text))
                if rc != 0:
                    findings.append(Finding(b, f"bash -n: {err}"))
    for f in findings:
        print(f, file=sys.stderr)
    server = "and the API server (dry run)" if args.kubectl else "offline (no API server: CEL rules not run)"
    print(f"docs-check: {len(files)} files; {counts['yaml']} yaml blocks ({counts['pipelines']} TracePipelines "
          f"checked against the CRD {server}, {counts['values']} Helm values files rendered); "
          f"{counts['shell']} shell blocks parsed; relative links resolved; {len(findings)} problems")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
