"""pikit edge agent: reads sensors and produces readings to Kafka over mTLS, losing none."""

__version__ = "0.1.0"
