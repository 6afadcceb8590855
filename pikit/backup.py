"""Back up and restore the controller's state: the CA, every issued certificate, the record of
formatted Kafka nodes, and the generated secrets. Without them no node can join the cluster again.

    python -m pikit.backup create  --state <pikit_state_dir> --out FILE   (passphrase on stdin)
    python -m pikit.backup restore --state <pikit_state_dir> --in FILE [--force]
    python -m pikit.backup list    --in FILE

`playbooks/backup.yml` and `playbooks/restore.yml` run these with the inventory's settings.

The archive is a tar of the state directory (modes kept: keys stay 0600), encrypted with
AES-256-GCM under a key derived from the passphrase with scrypt, so a wrong passphrase or a
changed byte is refused before anything is written. A restore refuses a state directory that
already holds files unless asked to replace it (`--force`), and then keeps the old one beside it.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
import time
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

MAGIC = b"PIKIT-BACKUP-1\n"
SALT_BYTES = 16
NONCE_BYTES = 12
# scrypt at 64 MiB of memory: a second on a Pi, and costly to guess passphrases against.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**16, 8, 1
MIN_PASSPHRASE = 12


class BackupError(Exception):
    """A backup that cannot be made or restored, with the reason."""


def _key(passphrase: bytes, salt: bytes) -> bytes:
    if len(passphrase) < MIN_PASSPHRASE:
        raise BackupError(f"the passphrase is shorter than {MIN_PASSPHRASE} characters")
    return Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(passphrase)


def pack(state: Path) -> bytes:
    """The state directory as a tar (paths relative to it, modes kept, owners left out)."""
    if not state.is_dir() or not any(state.iterdir()):
        raise BackupError(f"{state} holds no controller state to back up")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(state.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(state)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isfile():
                with path.open("rb") as data:
                    tar.addfile(info, data)
            elif info.isdir():
                tar.addfile(info)
            # anything else (a socket, a stray link) is not state
    return buffer.getvalue()


def encrypt(plain: bytes, passphrase: bytes) -> bytes:
    salt, nonce = os.urandom(SALT_BYTES), os.urandom(NONCE_BYTES)
    return MAGIC + salt + nonce + AESGCM(_key(passphrase, salt)).encrypt(nonce, plain, MAGIC)


def decrypt(sealed: bytes, passphrase: bytes) -> bytes:
    if not sealed.startswith(MAGIC):
        raise BackupError("not a pikit backup (its first line is not PIKIT-BACKUP-1)")
    body = sealed[len(MAGIC) :]
    head = SALT_BYTES + NONCE_BYTES
    salt, nonce, cipher = body[:SALT_BYTES], body[SALT_BYTES:head], body[head:]
    try:
        return AESGCM(_key(passphrase, salt)).decrypt(nonce, cipher, MAGIC)
    except InvalidTag:
        raise BackupError("wrong passphrase, or the backup was changed or cut short") from None


def members(plain: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(plain), mode="r") as tar:
        found = tar.getmembers()
    for member in found:
        unsafe = member.name.startswith("/") or ".." in Path(member.name).parts
        if unsafe or not (member.isfile() or member.isdir()):
            raise BackupError(f"the backup holds {member.name!r}, which a restore must not write")
    return found


def create(state: Path, out: Path, passphrase: bytes) -> int:
    plain = pack(state)
    sealed = encrypt(plain, passphrase)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(sealed)
        handle.flush()
        os.fsync(handle.fileno())
    partial.replace(out)
    return len(members(plain))


def restore(archive: Path, state: Path, passphrase: bytes, force: bool = False) -> Path | None:
    """Writes the backup's files into `state`; returns where an existing state was moved."""
    plain = decrypt(archive.read_bytes(), passphrase)
    found = members(plain)
    kept = None
    if state.exists() and any(state.iterdir()):
        if not force:
            raise BackupError(f"{state} already holds controller state: restore with force to replace it")
        kept = state.with_name(f"{state.name}.before-restore-{time.strftime('%Y%m%dT%H%M%S')}")
        state.rename(kept)
    staging = state.with_name(state.name + ".restoring")
    staging.mkdir(mode=0o700, parents=True)
    with tarfile.open(fileobj=io.BytesIO(plain), mode="r") as tar:
        tar.extractall(staging, members=found, filter="data")
    for member in found:  # the data filter clears group/other write bits only; keep the modes exactly
        (staging / member.name).chmod(member.mode)
    if state.exists():
        state.rmdir()
    staging.rename(state)
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_create = sub.add_parser("create", help="encrypt the state directory into a file")
    p_create.add_argument("--state", type=Path, required=True)
    p_create.add_argument("--out", type=Path, required=True)
    p_restore = sub.add_parser("restore", help="decrypt a backup into the state directory")
    p_restore.add_argument("--state", type=Path, required=True)
    p_restore.add_argument("--in", dest="archive", type=Path, required=True)
    p_restore.add_argument("--force", action="store_true", help="replace a state directory that holds files")
    p_list = sub.add_parser("list", help="the files a backup holds")
    p_list.add_argument("--in", dest="archive", type=Path, required=True)
    args = parser.parse_args(argv)
    passphrase = sys.stdin.buffer.readline().rstrip(b"\r\n")
    try:
        if args.command == "create":
            count = create(args.state, args.out, passphrase)
            print(f"backed up {count} files and directories of {args.state} to {args.out}")
        elif args.command == "restore":
            kept = restore(args.archive, args.state, passphrase, args.force)
            moved = f"; the previous state is in {kept}" if kept else ""
            print(f"restored {args.state} from {args.archive}{moved}")
        else:
            for member in members(decrypt(args.archive.read_bytes(), passphrase)):
                print(f"{member.mode:04o} {member.size:>10} {member.name}")
    except BackupError as exc:
        print(f"pikit backup: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
