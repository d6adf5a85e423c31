#!/usr/bin/env python3
"""Container health check: exit 0 only when the app on this host answers GET /health with HTTP 200 and
JSON `{"status": "ok", ...}`; exit 1 otherwise (not listening, timeout, an error status, not our JSON).

    python scripts/healthcheck.py            # http://127.0.0.1:${PORT:-7860}/health
    HEALTHCHECK_URL=http://engine:7860/health python scripts/healthcheck.py

Standard library only (it runs in the image's venv, but needs nothing from it), and a short timeout
(HEALTHCHECK_TIMEOUT seconds, default 4) so that a hung server reads as unhealthy instead of stalling
the container engine's probe.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request


def health_url() -> str:
    url = os.environ.get("HEALTHCHECK_URL", "").strip()
    if url:
        return url
    port = os.environ.get("PORT", "").strip() or "7860"
    return f"http://127.0.0.1:{port}/health"


def check(url: str, timeout: float) -> tuple[bool, str]:
    """(healthy, one line saying why)."""
    # No proxies: a probe of this host must not go through an HTTP(S)_PROXY set for downloads.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers={"Accept": "application/json"}),
                         timeout=timeout) as response:
            code = response.status
            body = response.read(1_000_000)
    except urllib.error.HTTPError as exc:
        return False, f"{url}: HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, f"{url}: {getattr(exc, 'reason', exc)}"
    if code != 200:
        return False, f"{url}: HTTP {code}"
    try:
        status = json.loads(body).get("status")
    except (ValueError, AttributeError):
        return False, f"{url}: not a JSON object"
    if status != "ok":
        return False, f"{url}: status {status!r}"
    return True, f"{url}: ok"


def main() -> int:
    try:
        timeout = float(os.environ.get("HEALTHCHECK_TIMEOUT", "") or 4)
    except ValueError:
        timeout = 4.0
    healthy, why = check(health_url(), timeout)
    print(why, file=sys.stdout if healthy else sys.stderr)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
