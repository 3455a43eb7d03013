"""A broker started as ``make serve`` starts it (``shoal serve --quickstart``), its ports moved to
free ones, and an environment whose ``shoal`` and ``python3`` are this checkout: for the tests of
the quickstart's banner and of docs/tenancy.md's recipe. Imported as ``quickstart_broker``."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from broker_process import REPO, BrokerProcess, free_port
from shoal import quickstart


class QuickstartBroker(BrokerProcess):
    """``shoal serve --quickstart`` with its four loopback ports moved to free ones."""

    def __init__(self, workdir: Path) -> None:
        self.sasl_port, self.admin_port, self.metrics_port = free_port(), free_port(), free_port()
        super().__init__(workdir, overrides={"shoal.admin.listener": f"http://127.0.0.1:{self.admin_port}",
                                             "shoal.metrics.listener": f"http://127.0.0.1:{self.metrics_port}"})

    def listeners(self) -> list[str]:
        return super().listeners() + [f"SASL_PLAINTEXT://{self.host}:{self.sasl_port}"]

    def serve_args(self) -> list[str]:
        return ["--quickstart", *super().serve_args()]

    @property
    def credentials(self) -> Path:
        return self.data_dir / quickstart.CREDENTIALS_FILE

    def banner(self) -> str:
        """The last start's quickstart banner, from the broker's stdout (printed just after its
        listeners answer)."""
        deadline = time.monotonic() + 30
        while True:
            text = self.log_text().rsplit("===== start #", 1)[-1]
            if "\nshoal topics list" in text or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        start = text.index("Quickstart: everything on loopback")
        end = text.index("\nEOF\n", start) + len("\nEOF\n")
        return text[start:end] + text[end:].split("\n", 1)[0]


def tool_path(tmp: Path) -> dict[str, str]:
    """An environment whose ``shoal`` and ``python3`` are this checkout and this interpreter."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "shoal").write_text(f'#!/bin/sh\nexec {sys.executable} -m shoal "$@"\n')
    (bin_dir / "shoal").chmod(0o755)
    if not (bin_dir / "python3").exists():
        (bin_dir / "python3").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHOAL_")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env
