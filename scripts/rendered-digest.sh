#!/usr/bin/env bash
# The SHA-256 of every file the playbooks render on the lab's nodes: /etc (server.properties,
# Spark's conf, the units, the firewall rules, Prometheus's config, the agent's config) and the
# Spark apps' and agent's installed trees. Two digests taken before and after a change to the
# roles, on one lab converged once, show whether any rendered file changed:
#   scripts/rendered-digest.sh > before.txt; ...; scripts/rendered-digest.sh > after.txt; diff before.txt after.txt
# Usage: rendered-digest.sh [CONTAINER...] (default: every running podman container)
set -euo pipefail
nodes=("$@")
[ ${#nodes[@]} -gt 0 ] || mapfile -t nodes < <(podman ps --format '{{.Names}}' | sort)
for node in "${nodes[@]}"; do
  podman exec "$node" sh -c '
    find /etc /opt -xdev -type f \
      ! -path "/etc/ssh/ssh_host_*" ! -path "/etc/machine-id" ! -path "/etc/ld.so.cache" \
      ! -path "*/__pycache__/*" ! -path "*/.venv/*" ! -path "*/venv/*" ! -path "*/site-packages/*" \
      ! -path "/opt/kafka*/libs/*" ! -path "/opt/spark*/jars/*" \
      -print0 2>/dev/null | sort -z | xargs -0 -r sha256sum' | sed "s|^|$node |"
done
