#!/usr/bin/env python3
"""Pod discovery for the local stack's Prometheus, as file_sd target files.

Debian's Prometheus is built without `kubernetes_sd_configs`, so this small process does what
that discovery would: every --interval seconds it lists the pods of the API server (with a
ServiceAccount token that may only read pods), keeps Running pods labelled
app.kubernetes.io/part-of=tracehouse that declare a container port named `metrics`, and writes
one file_sd file per app (`<out>/tracehouse-collector.json`, `<out>/tracehouse-operator.json`)
with the labels the dashboards and alerts read: namespace, pod, pipeline. A file is replaced
atomically and only when it changes; Prometheus picks it up through its file watch.

Standard library only. Runs until SIGTERM; a failed listing is logged and retried.
"""

import argparse
import json
import os
import ssl
import sys
import time
import urllib.request

APPS = ("tracehouse-collector", "tracehouse-operator")
PIPELINE_LABEL = "tracehouse.dev/pipeline"


def targets(pods: dict) -> dict[str, list]:
    """file_sd groups per app, from a PodList."""
    out: dict[str, list] = {app: [] for app in APPS}
    for pod in pods.get("items", []):
        meta, spec, status = pod["metadata"], pod.get("spec", {}), pod.get("status", {})
        labels = meta.get("labels", {})
        app = labels.get("app.kubernetes.io/name")
        if app not in out or status.get("phase") != "Running" or not status.get("podIP"):
            continue
        if meta.get("deletionTimestamp"):
            continue
        for c in spec.get("containers", []):
            for p in c.get("ports", []) or []:
                if p.get("name") != "metrics":
                    continue
                group_labels = {"namespace": meta["namespace"], "pod": meta["name"]}
                if PIPELINE_LABEL in labels:
                    group_labels["pipeline"] = labels[PIPELINE_LABEL]
                out[app].append(
                    {"targets": [f"{status['podIP']}:{p['containerPort']}"], "labels": group_labels}
                )
    for groups in out.values():
        groups.sort(key=lambda g: g["targets"])
    return out


def write_if_changed(path: str, content: str) -> None:
    try:
        with open(path) as f:
            if f.read() == content:
                return
    except FileNotFoundError:
        pass
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(content)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api-server", required=True)
    ap.add_argument("--ca-file", required=True)
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--interval", type=float, default=2.0)
    args = ap.parse_args()
    ctx = ssl.create_default_context(cafile=args.ca_file)
    url = f"{args.api_server}/api/v1/pods?labelSelector=app.kubernetes.io%2Fpart-of%3Dtracehouse"
    failing = False
    while True:
        try:
            with open(args.token_file) as f:
                token = f.read().strip()
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
                pods = json.load(resp)
            for app, groups in targets(pods).items():
                write_if_changed(os.path.join(args.out_dir, f"{app}.json"), json.dumps(groups, indent=1) + "\n")
            if failing:
                print("pod listing works again", flush=True)
            failing = False
        except Exception as e:  # noqa: BLE001 — any failure: log once, keep the last files, retry
            if not failing:
                print(f"cannot list pods from {args.api_server}: {e}", file=sys.stderr, flush=True)
            failing = True
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
