"""Real HTTP forward proxies on loopback for tests: healthy ones, a dead, a slow, a forbidden one.

Each live proxy is a ``proxy.py`` process (a development
dependency) with this module's plugins, started in its own process group::

    python -m proxy --hostname 127.0.0.1 --port 0 --port-file DIR/p.port --num-acceptors 1 \\
        --threaded --log-level WARNING --data-dir DIR/p.data --cache-dir DIR/p.data/cache \\
        --plugins servers.testproxies.TagPlugin [servers.testproxies.SlowPlugin] \\
        [--basic-auth user:pass]   # the forbidden one: --plugins servers.testproxies.ForbidPlugin

Every forwarded request carries ``X-Test-Proxy: 127.0.0.1:<port>`` (the fault origin logs it as
``proxy``) and ``Connection: close``: proxy.py sends every later request of a kept-alive client
connection to the first request's upstream, whatever its host, so each request gets its own
connection. The dead proxy is a port bound but not listening (connections are refused) and held
until :meth:`ProxySet.stop`.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from proxy.http.exception import HttpRequestRejected
from proxy.http.parser import HttpParser
from proxy.http.proxy import HttpProxyBasePlugin

SLOW_DELAY = 1.5  # seconds the slow proxy waits before forwarding each request
AUTH = ("user", "pass")  # the credentials of the last healthy proxy
_PLUGINS = "servers.testproxies."


class TagPlugin(HttpProxyBasePlugin):
    """Names the proxy in ``X-Test-Proxy`` and asks the origin to close after responding."""

    def handle_client_request(self, request: HttpParser) -> HttpParser | None:
        request.add_header(b"X-Test-Proxy", f"127.0.0.1:{self.flags.port}".encode())
        request.add_header(b"Connection", b"close")
        return request


class SlowPlugin(HttpProxyBasePlugin):
    """Waits ``SLOW_DELAY`` seconds before forwarding each request (the proxy is threaded)."""

    def handle_client_request(self, request: HttpParser) -> HttpParser | None:
        time.sleep(SLOW_DELAY)
        return request


class ForbidPlugin(HttpProxyBasePlugin):
    """Answers ``403 Forbidden`` to every request, CONNECT included, without going upstream."""

    def before_upstream_connection(self, request: HttpParser) -> HttpParser | None:
        raise HttpRequestRejected(status_code=403, reason=b"Forbidden",
                                  body=b"403 Forbidden by the test proxy\n")


@dataclass
class ProxySet:
    """Proxy URLs by behaviour; :meth:`stop` ends the processes this set started, by PID."""

    healthy: list[str]
    dead: str
    slow: str
    forbidden: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    reserved: socket.socket | None = field(default=None, repr=False)

    @property
    def all(self) -> list[str]:
        return [*self.healthy, self.dead, self.slow, self.forbidden]

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM each proxy, then SIGKILL whatever is left of its process group."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _kill_group(proc)
        if self.reserved is not None:
            self.reserved.close()
            self.reserved = None

    def __enter__(self) -> ProxySet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _kill_group(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGKILL what is left of the process group the proxy leads (its acceptors), and wait."""
    if group_alive(proc.pid):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.poll() is None:
        proc.wait()
    deadline = time.monotonic() + timeout
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def group_alive(pgid: int) -> bool:
    """Whether a process other than a zombie is in process group *pgid* (read from /proc)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _launch(directory: Path, name: str, plugins: list[str],
            auth: tuple[str, str] | None = None) -> subprocess.Popen[bytes]:
    port_file = directory / f"{name}.port"
    port_file.unlink(missing_ok=True)
    data = directory / f"{name}.data"
    argv = [sys.executable, "-m", "proxy", "--hostname", "127.0.0.1", "--port", "0",
            "--port-file", str(port_file), "--num-acceptors", "1", "--threaded",
            "--log-level", "WARNING", "--log-file", str(directory / f"{name}.log"),
            "--data-dir", str(data), "--cache-dir", str(data / "cache"),  # not ~/.proxy
            "--plugins", *(_PLUGINS + plugin for plugin in plugins)]
    if auth is not None:
        argv += ["--basic-auth", ":".join(auth)]
    env = dict(os.environ)  # proxy.py imports the plugins from tests/servers
    tests_dir = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [tests_dir, env.get("PYTHONPATH")]))
    with open(directory / f"{name}.out", "ab") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                start_new_session=True, env=env)


def _wait_port(directory: Path, name: str, proc: subprocess.Popen[bytes], deadline: float) -> int:
    """The port a launched proxy wrote to its port file, once it accepts connections."""
    port_file = directory / f"{name}.port"
    while time.monotonic() < deadline and proc.poll() is None:
        text = port_file.read_text() if port_file.exists() else ""
        if text.endswith("\n") and _answers(int(text.split()[0])):
            return int(text.split()[0])
        time.sleep(0.05)
    out = (directory / f"{name}.out").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"proxy {name} did not start (exit {proc.poll()}): {out}")


def _answers(port: int) -> bool:
    """Whether the proxy answers HTTP (its port listens before its acceptor process runs)."""
    probe = b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: 127.0.0.1:1\r\nConnection: close\r\n\r\n"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5.0) as sock:
            sock.sendall(probe)
            return sock.recv(16).startswith(b"HTTP/1.")
    except OSError:
        return False


def _reserve_port() -> socket.socket:
    """A socket bound to a free loopback port and not listening: connecting is refused."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


def start_proxies(directory: str | Path, *, healthy: int = 2, auth: bool = True,
                  timeout: float = 30.0) -> ProxySet:
    """Start *healthy* proxies (the last one with ``AUTH`` credentials when *auth*), a slow one
    and a forbidden one, all at once, and reserve a dead port; ``stop()`` the returned set."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    specs = [(f"healthy{i}", ["TagPlugin"], AUTH if auth and i == healthy - 1 else None)
             for i in range(healthy)]
    specs += [("slow", ["TagPlugin", "SlowPlugin"], None), ("forbidden", ["ForbidPlugin"], None)]
    reserved = _reserve_port()
    proxies = ProxySet([], _url(reserved.getsockname()[1], None), "", "", reserved=reserved)
    try:
        proxies.procs = [_launch(directory, *spec) for spec in specs]
        deadline = time.monotonic() + timeout
        urls = [_url(_wait_port(directory, name, proc, deadline), credentials)
                for (name, _, credentials), proc in zip(specs, proxies.procs, strict=True)]
    except BaseException:
        proxies.stop()
        raise
    proxies.healthy, proxies.slow, proxies.forbidden = urls[:healthy], urls[-2], urls[-1]
    return proxies


def _url(port: int, credentials: tuple[str, str] | None) -> str:
    userinfo = f"{credentials[0]}:{credentials[1]}@" if credentials else ""
    return f"http://{userinfo}127.0.0.1:{port}"
