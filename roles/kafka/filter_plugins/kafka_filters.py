"""Filters of the kafka role: logic that would otherwise be loops in Jinja."""

from __future__ import annotations

import re
from typing import Any

from pikit_contract.names import SPARK_PREFIX

SCRAM_MECHANISM = "SCRAM-SHA-512"


def kafka_scram_format_args(credentials: list[dict[str, str]], iterations: int) -> list[str]:
    """`kafka-storage format` arguments that put these SCRAM users in the new cluster's metadata.

    The password is quoted, so that `[` `]` `=` and spaces in it are taken literally; the
    tool splits on commas even inside quotes, so a comma or a double quote cannot be written
    (the role's validation refuses both before any host is touched).
    """
    args: list[str] = []
    for user in credentials:
        if '"' in user["password"] or "," in user["password"]:
            name = user["name"]
            raise ValueError(f"kafka_scram_users: the password of {name} holds a comma or a double quote")
        spec = f'name={user["name"]},iterations={int(iterations)},password="{user["password"]}"'
        args += ["--add-scram", f"{SCRAM_MECHANISM}=[{spec}]"]
    return args


def kafka_voters(nodes: list[dict[str, Any]], port: int) -> str:
    """`controller.quorum.voters` from the controllers' kafka_node facts: id@address:port, ..."""
    return ",".join(f"{node['id']}@{node['address']}:{int(port)}" for node in nodes)


def kafka_initial_controllers(nodes: list[dict[str, Any]], port: int, directory_ids: list[str]) -> str:
    """`kafka-storage format --initial-controllers` of a new dynamic quorum: id@address:port:directory
    id for each controller, each given one of `directory_ids` (fresh Kafka Uuids), in order."""
    if len(directory_ids) != len(nodes) or len(set(directory_ids)) != len(directory_ids):
        raise ValueError(f"need {len(nodes)} distinct directory ids, got {directory_ids}")
    for uuid in directory_ids:
        if not re.fullmatch(r"[A-Za-z0-9_-]{22}", uuid):
            raise ValueError(f"{uuid!r} is not a Kafka Uuid (22 base64url characters)")
    return ",".join(
        f"{node['id']}@{node['address']}:{int(port)}:{uuid}"
        for node, uuid in zip(nodes, directory_ids, strict=True)
    )


def kafka_listeners(
    address: str, broker: bool, controller: bool, ports: dict[str, Any], advertise_controller: bool = False
) -> dict[str, str]:
    """One node's `listeners`, `advertised.listeners` and `listener.security.protocol.map`.

    `ports`: client, internal, controller, and sasl and plaintext (0 turns them off). A broker
    listens on CLIENT and INTERNAL (and SASL, PLAINTEXT when on), a controller on CONTROLLER.
    The controller's listener is advertised only in a dynamic quorum (`advertise_controller`),
    where a voter is known by the endpoint it advertises. The protocol map names every listener
    the cluster may use, so that it reads the same on every node."""
    sasl, plaintext = int(ports["sasl"]), int(ports["plaintext"])
    named: list[tuple[str, int]] = []
    if broker:
        named += [("CLIENT", int(ports["client"])), ("INTERNAL", int(ports["internal"]))]
        named += [("SASL", sasl)] if sasl > 0 else []
        named += [("PLAINTEXT", plaintext)] if plaintext > 0 else []
    advertised = [f"{name}://{address}:{port}" for name, port in named]
    if controller:
        named.append(("CONTROLLER", int(ports["controller"])))
        if advertise_controller:
            advertised.append(f"CONTROLLER://{address}:{int(ports['controller'])}")
    protocols = ["CLIENT:SSL", "INTERNAL:SSL", "CONTROLLER:SSL"]
    protocols += ["SASL:SASL_SSL"] if sasl > 0 else []
    protocols += ["PLAINTEXT:PLAINTEXT"] if plaintext > 0 else []
    return {
        "listeners": ",".join(f"{name}://0.0.0.0:{port}" for name, port in named),
        "advertised": ",".join(advertised),
        "protocol_map": ",".join(protocols),
    }


