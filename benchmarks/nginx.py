"""nginx from Debian serving a directory on a free loopback port, stopped by its PID."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType

from crawler.localstack.services import HOST, free_port

logger = logging.getLogger(__name__)

CONFIG = """daemon off;{user}
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  sendfile on;
  keepalive_requests 100000;
  default_type text/html;
  client_body_temp_path {prefix}/tmp;
  proxy_temp_path {prefix}/tmp;
  fastcgi_temp_path {prefix}/tmp;
  uwsgi_temp_path {prefix}/tmp;
  scgi_temp_path {prefix}/tmp;
  server {{
    listen {host}:{port};
    root {root};
    index index.html;
  }}
}}
"""


def nginx_binary() -> str:
    for candidate in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("nginx not found: apt-get install nginx-light (./run bench does)")


class Nginx:
    """``with Nginx(root, workdir) as server: server.base_url``."""

    def __init__(self, root: Path, workdir: Path) -> None:
        self.root = Path(root).absolute()
        self.prefix = Path(workdir).absolute()
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        (self.prefix / "tmp").mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = self.prefix / "nginx.conf"
        user = "\nuser root;" if os.geteuid() == 0 else ""  # the site may sit in a private folder
        conf.write_text(CONFIG.format(user=user, prefix=self.prefix, host=HOST, port=self.port,
                                      root=self.root))
        self.process = subprocess.Popen(
            [nginx_binary(), "-c", str(conf), "-p", str(self.prefix), "-e", "stderr"],
            stdout=subprocess.DEVNULL, stderr=open(self.prefix / "stderr.log", "ab"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nginx exited: {(self.prefix / 'stderr.log').read_text()}")
            try:
                with urllib.request.urlopen(self.base_url + "/", timeout=1) as reply:
                    reply.read()
                logger.info("nginx serves %s on %s", self.root, self.base_url)
                return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"nginx did not answer on {self.base_url} within {timeout}s")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGQUIT)  # graceful; workers follow the master
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> Nginx:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
