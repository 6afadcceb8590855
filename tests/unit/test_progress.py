"""`make demo`'s ansible-playbook runs as progress: one line per play, a status line, the recap, a
failure in full; the log keeps every line."""

from __future__ import annotations

import io

from pikit.progress import Progress, show

RUN = """\
PLAY [Preflight - validate the inventory] **************************************

TASK [pikit : Validate the site-wide variables] ********************************
ok: [pi-1]
ok: [pi-2]

TASK [pikit : Build the site model] ********************************************
ok: [pi-1]

PLAY [Kafka] *******************************************************************

TASK [kafka : Render server.properties] ****************************************
changed: [pi-1]
fatal: [pi-2]: FAILED! =>
    changed: false
    msg: the broker did not come back
[ERROR]: Task failed: the broker did not come back
Origin: /kit/roles/kafka/tasks/health.yml:3:3

TASK [kafka : Next] ************************************************************
ok: [pi-1]

PLAY RECAP *********************************************************************
pi-1                       : ok=4    changed=1    unreachable=0    failed=0
pi-2                       : ok=2    changed=0    unreachable=0    failed=1
"""


def test_one_line_per_play_a_status_line_the_failure_in_full_and_the_recap() -> None:
    progress = Progress()
    shown = [
        text for n, line in enumerate(RUN.splitlines(keepends=True)) for text in progress.feed(line, float(n))
    ]
    lines = [text for text in shown if not text.endswith("\r")]
    status = [text for text in shown if text.endswith("\r")]
    assert status[0] == "    1 tasks done; now: pikit : Validate the site-wide variables\r"
    assert len(status) == 4
    text = "".join(lines)
    assert "  Preflight - validate the inventory: 2 tasks, 9s\n" in text
    assert "  Kafka: 2 tasks, " in text
    assert "FAILED in task [kafka : Render server.properties] of play [Kafka]" in text
    for detail in (
        "fatal: [pi-2]: FAILED! =>",
        "msg: the broker did not come back",
        "Origin: /kit/roles/kafka",
    ):
        assert detail in text, detail
    assert "ok: [pi-1]" not in text and "changed: [pi-1]" not in text
    assert "pi-2                       : ok=2" in text


def test_the_log_keeps_every_line_and_the_terminal_gets_far_fewer() -> None:
    noisy = RUN.replace("ok: [pi-1]\n", "ok: [pi-1]\n" * 200)
    out, log = io.StringIO(), io.StringIO()
    show(io.StringIO(noisy), out, log)
    assert log.getvalue() == noisy
    printed = [line for line in out.getvalue().split("\n") if line.strip(" \r")]
    assert len(printed) < 25 < len(noisy.splitlines())
