"""``mask_url``: the one masking function of every service address and URL that is logged."""

from __future__ import annotations

import pytest

from crawler.config.readers import UNPARSABLE, mask_url

SECRET = "s3cr3t"


@pytest.mark.parametrize("address, masked", [
    # MongoDB: several hosts, replica sets, SRV, options that are no secret
    (f"mongodb://crawler:{SECRET}@h1:27017,h2:27017/?replicaSet=rs0",
     "mongodb://crawler:***@h1:27017,h2:27017/?replicaSet=rs0"),
    (f"mongodb://crawler:{SECRET}@127.0.0.1:1,127.0.0.1:2/?replicaSet=rs0&tls=true"
     "&tlsCAFile=/tmp/ca.pem&authSource=admin",
     "mongodb://crawler:***@127.0.0.1:1,127.0.0.1:2/?replicaSet=rs0&tls=true"
     "&tlsCAFile=/tmp/ca.pem&authSource=admin"),
    (f"mongodb+srv://crawler:{SECRET}@cluster0.abcde.mongodb.net/crawler?retryWrites=true&w=majority",
     "mongodb+srv://crawler:***@cluster0.abcde.mongodb.net/crawler?retryWrites=true&w=majority"),
    (f"mongodb://u:{SECRET}@[::1]:27017,[::1]:27018/db", "mongodb://u:***@[::1]:27017,[::1]:27018/db"),
    ("mongodb://u:p%40ss%2Fw@h/", "mongodb://u:***@h/"),
    ("mongodb://127.0.0.1:27017/", "mongodb://127.0.0.1:27017/"),
    ("mongodb://%2Ftmp%2Fmongodb-27017.sock/db", "mongodb://%2Ftmp%2Fmongodb-27017.sock/db"),
    # secrets in the query string, the other options kept
    (f"mongodb://h/?tls=true&tlsCertificateKeyFile=/k.pem&tlsCertificateKeyFilePassword={SECRET}",
     "mongodb://h/?tls=true&tlsCertificateKeyFile=/k.pem&tlsCertificateKeyFilePassword=***"),
    (f"mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:{SECRET}"
     ",SERVICE_NAME:x", "mongodb://h/?authMechanism=MONGODB-AWS&authMechanismProperties="
     "AWS_SESSION_TOKEN:***,SERVICE_NAME:x"),
    (f"mongodb://h/?replicaSet=rs0;password={SECRET};authSource=admin",
     "mongodb://h/?replicaSet=rs0;password=***;authSource=admin"),
    (f"redis://h:6379/0?Password={SECRET}&api_KEY={SECRET}&x-Token={SECRET}&clientSecret={SECRET}",
     "redis://h:6379/0?Password=***&api_KEY=***&x-Token=***&clientSecret=***"),
    # Redis
    (f"redis://:{SECRET}@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    (f"rediss://crawler:{SECRET}@127.0.0.1:6380/0?ssl_cert_reqs=required",
     "rediss://crawler:***@127.0.0.1:6380/0?ssl_cert_reqs=required"),
    (f"unix://:{SECRET}@/run/redis.sock?db=0&password={SECRET}",
     "unix://:***@/run/redis.sock?db=0&password=***"),
    # Kafka-style lists and options
    ("127.0.0.1:9092,127.0.0.1:9093", "127.0.0.1:9092,127.0.0.1:9093"),
    (f"SASL_SSL://u:{SECRET}@b1:9093,b2:9093", "SASL_SSL://u:***@b1:9093,b2:9093"),
    (f"sasl_plain_username=u;sasl_plain_password={SECRET}",
     "sasl_plain_username=u;sasl_plain_password=***"),
    (f"kafka://b1:9092?sasl_plain_password={SECRET}", "kafka://b1:9092?sasl_plain_password=***"),
    # a lone user info may be a token; page URLs keep their path
    (f"https://{SECRET}@github.com/x", "https://***@github.com/x"),
    (f"http://user:{SECRET}@127.0.0.1:1/hook", "http://user:***@127.0.0.1:1/hook"),
    ("https://medium.com/@someone/post", "https://medium.com/@someone/post"),
    (f"https://example.com/cb#access_token={SECRET}&state=1",
     "https://example.com/cb#access_token=***&state=1"),
    # a password with unescaped reserved characters (no client accepts it, but it is logged)
    (f"mongodb://u:pa/{SECRET}@h:1/db?x=1", "mongodb://u:***@h:1/db?x=1"),
    (f"mongodb://u:p?{SECRET}@h/?a=b", "mongodb://u:***@h/?a=b"),
    (f"mongodb://u:p#{SECRET}@h/", "mongodb://u:***@h/"),
    (f"mongodb://u:p@{SECRET}@h/", "mongodb://u:***@h/"),
    ("", ""),
])
def test_masks_every_shape(address: str, masked: str) -> None:
    assert mask_url(address) == masked
    assert SECRET not in mask_url(address)


@pytest.mark.parametrize("odd", [None, 12, b"mongodb://u:pw@h", object()])
def test_never_raises(odd: object) -> None:
    assert mask_url(odd) == UNPARSABLE


@pytest.mark.parametrize("odd", ["mongodb://[::1", "http://[bad/", "::::", "@@@", "a" * 10_000,
                                 "mongodb://u:pw@h:99999999999999999999/", "\x00\n://@?#=&"])
def test_odd_strings_give_a_string_without_the_password(odd: str) -> None:
    masked = mask_url(odd)
    assert isinstance(masked, str)
    assert "pw" not in masked
