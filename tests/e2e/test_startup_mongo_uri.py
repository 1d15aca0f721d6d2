"""``scrapy crawl`` with any MongoDB URI: several hosts, a secured replica set.

A multi-host URI used to end the start-up in a traceback (the add-on's log line read the
port of ``h1:27017,h2:27017``); now a URI that points at nothing, a wrong password and a CA
that did not sign the server's certificate each end it with the one ERROR line that names
``MONGO_URI`` and the masked address, and a right URI crawls and stores through auth and TLS.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from helpers import SHORT_IDLE, tracebacks_outside_kafka

from crawler.config.readers import mask_url
from crawler.localstack.certs import make_tls_files
from crawler.localstack.demo import running, stored_pages, wait_all, worker_command, worker_logs
from crawler.localstack.secured_mongo import SecuredMongo
from crawler.localstack.services import HOST, free_port
from tests.e2e.test_startup_errors import START, crawl, the_one_error

SECRET = "s3cr3t-pw"


def test_a_multi_host_uri_pointing_at_nothing(stack) -> None:
    first, second = free_port(), free_port([0])
    uri = (f"mongodb://crawler:{SECRET}@{HOST}:{first},{HOST}:{second}/?replicaSet=rs0"
           f"&authSource=admin&tlsCertificateKeyFilePassword={SECRET}")
    code, out, elapsed = crawl({**stack.env(), "MONGO_URI": uri}, *START,
                               "-s", "CONNECT_TIMEOUT=2")
    line = the_one_error(code, out)
    assert f"Cannot reach the service of MONGO_URI at {mask_url(uri)}" in line, line
    assert f"{HOST}:{first},{HOST}:{second}" in line and "replicaSet=rs0" in line
    assert SECRET not in out
    assert elapsed < 30


def refused(stack, env: dict[str, str], secret: str) -> str:
    code, out, elapsed = crawl({**stack.env(), **env}, *START, "-s", "CONNECT_TIMEOUT=3")
    line = the_one_error(code, out)
    assert f"Cannot reach the service of MONGO_URI at {mask_url(env['MONGO_URI'])}" in line, line
    assert secret not in out
    assert elapsed < 30
    return line


def test_a_wrong_password(stack, secured_mongo: SecuredMongo) -> None:
    """The TLS options in ``MONGO_PARAMS`` (environment variable, JSON) this time."""
    uri = secured_mongo.uri(hosts=[f"{HOST}:{free_port()}"], password=SECRET, tls_in_uri=False)
    line = refused(stack, {"MONGO_URI": uri,
                           "MONGO_PARAMS": json.dumps(secured_mongo.tls_params())}, SECRET)
    assert "Authentication failed" in line and "check the user, password" in line, line


def test_a_wrong_ca(stack, secured_mongo: SecuredMongo, tmp_path: Path) -> None:
    other = make_tls_files(tmp_path / "other-ca", ca_name="another CA")
    uri = secured_mongo.uri(hosts=[f"{HOST}:{free_port()}"], ca_file=other.ca_file)
    line = refused(stack, {"MONGO_URI": uri}, secured_mongo.password)
    assert "CERTIFICATE_VERIFY_FAILED" in line and "check the TLS options" in line, line


def test_a_crawl_through_auth_and_tls(stack, secured_mongo: SecuredMongo, demo_site: str,
                                      demo_site_pages: int, crawl_id: str,
                                      tmp_path: Path) -> None:
    uri = secured_mongo.uri(hosts=[f"{HOST}:{free_port()}"])
    env = {**os.environ, **stack.env(), "MONGO_URI": uri, "CRAWL_ID": crawl_id}
    with running(1, worker_command(demo_site + "/", SHORT_IDLE), env, tmp_path) as workers:
        codes = wait_all(workers, timeout=600)
        log = worker_logs(workers)
    assert codes == [0], log[-3000:]
    assert not tracebacks_outside_kafka(log), log[-3000:]
    assert secured_mongo.password not in log
    assert mask_url(uri) in log  # "Distributed mode: ... MongoDB <masked>"
    assert stored_pages(uri, secured_mongo.database, crawl_id)[0] == demo_site_pages
