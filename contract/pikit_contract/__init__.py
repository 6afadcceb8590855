"""What the kit's programs agree on, in one package that the edge agent, the Spark apps and the
controller's tools each declare as a dependency (none of them depends on another for it).

- `readings`: the reading contract, what a device writes and every reader parses;
- `signing`: the devices' record signatures and the keyring the apps check them against;
- `brokers`: the bootstrap list as the kit writes it, and its probe;
- `disk`: durable writes (fsync of a file and its directory);
- `watchdog`: systemd's watchdog, for a program under a unit with WatchdogSec=;
- `failpoints`: the points where the fault tests stop a program on purpose.
"""
