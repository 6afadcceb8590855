"""Real KRaft brokers started from the artifact cache, for the integration tests.

One combined broker/controller on loopback from the cached tarball, with the
StandardAuthorizer (the anonymous PLAINTEXT user is a super user, so ACLs can be
managed and checked). A broker can be stopped and started again on the same port
and storage, to stage outages.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pikit_testkit.broker import LocalBroker, free_port

__all__ = ["LocalBroker", "free_port"]


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    local = LocalBroker(tmp_path_factory.mktemp("kafka"), short_lived=True)
    local.start()
    yield local.address
    local.stop()


@pytest.fixture()
def own_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    """A broker of the test's own, which it may stop and start."""
    local = LocalBroker(tmp_path_factory.mktemp("kafka-own"), short_lived=True)
    local.start()
    yield local
    if local.proc is not None:
        local.stop()
