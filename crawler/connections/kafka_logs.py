"""Keep SASL secrets (and a TLS key's password) out of kafka-python's DEBUG lines; its
warnings of a slow step of its own I/O thread out of a worker's warnings; and the clients'
DEBUG lines out of a crawl's log unless ``CLIENT_LOG_LEVEL`` asks for them.

At Scrapy's default ``LOG_LEVEL`` (DEBUG, that of a new project) kafka-python logs every
request it sends and receives: a new project with the add-on wrote 66,000 such lines (22 MB,
720 a page) in two minutes. :func:`client_log_level` sets the ``kafka`` and ``pymongo``
loggers to ``CLIENT_LOG_LEVEL`` (INFO): their warnings and errors stay in the log.

kafka-python 3.0 logs every request at DEBUG: ``SaslAuthenticateRequest(...,
auth_bytes=b'\\x00user\\x00password')`` (``kafka.net.connection``) and the raw bytes sent and
received (``kafka.protocol.parser``), so ``LOG_LEVEL=DEBUG`` would print a PLAIN password or
an OAUTHBEARER token. :func:`redact_sasl` puts a filter on kafka-python's loggers that
replaces every ``auth_bytes=…``, every raw ``Send:``/``Recv:`` payload, the
``sasl_plain_password`` and ``ssl_password`` of a logged configuration (``Starting
KafkaAdminClient with configuration: {...}``) and, as a last net, each configured secret
with ``***``.

A record no handler would print is dropped before its message is built: under Scrapy the
loggers pass DEBUG on (the handler, at ``LOG_LEVEL``, decides), and the message of a
produce request's DEBUG line is the repr of every record in it, hundreds of megabytes for
the 10,000 links of one page; building it only to mask it took a worker's peak RSS from
137 to 638 MiB (memray: 8.7 GB allocated in this filter during that crawl).

kafka-python 3 also warns ``Task … ran for 0.132s (>0.100s threshold). It is blocking the
event loop`` whenever one step of its I/O thread takes over 100 ms. In a worker that thread
shares the GIL with the reactor thread, and a busy worker logged 6 to 10 of them a minute in
the benchmark (steps of 0.11 to 0.13 s), each counted in ``log_count/WARNING`` and read as the
reactor blocked.
:func:`quiet_slow_steps` makes them DEBUG lines (the threshold is not a setting of the
consumer or the producer).
"""

from __future__ import annotations

import logging
import re

#: the loggers of kafka-python 3.0 that print request contents or the client's configuration;
#: every other ``kafka.*`` logger that exists when the filter is installed gets it too
KAFKA_LOGGERS = ("kafka.net.connection", "kafka.protocol.parser", "kafka.admin.client",
                 "kafka.producer.kafka", "kafka.consumer.group", "kafka.net.manager")
_PASSWORD = re.compile(
    r"""('(?:sasl_plain_password|ssl_password)': )(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
_AUTH_BYTES = re.compile(r"""auth_bytes=b?(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
_RAW = re.compile(r"\b(Send|Recv): (?:bytearray\()?b?(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\)?")
MASK = "***"


class SaslRedactor(logging.Filter):
    """Rewrites a record that may carry a SASL secret; never drops one."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < printed_from(record.name):
            return False  # nothing would print it: never format it
        text = record.getMessage()
        clean = _RAW.sub(lambda m: f"{m.group(1)}: {MASK}", _AUTH_BYTES.sub(
            f"auth_bytes={MASK}", text))
        clean = _PASSWORD.sub(lambda m: f"{m.group(1)}'{MASK}'", clean)
        for secret in self.secrets:
            clean = clean.replace(secret, MASK)
        if clean != text:
            record.msg, record.args = clean, None
        return True


def printed_from(name: str) -> int:
    """The lowest level a handler of logger *name* (or of one it propagates to) prints;
    with no handler at all, that of :data:`logging.lastResort` (a NullHandler prints none)."""
    logger: logging.Logger | None = logging.getLogger(name)
    levels: list[int] = []
    while logger is not None:
        levels += [h.level for h in logger.handlers  # kafka-python adds a NullHandler
                   if not isinstance(h, logging.NullHandler)]
        logger = logger.parent if logger.propagate else None
    if not levels:
        return logging.lastResort.level if logging.lastResort else logging.WARNING
    return min(levels)


_REDACTOR = SaslRedactor()


def skip_unprinted(name: str = "kafka") -> None:
    """Raise logger *name* (left at ``NOTSET``) to the lowest level its handlers print.

    Under Scrapy the loggers pass every level on and the handler, at ``LOG_LEVEL``, decides,
    so kafka-python built a record (the caller's frame, the time, the arguments) for each
    of its DEBUG lines, one or more per record sent or fetched, for the filter to drop:
    1.6% of a worker's CPU in the benchmark's profile. A level the project set itself stays.
    """
    logger = logging.getLogger(name)
    if logger.level == logging.NOTSET:
        level = printed_from(name)
        if level > logging.DEBUG:
            logger.setLevel(level)


def redact_sasl(*secrets: str) -> SaslRedactor:
    """Install the filter (once) on kafka-python's loggers, remembering *secrets*; and
    where nothing prints kafka-python's DEBUG lines, make none (:func:`skip_unprinted`)."""
    _REDACTOR.secrets.update(s for s in secrets if s)
    skip_unprinted()
    existing = [n for n in logging.Logger.manager.loggerDict if n.startswith("kafka.")]
    for name in {*KAFKA_LOGGERS, *existing}:
        logger = logging.getLogger(name)
        if _REDACTOR not in logger.filters:
            logger.addFilter(_REDACTOR)
    return _REDACTOR


#: the loggers of the service clients whose DEBUG lines are protocol traffic
CLIENT_LOGGERS = ("kafka", "pymongo")
CLIENT_LEVELS = ("debug", "info", "warning", "error")


def client_log_level(level: str) -> None:
    """Set kafka-python's and pymongo's loggers to *level* (one of :data:`CLIENT_LEVELS`)."""
    for name in CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(level.upper())


class SlowStepDemoter(logging.Filter):
    """kafka-python's warning of a slow step of its I/O thread, as a DEBUG line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.WARNING and _SLOW_STEP.match(str(record.msg)):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


_SLOW_STEP = re.compile(r"Task .* ran for [0-9.]+s \(>[0-9.]+s threshold\)")
_DEMOTER = SlowStepDemoter()
SELECTOR_LOGGER = "kafka.net.selector"


def quiet_slow_steps() -> None:
    """Install :class:`SlowStepDemoter` (once) on kafka-python's I/O thread's logger."""
    logger = logging.getLogger(SELECTOR_LOGGER)
    if _DEMOTER not in logger.filters:
        logger.addFilter(_DEMOTER)
