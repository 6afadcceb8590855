"""The role's kafka_admin module, for the cluster and integration tests."""

from pikit.kafka_admin import kafka_admin

__all__ = ["kafka_admin"]
