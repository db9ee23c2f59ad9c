"""The harness: the Python that drives tracehouse through the stand-ins and judges what comes out
(e2e/README.md). One package, imported as `harness.…` with e2e/ on the path — e2e/lib/venv.sh
sets PYTHONPATH once for every runner — and run as `python -m harness.<package>.<module>`.

`procs.py` (child processes stopped on every exit path, commands with a deadline, /proc) and
`stack.py` (the local stack's services) are what the runners share. The stand-ins (chserver,
the node agent, Kafka, …) live apart from it and import nothing from here.
"""

from pathlib import Path

E2E = Path(__file__).resolve().parent.parent
REPO = E2E.parent
