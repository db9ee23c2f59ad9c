"""e2e/chaos (chaos.py): the fault matrix, faults injected into processes the runner starts and
judged by `tracehouse-loadgen verify`; cases in cases.py, operator_cases.py, production_cases.py."""
