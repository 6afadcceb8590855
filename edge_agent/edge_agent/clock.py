"""Is the system clock synchronised? A Pi has no real-time clock: until NTP has set it, it
runs from the time of the last shutdown (fake-hwclock) or from 1970, and readings stamped
then would land in the wrong windows or be refused as from the past or the future."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_TIME_ERROR = 5  # adjtimex(2): the clock is not synchronised (STA_UNSYNC)


class _Timex(ctypes.Structure):
    # struct timex up to `status`, then room for the rest (its size differs by architecture).
    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("rest", ctypes.c_byte * 256),
    ]


def synchronised() -> bool:
    """True when the kernel says an NTP daemon (chrony, timesyncd) disciplines the clock.

    Reading the state (modes 0) needs no privilege. Outside Linux there is no such flag
    and the clock is taken as good.
    """
    if not sys.platform.startswith("linux"):
        return True
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    state = libc.adjtimex(ctypes.byref(_Timex()))
    return bool(state != _TIME_ERROR and state >= 0)
