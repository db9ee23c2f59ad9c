"""Entry point of `e2e/crd-reference [--check]`: crds/tracepipelines.yaml → docs/crd-reference.md."""

import pathlib
import sys

import yaml

from harness.docs.crdref import render

CRD = pathlib.Path("crds/tracepipelines.yaml")
OUT = pathlib.Path("docs/crd-reference.md")


def main(argv: list[str]) -> int:
    want = render(yaml.safe_load(CRD.read_text()))
    if argv[1:] == ["--check"]:
        if not OUT.exists() or OUT.read_text() != want:
            print(f"{OUT} is stale with {CRD}: run e2e/crd-reference and commit", file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print("usage: e2e/crd-reference [--check]", file=sys.stderr)
        return 2
    OUT.write_text(want)
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
