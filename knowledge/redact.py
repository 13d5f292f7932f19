"""Keep database passwords out of error messages.

libpq repeats a connection string it cannot parse in its error message, password
included, and such messages travel far: into tool results (so to the model, the
tool history and the checkpoint), logs and CLI output. Every place that turns a
connection error into text goes through `redact`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"

# `scheme://user:password@` and the scheme-less `user:password@host` form (a password
# may hold `@`: libpq splits at the last one)
_USERINFO = re.compile(
    r"(?P<head>(?:[A-Za-z][A-Za-z0-9+.-]*://)?[^\s:/@'\"]*):(?P<secret>[^\s'\"]*)@"
)
# `password=value` in a keyword string or a URL query, quoted or not
_KEYWORD = re.compile(
    r"(?P<head>\bpassword\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'?|[^\s&'\"]*)", re.IGNORECASE
)


def secrets_in(conninfo: str) -> list[str]:
    """Return the passwords written in a connection string (URL, scheme-less or keyword form).

    Both the text as written and its percent-decoded form are returned, since
    libpq may echo either.
    """
    found: set[str] = set()
    for pattern in (_USERINFO, _KEYWORD):
        for match in pattern.finditer(conninfo):
            secret = match["secret"].strip("'")
            found.update(s for s in (secret, unquote(secret)) if s)
    return sorted(found, key=len, reverse=True)  # longest first: no half-masked password


def redact(text: str, *conninfos: str | None) -> str:
    """Return `text` with every password masked.

    Masks the userinfo password of any URL and any `password=` value in `text`,
    then every occurrence of a password written in `conninfos` (the connection
    strings the error may have come from), wherever libpq quoted it.
    """
    masked = _USERINFO.sub(lambda m: f"{m['head']}:{MASK}@" if m["secret"] else m[0], text)
    masked = _KEYWORD.sub(lambda m: f"{m['head']}{MASK}" if m["secret"] else m[0], masked)
    for conninfo in conninfos:
        for secret in secrets_in(conninfo or ""):
            # only whole tokens: a short password must not mask letters inside words
            masked = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", MASK, masked)
    return masked


def describe(exc: BaseException, *conninfos: str | None) -> str:
    """Return an exception's message on one line, with passwords masked."""
    return " ".join(redact(str(exc), *conninfos).split()) or type(exc).__name__
