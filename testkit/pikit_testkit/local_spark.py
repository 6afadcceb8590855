"""A local SparkSession set as the apps' sessions are, for the tests that run Spark in-process."""

from __future__ import annotations

import os
import sys

from pikit_spark.common import SESSION_SETTINGS
from pyspark.sql import SparkSession


def local_session(app: str, master: str = "local[2]") -> SparkSession:
    # A task's Python worker is this venv's, which has the kit installed (PySpark reads the variable).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        # As the apps run (pikit_spark.common.session), so that the tests count their Spark jobs.
        .config(map=SESSION_SETTINGS)
        .config("spark.driver.memory", "512m")
        # C1 only: these short sessions ran the C2 compiler threads for about half of the
        # JVM's CPU time, compiling code that a small test frame never runs long enough to repay.
        # The serial collector, as the apps' JVMs run (spark_app_java_options): tests/unit/spark
        # took 55.5 s (56.2, 54.7) against 57.8 s (59.9, 55.8) on G1, turns G1-serial-serial-G1.
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
