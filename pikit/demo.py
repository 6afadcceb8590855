"""The last phase of `make demo`: tell the user what is running and where to look."""

from __future__ import annotations

from pikit.lab import REPO, spec_from_inventory
from pikit.lab_image import ssh_key


def main() -> None:
    spec = spec_from_inventory(REPO / "inventory/lab")
    print(f"\nThe lab '{spec.name}' is up and converged by playbooks/site.yml:")
    for node in spec.nodes:
        print(f"  {node.name:<10} {node.ip}")
    print(
        f"""
Log in to a node:    ssh -i {ssh_key()} root@{spec.nodes[0].ip}
                     (or: podman exec -it {spec.nodes[0].name} bash)
Re-run the playbook: .venv/bin/ansible-playbook playbooks/site.yml   (a second run reports changed=0)
Stop everything:     make lab-down"""
    )


if __name__ == "__main__":
    main()
