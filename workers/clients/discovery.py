"""An endpoint's model, found when only its URL is set.

`GROUNDSTREAM_JUDGE_URL` set without `GROUNDSTREAM_JUDGE_MODEL` (likewise the sampler's):
the model is the one `GET {url}/models` lists, named once at start-up; an endpoint that
lists several or none, or cannot be asked, is refused in one line naming them and the
setting. Before, such a judge counted as not configured and every record said so.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request

from pipeline.errors import GroundstreamError

log = logging.getLogger("groundstream.endpoints")

LIST_TIMEOUT_S = 10.0
"""How long start-up waits for `GET {url}/models`."""

_FOUND: dict[tuple[str, str], str] = {}
"""Models found in this process, per (kind, URL): each named once, asked once."""


class EndpointRefused(GroundstreamError):
    """An endpoint whose model is not set and cannot be found: one line naming it."""


def models_at(url: str, api_key: str = "", timeout: float = LIST_TIMEOUT_S) -> list[str]:
    """The model ids `GET {url}/models` lists (OpenAI's shape, ``{"data": [{"id": …}]}``).

    Raises OSError (unreachable, HTTP error) or ValueError (not that shape)."""
    request = urllib.request.Request(f"{url.rstrip('/')}/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        body = json.loads(reply.read(1024 * 1024))
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ValueError("no `data` list in the reply")
    return [str(m["id"]) for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def resolve_model(kind: str, url: str, model: str, api_key: str = "") -> str:
    """`model`, or with a URL and no model the one model the endpoint serves.

    `kind` is judge or sampler (it names the settings). No URL: "" as before (not
    configured). Several models, none, or no answer: `EndpointRefused`."""
    if not url or model:
        return model
    key = (kind, url)
    if key in _FOUND:
        return _FOUND[key]
    setting = f"GROUNDSTREAM_{kind.upper()}_MODEL"
    where = f"GROUNDSTREAM_{kind.upper()}_URL {url}"
    try:
        found = models_at(url, api_key)
    except (OSError, ValueError) as exc:
        reason = str(getattr(exc, "reason", "") or exc) or type(exc).__name__
        raise EndpointRefused(
            f"{where}: {setting} is not set and {url}/models could not be read ({reason})"
        ) from None
    if len(found) != 1:
        listed = f"{len(found)} models ({', '.join(found[:10])})" if found else "no model"
        raise EndpointRefused(f"{where} serves {listed}: set {setting} to the one to use")
    _FOUND[key] = found[0]
    log.warning(
        "%s model %s: the one %s/models serves (%s is not set)", kind, found[0], url, setting
    )
    return found[0]
