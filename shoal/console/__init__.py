"""The Shoal Console: a web UI for tenants and operators (issue 30), served under ``/ui/``.

Server-rendered pages (Jinja2 templates in ``templates/``), one stylesheet and a few lines of
script in ``static/``, all served by Shoal (no CDN, no build step). The console acts for the
logged-in user over the Kafka protocol with Shoal's own client, authenticated as that user, so
the broker's scoping and authorization decide what it sees (``shoal.console.kafka``). See
docs/console.md.
"""

from shoal.console.app import console_app

__all__ = ["console_app"]
