"""Coverage-guided fuzzing of every decoder of tests/fuzz/targets.py with atheris.

    python tests/fuzz/atheris_decoders.py -atheris_runs=100000      # about a minute
    python tests/fuzz/atheris_decoders.py -max_total_time=3600      # the long run

The first byte of each input picks the target, the rest is its record; the corpus starts
from valid records of each kind (:data:`SEEDS`), so mutations reach past ``json.loads``.
A crash prints the input and exits non-zero (docs/fuzzing.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fuzz.targets

with atheris.instrument_imports(include=["crawler"]):
    from fuzz.targets import TARGETS, check

SEEDS = (
    b'{"v":1,"url":"http://a.test/p","method":"GET","headers":{},"meta":{"depth":1},'
    b'"priority":0,"callback":"parse","cb_kwargs":{}}',
    b'{"url":"HTTPS://A.test:443/./x#f","priority":5,"meta":{"depth_limit":2}}',
    b"https://a.test/x", b'url,priority\nhttp://a.test/,1\n',
    b'{"ts":1.5,"info":{"pages":3}}', b'{"at":1.0,"closed":2.0,"reason":"finished"}',
    b'{"ts":1.0,"ttl":30,"alert":"x","worker":"w"}',
    b'{"success":0.9,"latency":0.2,"state":"alive","until":0,"deaths":0,"streak":1}', b"12",
    b'{"v":2,"url":"http://a.test/t","tags":["datetime","tuple","dict"],"meta":{"w":'
    b'{"$t":"datetime","v":"2024-05-01T12:00:00.5+02:00"},"k":{"$t":"dict","v":[[{"$t":'
    b'"tuple","v":[1,"a"]},{"$t":"set","v":[1]}]]}},"cb_kwargs":{"d":{"$t":"Decimal","v":'
    b'"1.5E+3"}}}',
    b'{"$t":"PageMethod","v":["click",[{"$t":"bytes","v":"AP8="}],{"timeout":{"$t":'
    b'"timedelta","v":[0,5,0]}}]}',
)


def one_input(data: bytes) -> None:
    if not data:
        return
    check(TARGETS[data[0] % len(TARGETS)], data[1:])


def corpus(directory: Path) -> None:
    """Write :data:`SEEDS`, once for each target, into *directory* (the first corpus)."""
    directory.mkdir(parents=True, exist_ok=True)
    for index, _target in enumerate(TARGETS):
        for number, seed in enumerate(SEEDS):
            (directory / f"{index}-{number}").write_bytes(bytes([index]) + seed)


def main() -> None:
    args = list(sys.argv)
    given = [a for a in args[1:] if not a.startswith("-")]  # corpus directories
    if not given:
        given = [str(Path(__file__).resolve().parent / ".corpus")]
        args.append(given[0])
    if not Path(given[0]).is_file():  # a file: one input to run again (a crash-<sha1>)
        corpus(Path(given[0]))
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
