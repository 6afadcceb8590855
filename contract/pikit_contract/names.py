"""Kafka names that several parts of the kit must agree on and that no site changes: defined here
once, imported by the Spark apps, which use them, and by the kafka role's filters, which grant them.
(A name a site may change is a role default instead: roles/pikit/defaults/main.yml.)"""

# The Spark apps' exactly-once sink: its transactional ids, consumer groups and internal topics are
# pikit-spark-<app>[-<output>] (spark_apps/pikit_spark/sink.py).
SPARK_PREFIX = "pikit-spark-"


def spark_state_topic(app: str) -> str:
    """An app's state, compacted, one record per device (spark_apps/pikit_spark/changelog.py):
    created by the app itself, as Kafka Streams creates its changelogs."""
    return f"{SPARK_PREFIX}{app}-state"


def spark_batches_topic(app: str) -> str:
    """An app's batch log: one record per committed micro-batch, written in its transaction
    (spark_apps/pikit_spark/batches.py)."""
    return f"{SPARK_PREFIX}{app}-batches"


def spark_leader_topic(app: str) -> str:
    """The one-partition topic whose consumer group elects an app's active driver among its driver
    Pis (spark_apps/pikit_spark/leadership.py); nothing is written to it. Also the group's name."""
    return f"{SPARK_PREFIX}{app}-leader"
