"""The tutorial ``docs/tutorials/add-a-site.md``, run as written: a fresh Scrapy project that
uses the add-on, a spider from ``scrapy genspider -t fleet``, ``scrapy check``, three workers
crawling a local site, every page in MongoDB exactly once.

Every ``sh`` block of the page runs, in order, in one ``bash -e -o pipefail`` in an empty
directory, with this virtualenv first on ``PATH`` (its ``python`` and ``scrapy``; the package
is installed in it) and none of the crawler's settings in the environment. The test adds one
thing: before the last block, which stops the services, it reads the URL of every document
in the crawl's collection. The settings are the project's (Scrapy's template and the
add-on) and the three the page sets on the command line, saying why.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from crawler.config.readers import ENV_SETTINGS
from crawler.localstack.demo_site import site_urls
from crawler.localstack.stack import Stack

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "docs" / "tutorials" / "add-a-site.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
GENERATED = re.compile(r"^<!-- genspider writes: (\S+) -->\n```python\n(.*?)^```",
                       re.MULTILINE | re.DOTALL)
SHOWN_URL = "http://127.0.0.1:8000/"  # the site's address in the spider the page shows
TIMEOUT = 300.0
# Run before the last block: the URL of every document of collection argv[2], as JSON.
STORED = """python - {path} {collection} <<'EOF'
import json, os, sys
from pymongo import MongoClient
documents = MongoClient(os.environ["MONGO_URI"])["crawler"][sys.argv[2]].find({{}}, {{"url": 1}})
with open(sys.argv[1], "w") as out:
    json.dump([d["url"] for d in documents], out)
EOF
"""


def shell_blocks(text: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang == "sh"]


def _one(pattern: str, text: str) -> str:
    found = re.findall(pattern, text)
    assert len(found) == 1, f"{TUTORIAL.name}: {pattern!r} found {found}"
    return str(found[0])


def _env() -> dict[str, str]:
    """This environment without the crawler's or Scrapy's settings, the venv first on PATH."""
    env = {k: v for k, v in os.environ.items()
           if k not in ENV_SETTINGS and not k.startswith("SCRAPY_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _run(script: Path, cwd: Path, log: Path) -> int:
    """Run *script*; its exit status (-1 after ``TIMEOUT``). Whatever it left running in
    its process group (the site, workers, when it stopped early) is killed."""
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", str(script)], cwd=cwd,
                                env=_env(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            return proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return -1
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def _logs(directory: Path) -> str:
    logs = [directory / "tutorial.log", *sorted(directory.glob("*/worker-*.log"))]
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                     for p in logs if p.exists())


def test_the_add_a_site_tutorial_runs_as_written(tmp_path: Path) -> None:
    text = TUTORIAL.read_text()
    blocks = shell_blocks(text)
    assert len(blocks) >= 7 and "stack stop" in blocks[-1], blocks
    project = _one(r"scrapy startproject (\w+)", text)
    spider = _one(r"scrapy genspider -t fleet (\w+)", text)
    pages = int(_one(r"demo_site --pages (\d+)", text))
    stored = tmp_path / "stored.json"
    check = STORED.format(path=shlex.quote(str(stored)), collection=spider)
    script = tmp_path / "tutorial.sh"
    script.write_text("\n".join([*blocks[:-1], check, blocks[-1]]))
    try:
        status = _run(script, tmp_path, tmp_path / "tutorial.log")
    finally:
        Stack(tmp_path / ".stack").stop()  # if the script stopped before its last block
    output = (tmp_path / "tutorial.log").read_text(errors="replace")
    assert status == 0, f"the tutorial's commands exited {status}\n{_logs(tmp_path)}"

    base = (tmp_path / "demo-site.txt").read_text().split()[1]
    urls = json.loads(stored.read_text())
    assert sorted(urls) == sorted(site_urls(base, pages)), (len(urls), _logs(tmp_path))

    path, shown = GENERATED.search(text).groups()  # type: ignore[union-attr]
    written = (tmp_path / project / path).read_text()
    assert written.replace(base, SHOWN_URL) == shown, "step 4 shows another spider"
    assert "Available templates:\n  fleet\n  basic\n" in output, output[-3000:]
    assert re.search(r"Ran 3 contracts in [\d.]+s\s+OK", output), output[-3000:]
    assert f"fetched {pages} (2xx {pages})" in output and "unaccounted 0" in output, output
    assert f"{pages} pages stored" in output, output[-3000:]
    assert str({"url": base, "title": "Page 0"}) in output, output[-3000:]
