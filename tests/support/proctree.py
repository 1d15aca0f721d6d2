"""A worker's process tree, read from ``/proc``: what it started, and what of that still runs
(the browser tests: no Chromium may outlive its worker)."""

from __future__ import annotations

from pathlib import Path

Processes = dict[int, tuple[int, str]]  # PID -> (start time, command line)


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent PID, state, start time) of *pid*, or None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return int(fields[1]), fields[0], int(fields[19])


def descendants(root: int) -> Processes:
    """Every process below *root*, its children's children too."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            children.setdefault(stat[0], []).append(int(entry.name))
    found: Processes = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        stat = _stat(pid)
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if stat is not None:
            found[pid] = (stat[2], cmdline)
            todo += children.get(pid, [])
    return found


def still_running(processes: Processes) -> list[str]:
    """Those of *processes* still running (a zombie has ended; a PID reused is another)."""
    alive = []
    for pid, (start, cmdline) in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == start and stat[1] != "Z":
            alive.append(f"{pid} {cmdline[:120]}")
    return alive


def chromium(processes: Processes) -> list[int]:
    """The Chromium processes among *processes*."""
    return [pid for pid, (_start, cmdline) in processes.items() if "chromium" in cmdline]
