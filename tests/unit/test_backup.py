"""The controller's state backup (pikit/backup.py, playbooks/backup.yml and restore.yml): what is
restored is byte for byte and mode for mode what was backed up, and nothing is written when the
passphrase, the file or the target is wrong."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from pikit import REPO, backup
from tests.conftest import run_on_controller

PASSPHRASE = b"correct horse battery"


def controller_state(root: Path) -> Path:
    """A state directory shaped like the kit's: the CA key 0600 in a 0700 directory, public
    certificates 0644, the formatted-node record, a generated secret."""
    state = root / "state"
    (state / "pki/issued").mkdir(parents=True)
    (state / "pki").chmod(0o700)
    (state / "kafka").mkdir()
    files = {
        "pki/ca.key": (b"-----BEGIN PRIVATE KEY-----\nsecret\n", 0o600),
        "pki/ca.crt": (b"-----BEGIN CERTIFICATE-----\npublic\n", 0o644),
        "pki/issued/pi-1-kafka.crt": (b"node certificate\n", 0o644),
        "kafka/formatted.json": (b'{"pi-1": "cluster-id"}\n', 0o644),
        "device-signing-secret": (b"s" * 64, 0o600),
    }
    for name, (data, mode) in files.items():
        (state / name).write_bytes(data)
        (state / name).chmod(mode)
    return state


def snapshot(state: Path) -> dict[str, tuple[bytes | None, int]]:
    return {
        str(p.relative_to(state)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode & 0o7777)
        for p in sorted(state.rglob("*"))
    }


def test_a_restore_gives_back_every_file_with_its_bytes_and_mode(tmp_path: Path) -> None:
    state = controller_state(tmp_path)
    before = snapshot(state)
    archive = tmp_path / "site.pikit-backup"
    assert backup.create(state, archive, PASSPHRASE) == len(before)
    assert archive.stat().st_mode & 0o777 == 0o600
    assert b"secret" not in archive.read_bytes() and b"s" * 64 not in archive.read_bytes()

    restored = tmp_path / "new-controller/state"
    assert backup.restore(archive, restored, PASSPHRASE) is None
    assert snapshot(restored) == before


def test_a_wrong_passphrase_or_a_changed_byte_writes_nothing(tmp_path: Path) -> None:
    archive = tmp_path / "b"
    backup.create(controller_state(tmp_path), archive, PASSPHRASE)
    target = tmp_path / "target"
    with pytest.raises(backup.BackupError, match="wrong passphrase"):
        backup.restore(archive, target, b"incorrect horse battery")
    sealed = bytearray(archive.read_bytes())
    sealed[-40] ^= 1
    archive.write_bytes(bytes(sealed))
    with pytest.raises(backup.BackupError, match="changed or cut short"):
        backup.restore(archive, target, PASSPHRASE)
    archive.write_bytes(b"not a backup")
    with pytest.raises(backup.BackupError, match="not a pikit backup"):
        backup.restore(archive, target, PASSPHRASE)
    assert not target.exists()


def test_a_restore_refuses_a_state_in_use_unless_forced_and_then_keeps_it(tmp_path: Path) -> None:
    state = controller_state(tmp_path)
    archive = tmp_path / "b"
    backup.create(state, archive, PASSPHRASE)
    before = snapshot(state)
    (state / "pki/ca.key").write_bytes(b"a key made since")
    with pytest.raises(backup.BackupError, match="already holds controller state"):
        backup.restore(archive, state, PASSPHRASE)
    assert (state / "pki/ca.key").read_bytes() == b"a key made since"
    kept = backup.restore(archive, state, PASSPHRASE, force=True)
    assert kept is not None and (kept / "pki/ca.key").read_bytes() == b"a key made since"
    assert snapshot(state) == before


def test_a_short_passphrase_an_empty_state_and_an_unsafe_member_are_refused(tmp_path: Path) -> None:
    with pytest.raises(backup.BackupError, match="shorter than 12"):
        backup.create(controller_state(tmp_path), tmp_path / "b", b"short")
    (tmp_path / "empty").mkdir()
    with pytest.raises(backup.BackupError, match="no controller state"):
        backup.create(tmp_path / "empty", tmp_path / "b", PASSPHRASE)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("../outside")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "evil").write_bytes(backup.encrypt(buffer.getvalue(), PASSPHRASE))
    with pytest.raises(backup.BackupError, match="must not write"):
        backup.restore(tmp_path / "evil", tmp_path / "target", PASSPHRASE)
    assert not (tmp_path / "outside").exists()


def playbook(name: str, tmp_path: Path, state: Path) -> subprocess.CompletedProcess[str]:
    return run_on_controller(
        REPO / "playbooks" / name,
        f"pikit_state_dir={state} pikit_backup_file={tmp_path / 'site.pikit-backup'}",
        f"pikit_backup_passphrase='{PASSPHRASE.decode()}'",
    )


@pytest.mark.timeout(300)
def test_the_playbooks_back_up_and_restore_without_printing_the_passphrase(tmp_path: Path) -> None:
    state = controller_state(tmp_path)
    before = snapshot(state)
    made = playbook("backup.yml", tmp_path, state)
    assert made.returncode == 0, made.stdout[-3000:]
    assert f"backed up {len(before)} files and directories" in made.stdout

    refused = playbook("restore.yml", tmp_path, state)
    assert refused.returncode != 0
    assert "already holds controller state: restore with force to replace it" in refused.stdout

    restored = tmp_path / "new-controller"
    done = playbook("restore.yml", tmp_path, restored)
    assert done.returncode == 0, done.stdout[-3000:]
    assert snapshot(restored) == before
    for run in (made, refused, done):
        assert PASSPHRASE.decode() not in run.stdout + run.stderr
