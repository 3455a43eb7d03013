"""The console beside a real broker, for tests/console and bench/console_*.py (imported as
``console_harness``; tests/ and tests/e2e are put on sys.path).

:func:`console_cluster` (a generator for a module fixture) starts one ``shoal serve`` with two
tenants (tests/e2e/tenancy_fixtures.py: ``a`` with user ``alice``, ``b`` with user ``bob``) and a
super user ``admin`` (``shoal.sasl.bootstrap.users``), then serves :func:`shoal.console.console_app`
under ``/ui/`` on a loopback port from a thread of its own (an aiohttp ``AppRunner`` and
``TCPSite`` on that thread's event loop), logging in to the broker's SASL_PLAINTEXT listener.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

HERE = Path(__file__).resolve().parent
for p in (HERE.parent, HERE.parent / "e2e"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import requests  # noqa: E402
from aiohttp import web  # noqa: E402

from broker_process import free_port  # noqa: E402
from tenancy_fixtures import TenantCluster, tenant_cluster  # noqa: E402

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
CHROMIUM, DRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def chromium(width: int = 1400, height: int = 1000, fail: Callable[[str], Any] = SystemExit) -> Any:
    """Headless Debian chromium through Debian's chromedriver (Selenium; no browser download), its
    console log kept (``get_log("browser")``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (shutil.which(CHROMIUM) and shutil.which(DRIVER)):
        fail("Debian's chromium and chromium-driver are needed (make deps installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--disable-extensions", "--no-first-run",
                "--hide-scrollbars", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(DRIVER), options=options)


class ConsoleServer:
    """``console_app`` mounted at /ui/ in a parent application, on its own thread and loop."""

    def __init__(self, bootstrap: str, operators: frozenset[str], ssl_context: Any = None,
                 lag_interval_s: float = 0.5, admin_url: str | None = None) -> None:
        self.bootstrap = bootstrap
        self.admin_url = admin_url  # the admin API the operator's pages call (as the user)
        self.lag_interval_s = lag_interval_s  # the lag plot's sampling, quick for the tests
        self.operators = operators
        self.ssl_context = ssl_context  # serve HTTPS with it
        self.port = free_port()
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.port}/ui/"
        self.loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self.loop.run_forever, name="console", daemon=True)

    def start(self) -> None:
        from shoal.console import console_app
        from shoal.console.operator_data import HttpAdminApi

        self._thread.start()

        async def start() -> None:
            root = web.Application()
            root.add_subapp("/ui/", console_app(self.bootstrap, is_operator=lambda u: u in self.operators,
                                                lag_interval_s=self.lag_interval_s,
                                                admin_api=HttpAdminApi(self.admin_url) if self.admin_url else None))
            self._runner = web.AppRunner(root, access_log=None, shutdown_timeout=5)
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=self.ssl_context).start()

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(30)

    def _stacks(self) -> str:
        import io

        out = io.StringIO()
        for task in asyncio.all_tasks(self.loop):
            task.print_stack(file=out)
        return out.getvalue()

    def run(self, coro: Any, timeout: float = 60) -> Any:
        """Run a coroutine on the console's loop (benchmarks time its handlers there)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._runner is not None:
            try:
                self.run(self._runner.cleanup())
            except TimeoutError:
                raise AssertionError(f"the console did not stop in 60 s; its tasks:\n{self._stacks()}") from None
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@dataclass
class ConsoleCluster:
    cluster: TenantCluster
    server: ConsoleServer

    @property
    def url(self) -> str:
        return self.server.url

    def password(self, user: str) -> str:
        if user == ADMIN:
            return ADMIN_PASSWORD
        for t in (self.cluster.a, self.cluster.b):
            if user in t.users:
                return t.users[user]
        raise KeyError(user)

    def login(self, user: str) -> "Browser":
        b = Browser(self.url)
        r = b.login(user, self.password(user))
        assert r.status_code == 200 and r.url.rstrip("/").endswith(("/ui/topics", "/ui/operator")), (r.status_code, r.url)
        return b


@contextmanager
def tenant_console(broker: Any, admin_api: bool = False) -> Iterator[tuple[ConsoleServer, Any]]:
    """Tenant "Tenant A" with user ``alice`` made through ``broker``'s admin API, and the console
    logging in through ``broker`` (calling its admin API as the user with ``admin_api``)."""
    from tenancy_fixtures import Tenant

    status, body = broker.http("POST", "/v1/tenants", {"display_name": "Tenant A"})
    assert status == 201, body
    tenant = Tenant(broker, body["tenant_id"])
    tenant.add_user("alice")
    server = ConsoleServer(broker.sasl_bootstrap, frozenset({ADMIN}), admin_url=broker.admin_url if admin_api else None)
    server.start()
    try:
        yield server, tenant
    finally:
        server.stop()


def console_cluster(overrides: dict[str, str] | None = None) -> Iterator[ConsoleCluster]:
    gen = tenant_cluster({"shoal.sasl.bootstrap.users": f"{ADMIN}:{ADMIN_PASSWORD}",
                          "super.users": f"User:ANONYMOUS;User:{ADMIN}", **(overrides or {})})
    cluster = next(gen)
    server = ConsoleServer(cluster.broker.sasl_bootstrap, frozenset({ADMIN}), admin_url=cluster.broker.admin_url)
    try:
        server.start()
        yield ConsoleCluster(cluster, server)
    finally:
        server.stop()
        for _ in gen:
            pass


CSRF = re.compile(r'name="csrf" value="([^"]+)"')


class Browser:
    """An HTTP client that keeps cookies and reads each form's CSRF token, as a browser does."""

    def __init__(self, base: str, ca: str | None = None) -> None:
        self.base = base
        self.http = requests.Session()
        self.http.trust_env = False  # no proxy or CA bundle from the environment: the console is on loopback
        if ca is not None:
            self.http.verify = ca

    def get(self, path: str, **kw: Any) -> requests.Response:
        return self.http.get(self.base + path.lstrip("/"), timeout=30, **kw)

    def post(self, path: str, data: dict[str, Any], *, csrf: bool = True, **kw: Any) -> requests.Response:
        data = dict(data)
        if csrf:
            data.setdefault("csrf", self.csrf())
        return self.http.post(self.base + path.lstrip("/"), data=data, timeout=30, **kw)

    def csrf(self) -> str:
        m = CSRF.search(self.get("topics").text)
        assert m, "no CSRF token on the topics page"
        return m.group(1)

    def login(self, user: str, password: str) -> requests.Response:
        page = self.get("login")
        m = CSRF.search(page.text)
        assert m, page.text
        return self.http.post(self.base + "login", data={"csrf": m.group(1), "user": user, "password": password},
                              timeout=30)
