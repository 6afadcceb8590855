"""Phase timing and command running shared by every controller-side script.

Every long step prints when it starts and how long it took, so a user (or CI)
watching `make demo` or `make test` always knows where time goes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

_depth = 0


def say(message: str) -> None:
    print(f"{'  ' * _depth}{message}", flush=True)


@contextlib.contextmanager
def exclusive(lock: Path, what: str) -> Iterator[None]:
    """Hold `lock` (an flock) for the block: two processes that would build the same thing at
    once (two labs, or make test's lanes, each wanting the image or the artifact cache) take
    turns, and the second finds the first's work done. Says so when it has to wait."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with phase(f"wait for another process to finish {what}"):
                fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Print `name`, run the block, print its duration (also on failure)."""
    global _depth
    say(f"==> {name}")
    started = time.monotonic()
    _depth += 1
    try:
        yield
    except BaseException:
        _depth -= 1
        say(f"<== {name}: FAILED after {time.monotonic() - started:.1f}s")
        raise
    _depth -= 1
    say(f"<== {name}: {time.monotonic() - started:.1f}s")


class CommandError(RuntimeError):
    """A command failed; the message carries its tail of output."""


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    check: bool = True,
    capture: bool = False,
    log: Path | None = None,
    env: dict[str, str] | None = None,
    input_bytes: bytes | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a command; with `log`, its output goes there and its tail is shown on failure."""
    argv = [str(c) for c in cmd]
    full_env = {**os.environ, **(env or {})}
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            out.write(f"\n$ {shlex.join(argv)}\n".encode())
            out.flush()
            proc = subprocess.run(
                argv, stdout=out, stderr=subprocess.STDOUT, env=full_env, input=input_bytes, cwd=cwd
            )
        if check and proc.returncode != 0:
            raise CommandError(
                f"{shlex.join(argv)} exited {proc.returncode}; last lines of {log}:\n{tail(log)}"
            )
        return proc
    proc = subprocess.run(
        argv,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        env=full_env,
        input=input_bytes,
        cwd=cwd,
    )
    if check and proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace")[-2000:] if capture and proc.stderr else ""
        raise CommandError(f"{shlex.join(argv)} exited {proc.returncode}\n{detail}")
    return proc


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def die(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(code)
