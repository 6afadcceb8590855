"""Kafka names that several parts of the kit must agree on and that no site changes: defined here
once, imported by the Spark apps, which use them, and by the kafka role's filters, which grant them.
(A name a site may change is a role default instead: roles/pikit/defaults/main.yml.)"""

# The Spark apps' exactly-once sink: its transactional ids and consumer groups are
# pikit-spark-<app>[-<output>] (spark_apps/pikit_spark/sink.py).
SPARK_PREFIX = "pikit-spark-"
