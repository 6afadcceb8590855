"""An ansible-playbook run shown as progress on a terminal, its whole output kept in a log file.

Ansible prints every task of every host: a no-op `site.yml` on the lab is ~3,700 lines, in which a
person cannot see how far the run is. On a terminal, `make demo` shows instead one line per play
(its name, how many tasks it ran, how long it took), a status line that names the current role and
task and counts the tasks done, and the recap. A failure prints its task and its error lines in
full, as Ansible wrote them. The log file keeps everything; its path is printed first.

Off a terminal (CI), or with `-v` in the arguments, the raw output passes through unchanged.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PLAY = re.compile(r"^PLAY \[(.*)\] \*+")
_TASK = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \*+")
_RECAP = re.compile(r"^PLAY RECAP \*+")
# The lines that say a host's task failed, and the start of an error Ansible prints on its own.
_FAILED = re.compile(r"^(fatal|failed): \[|^(\[ERROR\]|ERROR!)")


@dataclass
class Progress:
    """What the run has shown so far: fed Ansible's lines one by one, it yields what to print;
    a line ending in "\\r" is the status line, which the next one overwrites."""

    play: str = ""
    play_started: float = 0.0
    tasks: int = 0
    play_tasks: int = 0
    task: str = ""
    in_recap: bool = False
    failing: bool = False  # printing a failure in full, up to the next header

    def feed(self, raw: str, now: float) -> Iterator[str]:
        line = _ANSI.sub("", raw.rstrip("\n"))
        recap, play, task = _RECAP.match(line), _PLAY.match(line), _TASK.match(line)
        if self.failing and not (recap or play or task):
            yield line + "\n"
            return
        self.failing = False
        if recap:
            yield from self._end_play(now)
            self.in_recap = True
            yield "\n" + line + "\n"
        elif self.in_recap:
            if line.strip():
                yield line + "\n"
        elif play:
            yield from self._end_play(now)
            self.play, self.play_started, self.play_tasks = play.group(1), now, 0
        elif task:
            self.task = task.group(1)
            self.tasks += 1
            self.play_tasks += 1
            yield f"    {self.tasks} tasks done; now: {self.task}\r"
        elif _FAILED.match(line):
            self.failing = True
            yield f"\n  FAILED in task [{self.task}] of play [{self.play}]:\n{line}\n"

    def _end_play(self, now: float) -> Iterator[str]:
        if self.play:
            took = now - self.play_started
            yield f"  {self.play}: {self.play_tasks} tasks, {took:.0f}s\n"
        self.play = ""


def show(lines: Iterable[str], out: TextIO, log: TextIO) -> None:
    """Ansible's `lines`, each kept in `log`, as progress on `out`."""
    progress = Progress()
    width = shutil.get_terminal_size((100, 20)).columns - 1
    status = False
    for raw in lines:
        log.write(raw)
        for text in progress.feed(raw, time.monotonic()):
            if text.endswith("\r"):
                out.write("\r" + text[:-1][:width].ljust(width))
                status = True
            else:
                if status:
                    out.write("\r" + " " * width + "\r")
                    status = False
                out.write(text)
            out.flush()
    if status:
        out.write("\r" + " " * width + "\r")


def run(argv: list[str], log_path: Path, cwd: Path, env: dict[str, str] | None = None) -> int:
    """`argv` (an ansible-playbook run) shown as progress, its whole output in `log_path`."""
    if not sys.stdout.isatty() or any(arg.startswith("-v") for arg in argv):
        return subprocess.run(argv, cwd=cwd, env=env, check=False).returncode
    log_path.parent.mkdir(parents=True, exist_ok=True)
    print(f"  the whole output: {log_path}", flush=True)
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**(env or os.environ), "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    assert proc.stdout is not None
    with log_path.open("w") as log:
        show(proc.stdout, sys.stdout, log)
    code = proc.wait()
    if code:
        print(f"  ansible-playbook failed (exit {code}); the whole output: {log_path}", flush=True)
    return code


def main(argv: list[str] | None = None) -> None:
    """`python -m pikit.progress ansible-playbook -i inventory/mysite playbooks/site.yml`: any
    run shown as progress, its whole output in ~/.cache/pikit/logs/."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.exit(__doc__)
    logs = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pikit" / "logs"
    sys.exit(run(args, logs / f"ansible-{time.strftime('%Y%m%d-%H%M%S')}.log", Path.cwd()))


if __name__ == "__main__":
    main()
