"""Worker processes for the kill tests: start, aim, kill -9, restart, and what each kill hit.

Every worker generation sends its own User-Agent (``kill-test/w<index>g<generation>``), so the
origin's request log tells which process fetched what. A kill reads the victim's last
heartbeat (``{CRAWL_ID}:workers``) before it and the group's committed offsets right after it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from kafka import KafkaAdminClient, TopicPartition

from crawler.config.defaults import KAFKA_PARTITIONS, KAFKA_PRIORITY_BANDS
from crawler.localstack.demo import Worker, start_worker, worker_command

STARTED = " started (bot: "  # Scrapy's first log line: the process runs, the frontier is not open
JOINING = "Kafka frontier open"  # logged once the consumer subscribed: the group join begins
ASSIGNED = "Partitions assigned"
REVOKED = "Partitions revoked"
CONSUMED_TOPICS = len(KAFKA_PRIORITY_BANDS) + 2  # <id>.requests, a topic per band, <id>.seeds


def kill_seed() -> int:
    """``KILL_SEED`` from the environment, else a fresh random seed."""
    value = os.environ.get("KILL_SEED")
    return int(value) if value else random.SystemRandom().randrange(1 << 32)


@dataclass
class Kill:
    """One kill -9: whom, when, in which phase, and what the victim held."""

    phase: str
    index: int
    agent: str
    pid: int
    at: float
    leases: int = 0
    lag: dict[str, int] = field(default_factory=dict)  # requests partitions of the victim
    committed: dict[str, int] = field(default_factory=dict)  # group offsets after the kill
    log_states: str = ""  # what the victim's log showed: "started", "joining", "assigned"


@dataclass
class Generation:
    worker: Worker
    agent: str
    log_from: int  # byte offset of this generation's first line in the shared log file


class KillCluster:
    """Workers of one crawl, each restartable, with the probes the kill tests aim by."""

    def __init__(self, env: dict[str, str], crawl_id: str, start_url: str, log_dir: Path,
                 seed: int) -> None:
        self.env, self.crawl_id, self.start_url, self.log_dir = env, crawl_id, start_url, log_dir
        self.seed = seed
        self.rng = random.Random(seed)
        self.current: dict[int, Generation] = {}
        self.generations: dict[int, int] = {}
        self.history: list[Generation] = []  # every generation started, in order
        self.kills: list[Kill] = []
        self.starts: list[tuple[float, str]] = []
        self.redis = redis.Redis.from_url(env["REDIS_URL"])
        self.admin = KafkaAdminClient(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"])
        self.topic = f"{crawl_id}.requests"

    def close(self) -> None:
        for gen in self.current.values():
            if gen.worker.process.poll() is None:
                gen.worker.process.kill()
                gen.worker.process.wait()
            gen.worker.log.close()
        self.redis.close()
        self.admin.close()

    # -- processes ----------------------------------------------------------
    def start(self, index: int) -> Generation:
        self.generations[index] = self.generations.get(index, -1) + 1
        agent = f"kill-test/w{index}g{self.generations[index]}"
        log_file = self.log_dir / f"worker-{index}.log"
        offset = log_file.stat().st_size if log_file.exists() else 0
        # USER_AGENT names the process in the origin's log (whose fetches were redelivered);
        # nothing in the crawler reads it. Every other setting is the default.
        cmd = worker_command(self.start_url, {"USER_AGENT": agent})
        worker = start_worker(index, cmd, {**self.env, "CRAWL_ID": self.crawl_id}, self.log_dir)
        self.current[index] = Generation(worker, agent, offset)
        self.history.append(self.current[index])
        self.starts.append((time.time(), agent))
        print(f"[kill seed={self.seed}] start {agent} pid {worker.process.pid}", flush=True)
        return self.current[index]

    def log_text(self, index: int) -> str:
        return self.generation_log(self.current[index])

    def log_size(self, index: int) -> int:
        """Bytes in worker *index*'s log file now: a mark for :meth:`log_since`."""
        return os.path.getsize(self.current[index].worker.log.name)

    def log_since(self, index: int, mark: int) -> str:
        """What worker *index* logged after *mark*, read without the lines before it (a
        poll every 20 ms of a whole log fell behind the moment it waited for under load)."""
        with open(self.current[index].worker.log.name, "rb") as f:
            f.seek(mark)
            return f.read().decode(errors="replace")

    def generation_log(self, gen: Generation) -> str:
        """The lines *gen* wrote (a worker's generations share one log file)."""
        later = [g.log_from for g in self.history
                 if g.worker.log.name == gen.worker.log.name and g.log_from > gen.log_from]
        with open(gen.worker.log.name, "rb") as f:
            f.seek(gen.log_from)
            data = f.read(min(later) - gen.log_from) if later else f.read()
        return data.decode(errors="replace")

    def alive(self) -> list[int]:
        return [i for i, g in self.current.items() if g.worker.process.poll() is None]

    def kill(self, index: int, phase: str, *, restart: bool = True) -> Kill:
        """kill -9 worker *index*, note what it held, and start its next generation."""
        gen = self.current[index]
        os.kill(gen.worker.process.pid, signal.SIGKILL)  # first: the moment is the point
        at = time.time()
        beat = self.heartbeats().get(gen.worker.process.pid, {})  # its last, still in Redis
        gen.worker.process.wait()
        gen.worker.log.close()
        kill = Kill(phase, index, gen.agent, gen.worker.process.pid, at)
        info = beat.get("info") or {}
        kill.leases = int(info.get("leases") or 0)
        kill.lag = {p: int(v or 0) for p, v in info.get("lag_by_partition", {}).items()
                    if p.startswith(self.topic + ":")}
        kill.committed = self.committed(list(kill.lag))
        kill.log_states = _log_state(self.log_text(index))
        self.kills.append(kill)
        print(f"[kill seed={self.seed}] kill {gen.agent} ({phase}; log: {kill.log_states}; "
              f"leases {kill.leases}, lag {sum(kill.lag.values())})", flush=True)
        if restart:
            self.start(index)
        else:  # gone for good: no exit code to wait for
            del self.current[index]
        return kill

    # -- probes -------------------------------------------------------------
    def heartbeats(self) -> dict[int, dict[str, Any]]:
        """The fresh heartbeat of every live worker of this cluster, by pid."""
        pids = {g.worker.process.pid for g in self.current.values()
                if g.worker.process.poll() is None}
        beats: dict[int, dict[str, Any]] = {}
        for value in self.redis.hgetall(f"{{{self.crawl_id}}}:workers").values():
            doc = json.loads(value)
            pid = (doc.get("info") or {}).get("pid")
            if pid in pids and time.time() - float(doc["ts"]) < 3.0:
                beats[pid] = doc
        return beats

    def holders(self) -> list[int]:
        """Live workers whose heartbeat shows leases and uncommitted records of requests."""
        found = []
        by_pid = self.heartbeats()
        for index in self.alive():
            info = by_pid.get(self.current[index].worker.process.pid, {}).get("info") or {}
            lag = [v for p, v in info.get("lag_by_partition", {}).items()
                   if p.startswith(self.topic + ":") and v]
            if info.get("leases") and lag:
                found.append(index)
        return found

    def drained(self) -> bool:
        """Whether every live worker's heartbeat shows the crawl drained: idle, lag zero,
        and every partition of the topics it consumes assigned (it is waiting out the idle
        timeout): a request topic per priority band, and the seeds topic."""
        beats = self.heartbeats()
        if not beats or len(beats) != len(self.alive()):
            return False
        assigned = {p for b in beats.values() for p in b["assigned"]}
        return (all(b["idle"] and b["lag"] == 0 for b in beats.values())
                and len(assigned) == CONSUMED_TOPICS * KAFKA_PARTITIONS)

    def committed(self, partitions: list[str]) -> dict[str, int]:
        """The consumer group's committed offset of each ``topic:partition`` (0 if none)."""
        if not partitions:
            return {}
        tps = [TopicPartition(p.rsplit(":", 1)[0], int(p.rsplit(":", 1)[1])) for p in partitions]
        group = f"{self.crawl_id}.workers"
        offsets = self.admin.list_group_offsets({group: tps}).get(group, {})
        return {f"{tp.topic}:{tp.partition}": max(getattr(offsets.get(tp), "offset", 0), 0)
                for tp in tps}

    def wait_codes(self, timeout: float) -> list[int]:
        """Every worker's exit code once all have exited by themselves."""
        deadline = time.monotonic() + timeout
        for gen in self.current.values():
            try:
                gen.worker.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{gen.agent} still running after {timeout:.0f}s "
                                     f"(KILL_SEED={self.seed})\n{self.tails(60)}") from None
        return [g.worker.process.returncode for g in self.current.values()]

    def tails(self, lines: int = 30) -> str:
        return "\n".join("\n".join(self.log_text(i).splitlines()[-lines:]) for i in self.current)


def _log_state(log: str) -> str:
    """Where a worker's log says it was: started, joining, rebalancing or assigned."""
    if ASSIGNED not in log:
        return "joining" if JOINING in log else "started" if STARTED in log else "launched"
    return "rebalancing" if log.rfind(REVOKED) > log.rfind(ASSIGNED) else "assigned"
