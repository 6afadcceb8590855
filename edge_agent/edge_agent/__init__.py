"""pikit edge agent: reads sensors and produces readings to Kafka over mTLS, losing none."""
