"""The `pikit` command on the controller.

    pikit status [-i INVENTORY] [--json] [--html FILE]   the site on one screen
    pikit latest [-i INVENTORY] [--json] [DEVICE]        each device's newest closed window

Exit status of `pikit status`: 0 healthy, 1 something unhealthy (each named, with its reason),
2 the site could not be read. Of `pikit latest`: 0 values found, 1 none (for that device), 2 the
site or its brokers could not be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pikit import REPO, latest
from pikit.site import Site, SiteError


def status(args: argparse.Namespace) -> int:
    # Here, not at the top: `pikit latest` answers within a second and needs none of it (a third
    # of its start-up went to importing what status reads: certificates, Connect, Prometheus).
    from pikit.status import collect
    from pikit.status_render import page, text

    try:
        site = Site.load(Path(args.inventory))
        found = collect(site, silent_after=args.silent_after, lookback=args.lookback)
    except SiteError as exc:
        print(f"pikit status: {exc}", file=sys.stderr)
        return 2
    if args.html:
        Path(args.html).write_text(page(found))
    if args.json:
        print(json.dumps(found.as_dict(), indent=2, sort_keys=True))
    else:
        print(text(found, color=sys.stdout.isatty()))
    return 1 if found.problems else 0


def show_latest(args: argparse.Namespace) -> int:
    try:
        found = latest.read(Site.load(Path(args.inventory)), args.device)
    except (SiteError, OSError) as exc:
        print(f"pikit latest: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(found.windows, indent=2, sort_keys=True))
    elif found.windows:
        print(latest.table(found.windows))
    if not found.windows:
        print(
            f"pikit latest: no closed window yet{f' of {args.device}' if args.device else ''}",
            file=sys.stderr,
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="pikit", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("status", help="the quorum, brokers, Spark and agents on one screen")
    show.add_argument("-i", "--inventory", default=str(REPO / "inventory/lab"), help="default: the lab's")
    show.add_argument("--json", action="store_true", help="the same, as JSON for scripts")
    show.add_argument("--html", metavar="FILE", help="also write a page a person can open")
    show.add_argument(
        "--silent-after",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="a device with no reading in Kafka for this long is reported silent (default 120)",
    )
    show.add_argument(
        "--lookback",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="how much of the readings topic is read to find each device's last reading (default 900)",
    )
    newest = commands.add_parser("latest", help="each device's newest closed window, from the latest topic")
    newest.add_argument("device", nargs="?", help="one device (default: every device)")
    newest.add_argument("-i", "--inventory", default=str(REPO / "inventory/lab"), help="default: the lab's")
    newest.add_argument("--json", action="store_true", help="the windows as JSON for scripts")
    args = parser.parse_args(argv)
    sys.exit(status(args) if args.command == "status" else show_latest(args))


if __name__ == "__main__":
    main()
