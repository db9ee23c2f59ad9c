#!/usr/bin/env python3
"""The stack's SCRAM user still authenticates: the password `e2e/stack env` prints
(KAFKA_SCRAM_PASSWORD) reads the broker's metadata over SASL_SSL, and a wrong one is refused —
so a test that changed or removed the credential and did not restore it fails the run.
`e2e/test` runs it after every other test, with the bench venv's confluent-kafka.

Use a librdkafka of 2.6.1 or later (confluent-kafka's wheel ships 2.16): older ones cannot
authenticate with SCRAM-SHA-512 against Kafka 4 brokers at all — Debian 12's `kcat` (librdkafka
2.0.2) is refused with "invalid credentials" even with the right password
(https://github.com/edenhill/kcat/issues/462).
"""

import os
import sys

from confluent_kafka import KafkaError, KafkaException, libversion
from confluent_kafka.admin import AdminClient


def metadata(password: str, timeout: float):
    """None when the broker answered, else the error (an authentication error as soon as the
    broker refuses the password)."""
    refused = []
    client = AdminClient({
        "bootstrap.servers": os.environ["KAFKA_SASL_SSL_BROKERS"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": os.environ["KAFKA_SCRAM_USER"],
        "sasl.password": password,
        "ssl.ca.location": os.environ["TRACEHOUSE_CA_FILE"],
        "log_level": 0,
        "error_cb": lambda err: refused.append(err) if err.code() == KafkaError._AUTHENTICATION else None,
    })
    try:
        client.list_topics(timeout=timeout)
        return None
    except KafkaException as e:
        client.poll(1)  # serves error_cb
        return refused[0] if refused else e.args[0]


def main() -> int:
    right = metadata(os.environ["KAFKA_SCRAM_PASSWORD"], 15)
    if right is not None:
        print(f"scram_check: the stack's SCRAM user {os.environ['KAFKA_SCRAM_USER']} no longer authenticates "
              f"with KAFKA_SCRAM_PASSWORD over {os.environ['KAFKA_SASL_SSL_BROKERS']}: {right}", file=sys.stderr)
        return 1
    wrong = metadata("not-the-" + os.environ["KAFKA_SCRAM_PASSWORD"], 3)
    if not (isinstance(wrong, KafkaError) and wrong.code() == KafkaError._AUTHENTICATION):
        print(f"scram_check: a wrong SCRAM password was not refused as such ({wrong}): the check proves nothing",
              file=sys.stderr)
        return 1
    print(f"scram_check: SCRAM-SHA-512 over SASL_SSL accepts the stack's password and refuses a wrong one "
          f"(librdkafka {libversion()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
