"""Whether a TCP port answers, seen from a lab node: the firewall's tests run this on a node.

"answered": connected, or refused by a closed port the firewall lets through (a reset);
"dropped": no answer within 3 s, which is what the firewall does to what it does not let in.
"""

from __future__ import annotations

import shlex

_PROBE = """
import socket, sys
s = socket.socket(); s.settimeout(3)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("answered")
except ConnectionRefusedError:
    print("answered")
except OSError:
    print("dropped")
"""


def reach_command(address: str, port: int) -> str:
    """A shell command for the node that prints "answered" or "dropped" for address:port."""
    return shlex.join(["python3", "-c", _PROBE, address, str(port)])
