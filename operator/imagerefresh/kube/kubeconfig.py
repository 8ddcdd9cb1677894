"""A :class:`~imagerefresh.kube.login.Login` from a kubeconfig, read as kubectl reads it.

Several files (``$KUBECONFIG``'s ``os.pathsep``-separated list) merge as kubectl merges them:
the first file to name a cluster, user or context wins it, the first to set
``current-context`` wins that, missing files are skipped, and a relative path is relative to
the file that holds it. The kubeconfig is never written back.

What the operator and kopf's watch cannot honour is refused, naming the field, rather than
half-applied: an ``auth-provider`` (deprecated in kubectl for exec plugins), impersonation
(``as``), ``tls-server-name`` and ``proxy-url``. An exec plugin (``client.authentication.k8s.io``
``v1`` or ``v1beta1``) is run without a terminal, and again when the token it printed expires.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
import yaml

from imagerefresh.kube.errors import UnusableConfig
from imagerefresh.kube.login import TOKEN_REREAD_SECONDS, Login, read_token

__all__ = ["DEFAULT_KUBECONFIG", "EXEC_TIMEOUT_SECONDS", "from_kubeconfig"]

DEFAULT_KUBECONFIG = "~/.kube/config"
EXEC_TIMEOUT_SECONDS = 60.0
_EXEC_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
_UNSUPPORTED = {
    "cluster": {
        "tls-server-name": "use a server address its certificate names",
        "proxy-url": "reach the API server without a proxy",
    },
    "user": {
        "auth-provider": "use an exec credential plugin instead, as kubectl advises",
        "as": "use the impersonated account's own credentials",
        "as-groups": "use the impersonated account's own credentials",
        "as-uid": "use the impersonated account's own credentials",
        "as-user-extra": "use the impersonated account's own credentials",
    },
}


@dataclass(frozen=True)
class _Entry:
    """One named cluster, user or context, and the directory of the file that named it."""

    fields: dict[str, Any]
    home: Path


def from_kubeconfig(paths: str | None = None, context: str | None = None) -> Login:
    """The login of ``context`` (the current one when None) in the kubeconfig ``paths`` (else
    ``$KUBECONFIG``, else ~/.kube/config)."""
    files = [
        Path(part).expanduser()
        for part in (paths or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG).split(os.pathsep)
        if part
    ]
    sections: dict[str, dict[str, _Entry]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    found = False
    for file in files:
        document = _read(file)
        if document is None:
            continue
        found = True
        for section, named in sections.items():
            for entry in _list(document, section, file):
                named.setdefault(entry["name"], _Entry(_body(entry, section, file), file.parent))
        current = current or _text(document.get("current-context"), "current-context", file)
    if not found:
        raise UnusableConfig(f"no kubeconfig at {os.pathsep.join(map(str, files))}")
    name = context or current
    if not name:
        raise UnusableConfig("the kubeconfig sets no current-context; name a context")
    chosen = sections["contexts"].get(name)
    if chosen is None:
        raise UnusableConfig(f"the kubeconfig has no context {name!r}")
    cluster = _named(sections["clusters"], chosen.fields.get("cluster"), "cluster", name)
    user_name = chosen.fields.get("user")
    user = _named(sections["users"], user_name, "user", name) if user_name else _Entry({}, Path())
    namespace = _text(chosen.fields.get("namespace"), "namespace", name)
    return _login(cluster, user, namespace)


def _login(cluster: _Entry, user: _Entry, namespace: str | None) -> Login:
    for part, entry in (("cluster", cluster), ("user", user)):
        for field, advice in _UNSUPPORTED[part].items():
            if entry.fields.get(field):
                raise UnusableConfig(
                    f"the kubeconfig's {part} sets {field}, which is not supported; {advice}"
                )
    server = _text(cluster.fields.get("server"), "server", "cluster")
    if not server:
        raise UnusableConfig("the kubeconfig's cluster names no server")
    c, u = cluster.fields, user.fields
    base = kopf.ConnectionInfo(
        server=server,
        ca_data=_pem(c, "certificate-authority", cluster.home),
        insecure=bool(c.get("insecure-skip-tls-verify")) or None,
        certificate_data=_pem(u, "client-certificate", user.home),
        private_key_data=_pem(u, "client-key", user.home),
        username=_text(u.get("username"), "username", "user"),
        password=_text(u.get("password"), "password", "user"),
        token=_text(u.get("token"), "token", "user"),
        default_namespace=namespace,
    )
    if base.token is None and u.get("tokenFile"):
        token_file = user.home / str(u["tokenFile"])
        return Login(
            base, lambda: (read_token(token_file), None), reread_seconds=TOKEN_REREAD_SECONDS
        )
    if base.token is None and u.get("exec"):
        plugin = ExecPlugin.of(u["exec"], user.home)
        return Login(base, plugin.run)
    return Login(base)


@dataclass(frozen=True)
class ExecPlugin:
    """A kubeconfig's ``exec`` credential plugin, run without a terminal."""

    api_version: str
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, spec: Any, home: Path) -> ExecPlugin:
        if not isinstance(spec, dict) or not isinstance(spec.get("command"), str):
            raise UnusableConfig("the kubeconfig's exec plugin names no command")
        version = spec.get("apiVersion")
        if version not in _EXEC_VERSIONS:
            raise UnusableConfig(
                f"the kubeconfig's exec plugin speaks {version!r}; supported: "
                + ", ".join(_EXEC_VERSIONS)
            )
        if spec.get("interactiveMode") == "Always":
            raise UnusableConfig(
                "the kubeconfig's exec plugin needs a terminal (interactiveMode: Always); "
                "use one that prints a token unattended"
            )
        command = spec["command"]
        if os.sep in command and not os.path.isabs(command):
            command = str(home / command)  # relative to the kubeconfig, as kubectl runs it
        env = tuple((str(e.get("name")), str(e.get("value"))) for e in spec.get("env") or ())
        return cls(version, command, tuple(map(str, spec.get("args") or ())), env)

    def run(self) -> tuple[str, datetime.datetime | None]:
        """The token the plugin prints now, and when it expires."""
        info = {
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        env = {**os.environ, **dict(self.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
        try:
            done = subprocess.run(
                [self.command, *self.args],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=EXEC_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise UnusableConfig(
                f"the exec plugin {self.command} could not run: {error}"
            ) from error
        if done.returncode != 0:
            said = done.stderr.decode(errors="replace").strip()[-300:]
            raise UnusableConfig(
                f"the exec plugin {self.command} failed (exit {done.returncode}): {said}"
            )
        return _exec_token(done.stdout, self.command)


def _exec_token(output: bytes, command: str) -> tuple[str, datetime.datetime | None]:
    try:
        status = json.loads(output)["status"]
        token = status.get("token")
        stamp = status.get("expirationTimestamp")
        expiration = datetime.datetime.fromisoformat(stamp) if stamp else None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise UnusableConfig(
            f"the exec plugin {command} printed no ExecCredential status: {error}"
        ) from error
    if not isinstance(token, str) or not token:
        raise UnusableConfig(
            f"the exec plugin {command} printed no token (a client certificate is not "
            "supported); configure it to print a token"
        )
    if expiration is not None and expiration.tzinfo is None:
        expiration = expiration.replace(tzinfo=datetime.UTC)
    return token, expiration


def _read(file: Path) -> dict[str, Any] | None:
    try:
        text = file.read_text()
    except FileNotFoundError:
        return None  # as kubectl, a missing file in the list is skipped
    except OSError as error:
        raise UnusableConfig(f"the kubeconfig {file} is unreadable: {error}") from error
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise UnusableConfig(f"the kubeconfig {file} is not YAML: {error}") from error
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise UnusableConfig(f"the kubeconfig {file} is not a mapping")
    return document


def _list(document: dict[str, Any], section: str, file: Path) -> list[dict[str, Any]]:
    entries = document.get(section) or []
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) for e in entries
    ):
        raise UnusableConfig(f"the kubeconfig {file}: {section} is not a list of named entries")
    return entries


def _body(entry: dict[str, Any], section: str, file: Path) -> dict[str, Any]:
    body = entry.get(section[:-1]) or {}
    if not isinstance(body, dict):
        raise UnusableConfig(
            f"the kubeconfig {file}: {section[:-1]} {entry['name']!r} is not a mapping"
        )
    return body


def _named(named: dict[str, _Entry], name: Any, what: str, context: str) -> _Entry:
    entry = named.get(name) if isinstance(name, str) else None
    if entry is None:
        raise UnusableConfig(
            f"the kubeconfig's context {context!r} names the {what} {name!r}, "
            "which it does not define"
        )
    return entry


def _text(value: Any, field: str, where: object) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise UnusableConfig(f"the kubeconfig's {field} (in {where}) is not a string")
    return value


def _pem(fields: dict[str, Any], field: str, home: Path) -> bytes | None:
    """The PEM of ``field-data`` (base64) or of the file ``field`` names, else None."""
    data = fields.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError) as error:
            raise UnusableConfig(f"the kubeconfig's {field}-data is not base64") from error
    path = fields.get(field)
    if not path:
        return None
    try:
        return (home / Path(str(path)).expanduser()).read_bytes()
    except OSError as error:
        raise UnusableConfig(f"the kubeconfig's {field} {path} is unreadable: {error}") from error