def kafka_restart_order(controllers: list[str], brokers: list[str], active_controller: str = "") -> list[str]:
    """Dedicated controllers, then combined nodes, then dedicated brokers, each in inventory order:
    the quorum is whole before any broker goes down. The active controller (when known) goes last
    of its tier, so that leadership moves once, to a node already restarted (an upgrade's new
    version), rather than at every step."""

    def tier(hosts: list[str]) -> list[str]:
        return [h for h in hosts if h != active_controller] + [h for h in hosts if h == active_controller]

    return (
        tier([h for h in controllers if h not in brokers])
        + tier([h for h in controllers if h in brokers])
        + [h for h in brokers if h not in controllers]
    )


def kafka_default_acls(
    edge_principals: list[str],
    spark_principal: str,
    readings_topic: str,
    output_topics: list[str],
    revoked: list[str] | None = None,
    connect: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The pipeline's ACLs: devices write the readings topic; the Spark apps read it, write and read
    their output topics, create, write and read their internal topics `SPARK_PREFIX*` (each app's
    state and batch log, which it creates as Kafka Streams does), use consumer groups
    `spark-kafka-*` (the Kafka source) and `SPARK_PREFIX*` (the sink's committed source offsets),
    and transactional ids `SPARK_PREFIX*` (the exactly-once sink).

    With `connect` ({principal, group_id}: a site with Kafka Connect workers), the workers own
    their config, offset and status topics `<group>-*` (which they create), join their group, read
    the readings and the output topics and their configs (to export or mirror them), consume as
    their sink connectors' groups `connect-*`, and write transactionally: the leader's config writes
    as `connect-cluster-<group>` and each exactly-once source task as `<group>-<connector>-<task>`.
    A mirror to a core (roles/connect, connect_mirror_connectors) keeps its offset syncs in
    `mm2-offset-syncs.*` here.

    A `revoked` device (playbooks/edge-revoke.yml) loses its allow and is denied every topic: a
    deny wins over any allow, an ACL a site added by hand included, and the brokers check ACLs on
    every request, so it is refused without a restart."""

    def acl(
        principal: str,
        kind: str,
        name: str,
        operations: list[str],
        prefixed: bool = False,
        permission: str = "allow",
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "principal": f"User:{principal}",
            "resource_type": kind,
            "resource_name": name,
            "operations": operations,
        }
        if prefixed:
            out["pattern_type"] = "prefixed"
        if permission != "allow":
            out["permission"] = permission
        return out

    spark = spark_principal
    shut_out = sorted(set(revoked or []))
    return [
        *(
            acl(device, "topic", readings_topic, ["write", "describe"])
            for device in edge_principals
            if device not in shut_out
        ),
        *(acl(device, "topic", "*", ["all"], permission="deny") for device in shut_out),
        acl(spark, "topic", readings_topic, ["read", "describe"]),
        *(acl(spark, "topic", topic, ["write", "describe", "read"]) for topic in output_topics),
        acl(spark, "topic", SPARK_PREFIX, ["create", "write", "describe", "read"], prefixed=True),
        acl(spark, "group", "spark-kafka-", ["read", "describe"], prefixed=True),
        acl(spark, "group", SPARK_PREFIX, ["read", "describe"], prefixed=True),
        acl(spark, "transactional_id", SPARK_PREFIX, ["write", "describe"], prefixed=True),
        *(_connect_acls(acl, connect, [readings_topic, *output_topics]) if connect else []),
    ]


def _connect_acls(acl: Any, connect: dict[str, str], readable: list[str]) -> list[dict[str, Any]]:
    principal, group = connect["principal"], connect["group_id"]
    return [
        acl(principal, "topic", f"{group}-", ["all"], prefixed=True),
        acl(principal, "topic", "mm2-offset-syncs.", ["all"], prefixed=True),
        *(acl(principal, "topic", topic, ["read", "describe", "describe_configs"]) for topic in readable),
        acl(principal, "group", group, ["read", "describe"]),
        acl(principal, "group", "connect-", ["read", "describe"], prefixed=True),
        acl(principal, "transactional_id", f"connect-cluster-{group}", ["write", "describe"]),
        acl(principal, "transactional_id", f"{group}-", ["write", "describe"], prefixed=True),
    ]


def kafka_mirror_site_acls(
    sites: list[str], group_id: str = "pikit-connect", principal_prefix: str = "site."
) -> list[dict[str, Any]]:
    """On a core (`kafka_mirror_sites`): each site's principal, `<principal_prefix><site>` (the CN
    of the identity playbooks/mirror-admit.yml issued it), may write only under its own prefix:
    its mirrored topics and its connectors' offsets topic `<site>.*`, and its connectors'
    transactions `<group>-<site>.*` (roles/connect names them `<site>.mirror` and
    `<site>.checkpoints`). A site's name has no dot, so no prefix covers another site's."""
    out: list[dict[str, Any]] = []
    for site in sites:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", str(site)):
            raise ValueError(
                f"kafka_mirror_sites names {site!r}: a site's name is letters, digits, - or _ "
                "(it prefixes every topic the site writes here)"
            )
        principal = f"User:{principal_prefix}{site}"
        out += [
            {
                "principal": principal,
                "resource_type": "topic",
                "resource_name": f"{site}.",
                "pattern_type": "prefixed",
                "operations": ["all"],
            },
            {
                "principal": principal,
                "resource_type": "transactional_id",
                "resource_name": f"{group_id}-{site}.",
                "pattern_type": "prefixed",
                "operations": ["write", "describe"],
            },
        ]
    if len(set(sites)) != len(sites):
        raise ValueError(f"kafka_mirror_sites names a site twice: {sorted(sites)}")
    return out


def kafka_short_retention(topics: list[dict[str, Any]], names: list[str], hours: int) -> list[str]:
    """The topics among `names` whose retention.ms keeps records less than `hours` (-1, or none
    set, keeps them longer: the broker's log.retention.hours is checked by nobody here)."""
    short = []
    for topic in topics:
        retention = (topic.get("config") or {}).get("retention.ms")
        if topic.get("name") in names and retention is not None and 0 <= int(retention) < hours * 3_600_000:
            short.append(str(topic["name"]))
    return short


def kafka_device_quotas(devices: list[str], default: int, overrides: dict[str, int]) -> dict[str, int]:
    """Each device's producer quota in bytes per second per broker: its override, else the default;
    a device whose quota is 0 has none."""
    unknown = sorted(set(overrides) - set(devices))
    if unknown:
        raise ValueError(
            f"kafka_device_quota_overrides names {', '.join(unknown)}, not a device of this site "
            "(a host of the edge group or one of pikit_device_signing_extra)"
        )
    quotas = {device: int(overrides.get(device, default)) for device in sorted(set(devices))}
    return {device: rate for device, rate in quotas.items() if rate > 0}


def kafka_voter_plan(
    controllers: list[dict[str, Any]], voter_dirs: dict[str, str] | None
) -> dict[str, list[str]]:
    """How a running dynamic quorum's voters become the serving controllers (their hostvars:
    `inventory_hostname`, `kafka_node.id`, and `_kafka_found_directory_id` from the node's
    meta.properties, "" on an empty disk), given the voters as the quorum reports them,
    `{str(id): directory id}`. `remove`: the hosts whose id is a voter under another directory (a
    replaced disk: the quorum refuses a second voter with one id); `add`: every host that is not a
    voter under its own directory, those of `remove` included, once started and caught up. An
    unknown quorum (None) changes nothing, nor does a voter the quorum knows by its id alone (no
    directory id). A run cut short between the steps leaves a plan that the next run finishes."""
    if voter_dirs is None:
        return {"remove": [], "add": []}
    nodes = [
        (c["inventory_hostname"], str(c["kafka_node"]["id"]), c.get("_kafka_found_directory_id", ""))
        for c in controllers
    ]
    # A voter without a directory id (a static quorum, or one converted from it) is its id alone.
    stale = [
        host for host, node_id, found in nodes if voter_dirs.get(node_id) and voter_dirs[node_id] != found
    ]
    missing = [host for host, node_id, _ in nodes if node_id not in voter_dirs]
    return {"remove": stale, "add": [host for host, _, _ in nodes if host in stale or host in missing]}


def kafka_kept_topics(topics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The topics that stay: all but those marked `state: absent` (deleted once confirmed)."""
    return [topic for topic in topics if topic.get("state", "present") != "absent"]


def kafka_topics_sized(topics: list[dict[str, Any]], plan: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """The topics with the disk guard's bounds (kafka_disk_plan) in their config; what a topic's
    config sets wins."""
    return [
        {**topic, "config": {**plan.get(topic["name"], {}), **(topic.get("config") or {})}}
        for topic in topics
    ]


def kafka_plan(inputs: dict[str, Any]) -> dict[str, Any]:
    """Every value of one host that depends on what the nodes run, from explicit inputs.

    vars/main.yml holds what the inventory and the defaults alone decide; tasks/facts.yml reads
    what the nodes run, before anything changes; tasks/plan.yml passes both here and keeps the
    result as the fact `_kafka_plan`. Nothing the role renders reads a fact a later task sets.

    inputs:
      host: this host's inventory name
      nodes: {host: kafka_node} of every Kafka host ({id, address})
      controllers: group kafka_controller (inventory order)
      serving_controllers: those of the quorum (less kafka_controllers_decommissioned)
      broker, controller: whether this host is one
      ports: {client, internal, controller, sasl, plaintext}
      quorum: kafka_quorum (auto, static or dynamic)
      quorum_found: {host: 'static', 'dynamic' or ''}: what each node's server.properties names
      cluster_id: kafka_cluster_id ('' for none)
      cluster_ids_found: {host: cluster id on its storage, '' for none}
      directory_ids_found: {host: metadata directory id on its storage}
      voter_dirs: the running quorum's {str(id): directory id}, or None when not asked
      topics: kafka_topics
      disk_plan: kafka_disk_plan's bounds ({} with the disk guard off)

    returns:
      cluster_ids: every cluster id the nodes and kafka_cluster_id name (more than one is refused)
      cluster_exists: whether any node was formatted
      quorum_running: the kind of quorum the cluster runs ('' before its first start); any
        dynamic node makes it dynamic, so that a conversion cut short carries on
      quorum_mode: the kind it runs after this run: a dynamic one stays dynamic; a static one stays
        static unless kafka_quorum is dynamic (tasks/quorum_convert.yml); a new cluster is static
        only when kafka_quorum says so
      voters: controller.quorum.voters (a static quorum)
      listeners: this node's listeners (kafka_listeners)
      topics: the topics as reconciled, sized by the disk guard
      voter_plan: the dynamic quorum's voters to remove and add (kafka_voter_plan)
    """
    nodes = inputs["nodes"]
    kinds = set(inputs["quorum_found"].values())
    running = "dynamic" if "dynamic" in kinds else "static" if "static" in kinds else ""
    quorum = inputs["quorum"]
    mode = (
        "dynamic"
        if running == "dynamic" or quorum == "dynamic" or (quorum == "auto" and not running)
        else "static"
    )
    found = [cid for cid in inputs["cluster_ids_found"].values() if cid]
    cluster_ids = list(dict.fromkeys(found + ([inputs["cluster_id"]] if inputs["cluster_id"] else [])))
    directories = inputs["directory_ids_found"]
    host = inputs["host"]
    voter_dirs = inputs["voter_dirs"] if running == "dynamic" else None
    return {
        "cluster_ids": cluster_ids,
        "cluster_exists": bool(found),
        "quorum_running": running,
        "quorum_mode": mode,
        "voters": kafka_voters([nodes[c] for c in inputs["controllers"]], inputs["ports"]["controller"]),
        "listeners": kafka_listeners(
            nodes[host]["address"], inputs["broker"], inputs["controller"], inputs["ports"], mode == "dynamic"
        ),
        "topics": kafka_topics_sized(inputs["topics"], inputs["disk_plan"]),
        "voter_plan": kafka_voter_plan(
            [
                {
                    "inventory_hostname": c,
                    "kafka_node": nodes[c],
                    "_kafka_found_directory_id": directories.get(c, ""),
                }
                for c in inputs["serving_controllers"]
            ],
            voter_dirs,
        ),
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "kafka_scram_format_args": kafka_scram_format_args,
            "kafka_voters": kafka_voters,
            "kafka_initial_controllers": kafka_initial_controllers,
            "kafka_listeners": kafka_listeners,
            "kafka_restart_order": kafka_restart_order,
            "kafka_default_acls": kafka_default_acls,
            "kafka_mirror_site_acls": kafka_mirror_site_acls,
            "kafka_short_retention": kafka_short_retention,
            "kafka_device_quotas": kafka_device_quotas,
            "kafka_voter_plan": kafka_voter_plan,
            "kafka_plan": kafka_plan,
            "kafka_kept_topics": kafka_kept_topics,
        }
