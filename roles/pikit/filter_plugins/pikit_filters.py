"""Filters every role of the kit may use (the roles list `pikit` as a dependency)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError
from pikit_contract.signing import device_key

from pikit import revocation, site_model


def pikit_site_model(
    groups: Mapping[str, Any], hostvars: Mapping[str, Any], cluster: str = ""
) -> dict[str, Any]:
    """The site model (pikit/site_model.py) from the inventory and what each role told of its hosts."""
    with _as_filter_error():
        return site_model.site_model(groups, hostvars, cluster)


def pikit_address(host: str, hostvars: Mapping[str, Any]) -> str:
    """The address the other nodes reach `host` at, from the inventory alone (site_model.address):
    what a role's default binds or advertises, before any model exists."""
    return site_model.address(host, hostvars)


def pikit_endpoints(model: Mapping[str, Any], service: str, hosts: list[str]) -> list[str]:
    """`address:port` of `service` on each of `hosts` (bootstrap lists)."""
    with _as_filter_error():
        return site_model.service_endpoints(model, service, hosts)


@contextmanager
def _as_filter_error() -> Iterator[None]:
    try:
        yield
    except site_model.SiteModelError as exc:
        raise AnsibleFilterError(f"site model: {exc}") from None


def pikit_device_signing_keys(secret: str, devices: list[str]) -> dict[str, str]:
    """Each device's signing key (hex), derived from the site secret as pikit_contract/signing.py does."""
    return {device: device_key(secret.encode(), device).hex() for device in sorted(set(devices))}


def pikit_revocations(record: str) -> dict[str, dict[str, Any]]:
    """The controller's record of revoked devices (pikit/revocation.py), {} when none was made."""
    return {device: asdict(r) for device, r in revocation.load(Path(record)).items()}


def pikit_device_keyring(secret: str, devices: list[str], revocations: Mapping[str, Any]) -> str:
    """The keyring a Spark app checks records against (pikit_contract.signing.Keyring, as JSON),
    as pikit.revocation.keyring makes it from the controller's record of revocations."""
    revoked = {device: revocation.Revocation(**r) for device, r in revocations.items()}
    return revocation.keyring(secret.encode(), devices, revoked).to_json()


def pikit_packages_missing(packages: list[str], listing: Mapping[str, Any] | None) -> list[str]:
    """Those of `packages` that are not installed according to `listing`, common's registered
    `dpkg-query --show --showformat='${db:Status-Abbrev}${Package}\\n'` (lines like `ii nftables`):
    all of them when there is no listing (a role run without common), so that apt decides.

    A registered list rather than package_facts: facts are deep-copied for every task on every
    host, and Debian's few hundred packages made each later task of site.yml pay for them."""
    lines = (listing or {}).get("stdout_lines") or []
    installed = {
        fields[1] for fields in (line.split() for line in lines) if len(fields) == 2 and fields[0] == "ii"
    }
    return [name for name in packages if name not in installed]


def pikit_artifacts_missing(artifacts: list[str], listings: list[Mapping[str, Any]]) -> list[str]:
    """Those of `artifacts` (cache paths like `spark/x.whl`) whose file name is absent from at
    least one of `listings`, registered `find` results of the nodes' download directories: for
    one node, what to copy to it; for the play's nodes, which cached files to checksum first.

    A file there is the right one: its name carries its pinned version, and copy writes it whole
    or not at all."""
    present = [{_file_name(entry["path"]) for entry in listing.get("files", [])} for listing in listings]
    return [path for path in artifacts if any(_file_name(path) not in names for names in present)]


def pikit_shared_addresses(addresses: Mapping[str, str]) -> list[str]:
    """Each address that more than one host has, as "a, b share 10.0.0.1", in address order."""
    holders: dict[str, list[str]] = {}
    for host, address in addresses.items():
        holders.setdefault(address, []).append(host)
    return [
        f"{', '.join(hosts)} share {address}" for address, hosts in sorted(holders.items()) if len(hosts) > 1
    ]


def _file_name(path: object) -> str:
    return str(path).rsplit("/", 1)[-1]


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "pikit_site_model": pikit_site_model,
            "pikit_address": pikit_address,
            "pikit_endpoints": pikit_endpoints,
            "pikit_device_signing_keys": pikit_device_signing_keys,
            "pikit_device_keyring": pikit_device_keyring,
            "pikit_revocations": pikit_revocations,
            "pikit_packages_missing": pikit_packages_missing,
            "pikit_artifacts_missing": pikit_artifacts_missing,
            "pikit_shared_addresses": pikit_shared_addresses,
        }
