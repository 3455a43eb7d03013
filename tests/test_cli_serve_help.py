"""``shoal serve --help`` documents every flag in one line of help each, and a flag that sets a
broker config names it (and sets that very config)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from shoal.cli.serve import _overrides, add_parser
from shoal.config import BROKER_CONFIGS

REPO = Path(__file__).resolve().parents[1]


def serve_parser() -> argparse.ArgumentParser:
    sub = argparse.ArgumentParser(prog="shoal").add_subparsers()
    add_parser(sub)
    return sub.choices["serve"]


def test_every_flag_has_a_one_line_help_in_serve_help():
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), COLUMNS="200")
    r = subprocess.run([sys.executable, "-m", "shoal", "serve", "--help"], capture_output=True, text=True,
                       timeout=30, env=env)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    flags = [a for a in serve_parser()._actions if a.option_strings]
    assert len(flags) >= 9
    for action in flags:
        assert action.help and action.help.strip() and "\n" not in action.help, action.option_strings
        for option in action.option_strings:
            assert re.search(rf"(^|\s|\[){re.escape(option)}\b", out), option
        assert action.help.split()[0] in out  # the description is printed, not only the flag
    assert "--override" in out and "Kafka's names" in out


def test_flags_set_the_broker_config_their_help_names():
    parser = serve_parser()
    named = {}
    for action in parser._actions:
        m = re.match(r"([a-z]+(?:\.[a-z]+)*): ", action.help or "")
        if m:
            assert m.group(1) in BROKER_CONFIGS, m.group(1)
            named[action.dest] = m.group(1)
    assert set(named) == {"listeners", "advertised_listeners", "log_dirs", "node_id", "rack"}
    args = parser.parse_args(["--listeners", "PLAINTEXT://127.0.0.1:1", "--advertised-listeners", "PLAINTEXT://h:1",
                              "--log-dirs", "/d", "--node-id", "7", "--rack", "r1"])
    assert sorted(_overrides(args)) == sorted(named.values())
