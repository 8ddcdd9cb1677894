"""The pod's ServiceAccount as a login, and a token asked for again as it rotates or expires.

The ServiceAccount's files are laid out here as the kubelet projects them; the image test
(tests/chart/test_image.py) and the real node's pods run the same code against a real API
server with a real projected token.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import kopf
import pytest

from imagerefresh.kube.errors import UnusableConfig
from imagerefresh.kube.login import TOKEN_REREAD_SECONDS, Login, in_cluster, read_token

CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@pytest.fixture
def account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_bytes(CA)
    (tmp_path / "namespace").write_text("ops")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    return tmp_path


def test_the_pods_service_account_names_the_server_ca_namespace_and_token(account: Path) -> None:
    login = in_cluster(account)
    info = login.info()
    assert login.server == "https://10.0.0.1:443"
    assert (info.ca_data, info.default_namespace) == (CA, "ops")
    assert login.headers() == {"Authorization": "Bearer first"}


def test_an_ipv6_service_address_is_bracketed(
    account: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    assert in_cluster(account).server == "https://[fd00::1]:443"


def test_outside_a_pod_there_is_no_service_account(
    account: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(UnusableConfig, match="not in a pod"):
        in_cluster(account)


@pytest.mark.parametrize("missing", ["token", "ca.crt"])
def test_a_service_account_without_its_token_or_ca_is_refused_at_once(
    account: Path, missing: str
) -> None:
    (account / missing).unlink()
    with pytest.raises(UnusableConfig, match="unreadable"):
        in_cluster(account)


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("\n")
    with pytest.raises(UnusableConfig, match="empty"):
        read_token(tmp_path / "token")


def rotating(token_file: Path, now: list[float]) -> Login:
    return Login(
        kopf.ConnectionInfo(server="https://api"),
        lambda: (read_token(token_file), None),
        reread_seconds=TOKEN_REREAD_SECONDS,
        clock=lambda: now[0],
    )


def test_a_rotated_token_is_sent_from_a_minute_after_the_last_read(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first")
    now = [0.0]
    login = rotating(token_file, now)
    assert login.headers() == {"Authorization": "Bearer first"}
    token_file.write_text("second")
    now[0] = TOKEN_REREAD_SECONDS - 0.5
    assert login.headers() == {"Authorization": "Bearer first"}
    now[0] = TOKEN_REREAD_SECONDS
    assert login.headers() == {"Authorization": "Bearer second"}


def test_a_token_file_unreadable_mid_rotation_keeps_the_last_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first")
    now = [0.0]
    login = rotating(token_file, now)
    login.info()
    token_file.unlink()  # the kubelet swaps the projected volume's symlink
    now[0] = TOKEN_REREAD_SECONDS
    assert login.headers() == {"Authorization": "Bearer first"}
    token_file.write_text("second")  # and asks again on the next request, not a minute later
    assert login.headers() == {"Authorization": "Bearer second"}


def test_an_expired_token_is_not_kept_when_its_source_fails() -> None:
    calls: list[int] = []
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)

    def source() -> tuple[str, datetime.datetime | None]:
        calls.append(1)
        if len(calls) > 1:
            raise UnusableConfig("the plugin failed")
        return "old", past

    login = Login(kopf.ConnectionInfo(server="https://api"), source)
    assert login.headers() == {"Authorization": "Bearer old"}
    with pytest.raises(UnusableConfig, match="the plugin failed"):
        login.info()


def test_a_login_without_a_token_source_is_what_was_loaded() -> None:
    base = kopf.ConnectionInfo(server="https://api/", token="fixed")
    login = Login(base)
    assert login.info() is base
    assert login.server == "https://api"
