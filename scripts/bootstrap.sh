#!/usr/bin/env bash
# Installs everything the kit needs on a fresh Debian 12 controller (as root):
# Debian packages, podman's settings for this kind of machine, and the Python venv.
# Idempotent and quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
say() { printf '    %s\n' "$*"; }

APT_PACKAGES=(
  podman runc uidmap slirp4netns fuse-overlayfs containernetworking-plugins catatonit
  debootstrap openssh-client openssl python3-venv maven openjdk-17-jre-headless kcat
  mtools dosfstools fdisk apt-cacher-ng
)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  say "apt: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  say "apt: all ${#APT_PACKAGES[@]} packages present"
fi

# Root here lacks CAP_SYS_RESOURCE (hard nofile 20000) and crun refuses the
# host's hybrid cgroups: without these two settings no container starts.
conf=/etc/containers/containers.conf
if ! grep -qs 'pikit' "$conf"; then
  say "podman: writing $conf"
  mkdir -p /etc/containers
  cat >"$conf" <<'CONF'
# written by pikit scripts/bootstrap.sh
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=20000:20000"]
[engine]
runtime = "runc"
CONF
fi

# The lab's package cache (common_apt_proxy in inventory/lab): every lab node downloads each
# Debian package through it, once per machine rather than once per container. This machine has no
# systemd to start it, so it is started here when nothing listens on its port.
# Requests for any Debian mirror go to the one this machine uses (its own list of mirrors may
# name hosts this network cannot reach).
mirror=$(sed -n 's/^URIs: *\([^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
backends=/etc/apt-cacher-ng/backends_debian
if [[ "$(cat "$backends" 2>/dev/null)" != "${mirror:-http://deb.debian.org/debian}/" ]]; then
  echo "${mirror:-http://deb.debian.org/debian}/" >"$backends"
  [[ -s /run/apt-cacher-ng/pid ]] && kill "$(cat /run/apt-cacher-ng/pid)" 2>/dev/null && sleep 1
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/3142) 2>/dev/null; then
  say "apt-cacher-ng: starting it on :3142"
  mkdir -p /run/apt-cacher-ng /var/cache/apt-cacher-ng /var/log/apt-cacher-ng
  /usr/sbin/apt-cacher-ng -c /etc/apt-cacher-ng pidfile=/run/apt-cacher-ng/pid \
    SocketPath=/run/apt-cacher-ng/socket foreground=0
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/3142) 2>/dev/null && break; sleep 0.1; done
  (exec 3<>/dev/tcp/127.0.0.1/3142) 2>/dev/null || { echo "apt-cacher-ng did not start" >&2; exit 1; }
fi

stamp=.venv/.requirements.sha256
# The packages' own pyproject files too: a new console script or dependency needs a reinstall.
want=$(cat requirements.txt pyproject.toml contract/pyproject.toml edge_agent/pyproject.toml spark_apps/pyproject.toml \
  testkit/pyproject.toml devtools/pyproject.toml \
  | sha256sum | cut -d' ' -f1)
if [[ ! -x .venv/bin/python || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  say "python: creating .venv from requirements.txt"
  python3 -m venv .venv
  # pip compiles every module as it installs it (84 s; 46 s with --no-compile). Leave it: where
  # PYTHONDONTWRITEBYTECODE is set, as on this machine, nothing would write a .pyc later, and each
  # ansible-playbook would compile Ansible anew (make test's first set: 818 s against 684 s).
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  echo "$want" >"$stamp"
else
  say "python: .venv matches requirements.txt"
fi
# The kit's collection (collections/ansible_collections/pikit), linked into the venv's own
# ansible_collections, beside the collections the `ansible` package bundles: every ansible-playbook,
# molecule and ansible-lint run of this venv resolves pikit.cluster.* there with no setting of its
# own, and Python imports the same files as a package, edits included (an editable install).
collections=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ansible_collections
if [[ "$(readlink "$collections/pikit" 2>/dev/null)" != "$PWD/collections/ansible_collections/pikit" ]]; then
  ln -sfn "$PWD/collections/ansible_collections/pikit" "$collections/pikit"
  say "python: linked the pikit.cluster collection into the venv"
fi
say "bootstrap done in $(($(date +%s) - started))s"
