"""kafka-python's TLS handshake, bounded, for every program of the kit that makes kafka-python
clients: the Spark drivers (their sink and election), the edge agent, and the controller's
`pikit status` and `pikit latest`.

kafka-python 3.0 (kafka/net/transport.py, `KafkaSSLTransport.handshake`) waits on a TLS handshake
for as long as the broker does not answer. Its connection setup timeout bounds the TCP connect
only, and a frozen broker (SIGSTOP, a hung JVM, a stalled SD card) still completes that in its
kernel. So every new connection to it, and every request queued behind one, waits until it
thaws. Its 2.x line gave up on such a connection after request_timeout_ms (dpkp/kafka-python#1696).
The bootstrap probe (brokers.py) keeps a new client from starting on such a broker; this bounds
the connections a client opens later, to a partition's leader or its group's coordinator.

What it cost the apps: the election's heartbeats (pikit_spark/leadership.py) queued behind a new
connection to their group's coordinator, the sink could not confirm its driver's place, and
anomaly_alerts committed nothing for the whole of a 60-90 s freeze of that broker (make test-ops at
28ff8ba; the end-to-end lab by hand: 94 s). With the handshake bounded (the apps' bundle built
from this module, the coordinator's broker frozen 60 s by hand), the coordinator moved to a live
broker 11 s into the freeze, and the apps' longest pauses were 36 s and 22 s, before the thaw.
"""

from __future__ import annotations

import logging
import ssl
import time

from kafka.net.transport import KafkaSSLTransport

LOG = logging.getLogger("kafka.net.transport")

# The apps' request.timeout.ms (spark_kafka_client_properties), and the bootstrap probe's bound
# (brokers.PROBE_TIMEOUT_S): a healthy broker answers within 1 s.
HANDSHAKE_S = 5.0
# kafka-python's own handshake, kept for the test that notices when an upgrade changes it.
UNBOUNDED = KafkaSSLTransport.handshake


def bound_tls_handshakes(seconds: float = HANDSHAKE_S) -> None:
    """Every kafka-python TLS handshake of this process gives up after `seconds`: a
    KafkaTimeoutError, which kafka-python's connection manager reports as a failed connection and
    retries after its backoff, as it does a refused one."""

    async def handshake(self: KafkaSSLTransport) -> None:
        deadline = time.monotonic() + seconds
        while True:
            try:
                self._sock.do_handshake()
                LOG.info("%s: connected to %s", self, self._sock)
                return
            except ssl.SSLWantReadError:
                await self._net.wait_read(self._sock, timeout_at=deadline)
            except ssl.SSLWantWriteError:
                await self._net.wait_write(self._sock, timeout_at=deadline)

    KafkaSSLTransport.handshake = handshake
