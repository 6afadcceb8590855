"""Shared parts of the bundled PySpark apps: options, the reading contract in Spark, Kafka I/O."""
