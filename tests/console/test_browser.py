"""The block pages and the admin console in a real browser (Debian's chromium, driven by
Selenium), with requests going through a real Squid and its ``urlsieve squid-helper``
children, and ``urlsieve serve`` as its own process (see :mod:`tests.console.gateway`).

Every page is checked with its Content-Security-Policy as served (no inline script or
style): the browser's console log must hold no violation, and the live view's script
must run (rows appear without a reload). Screenshots go to ``docs/screenshots/``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.console.gateway import (
    PASSWORD,
    Gateway,
    browser,
    csp_violations,
    running_gateway,
    serve,
    shoot,
)
from tests.gateway.servers import free_port
from tests.gateway.servers import request as proxy_get

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with running_gateway() as gw:
        yield gw


@pytest.fixture(scope="module")
def driver(gateway: Gateway) -> Iterator[Any]:
    chrome = browser(gateway.squid.rewrite_port)
    chrome.set_page_load_timeout(30)
    try:
        yield chrome
    finally:
        chrome.quit()


def by(driver: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, css)


def all_by(driver: Any, css: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, css))


def wait_until(what: str, condition: Any, seconds: float = 30.0) -> Any:
    """``condition()`` once it is true; while a page is still loading its elements may be
    missing or stale, which counts as "not yet" (the click's page had not replaced the old
    one when this raised NoSuchElementException under load)."""
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
    )

    deadline = time.monotonic() + seconds
    while True:
        try:
            found = condition()
        except (NoSuchElementException, StaleElementReferenceException):
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def helper_answer(gw: Gateway, host: str) -> int:
    """The status Squid answers for ``host`` (302: the helper redirected to the block page)."""
    return proxy_get(gw.squid.rewrite_port, gw.url(host, "/"))[0]


def login(driver: Any, gw: Gateway, password: str = PASSWORD) -> None:
    driver.get(f"{gw.base}/console/login")
    by(driver, "#password").send_keys(password)
    by(driver, "#login").click()


def assert_clean(driver: Any) -> None:
    assert csp_violations(driver) == []


# The tests run in order: each builds on the state the one before left (one browser).


def test_a_block_page_through_squid_says_why_and_takes_a_review(
    gateway: Gateway, driver: Any
) -> None:
    driver.get(gateway.url("evil.test", "/bad?x=1"))  # through Squid: redirected here
    wait_until("the block page", lambda: driver.current_url.startswith(gateway.base + "/block"))
    wait_until("its heading", lambda: by(driver, "h1").text == "This site is blocked")
    assert by(driver, "#category").text == "malware"
    assert "lists/malware/domains:1" in by(driver, "#reason").text
    assert by(driver, "#url").text == gateway.url("evil.test", "/bad?x=1")
    shoot(driver, "block-page")
    assert_clean(driver)
    # A learned block names its evidence; "this is wrong" files a review request.
    driver.get(gateway.url("games.test", "/"))
    wait_until("the block page", lambda: "/block" in driver.current_url)
    wait_until("its category", lambda: by(driver, "#category").text == "games")
    assert "learned" in by(driver, "#reason").text
    assert "cheat codes" in by(driver, "#evidence").text
    by(driver, "#note").send_keys("it is the school's chess club")
    by(driver, "#wrong").click()
    wait_until("the thank-you page", lambda: "Thank you" in by(driver, "h1").text)
    shoot(driver, "block-page-review-sent")
    assert_clean(driver)


def test_a_failed_login_is_refused(gateway: Gateway, driver: Any) -> None:
    login(driver, gateway, "not the password")
    wait_until("the refusal", lambda: by(driver, "#error").text == "Wrong password")
    assert driver.current_url.endswith("/console/login")
    driver.get(f"{gateway.base}/console/")  # still no session: back to the login
    assert driver.current_url.endswith("/console/login")
    shoot(driver, "console-login-failed")


def test_the_live_view_shows_the_helpers_decisions_as_they_happen(
    gateway: Gateway, driver: Any
) -> None:
    login(driver, gateway)
    wait_until("the live view", lambda: driver.current_url.endswith("/console/"))
    assert all_by(driver, "#live")
    driver.get_log("browser")  # start the CSP check afresh
    marker = f"/live-{time.monotonic_ns()}"
    assert proxy_get(gateway.squid.rewrite_port, gateway.url("evil.test", marker))[0] == 302
    assert proxy_get(gateway.squid.rewrite_port, gateway.url("origin.test", marker))[0] == 200

    def rows() -> list[str]:
        return [r.text for r in all_by(driver, "#live tbody tr") if marker in r.text]

    found = wait_until(
        "the helper's decisions in the live view (no reload)", lambda: len(rows()) >= 2 and rows()
    )
    blocked = next(r for r in found if "evil.test" in r)
    assert "block" in blocked and "malware" in blocked and "helper" in blocked
    assert "lists/malware/domains:1" in blocked
    allowed = next(r for r in found if "origin.test" in r)
    assert "unknown" in allowed or "allow" in allowed
    # The filter (a plain GET form) keeps the blocks only.
    driver.get(f"{gateway.base}/console/?action=block")
    shown = [r.text for r in all_by(driver, "#live tbody tr")]
    assert shown and all(" block " in f" {r} " for r in shown)
    assert all_by(driver, "svg rect.requests")  # the charts are drawn
    shoot(driver, "console-live")
    assert_clean(driver)


def test_explain_a_url(gateway: Gateway, driver: Any) -> None:
    driver.get(f"{gateway.base}/console/explain")
    by(driver, "#explain-url").send_keys("HTTP://WWW.Evil.TEST:80/a/../b?utm_source=x")
    by(driver, "#explain-client").send_keys("10.1.2.3")
    by(driver, "#explain").click()
    wait_until("the explanation", lambda: all_by(driver, "#explanation"))
    assert by(driver, "#decision").text == "block"
    assert by(driver, "#category").text == "malware"
    assert "lists/malware/domains:1" in by(driver, "#rule").text
    assert "evil.test" in by(driver, "#canonical").text
    driver.get(f"{gateway.base}/console/explain?url={quote('http://casino.test/')}")
    assert "jackpot" in by(driver, "#learned").text
    shoot(driver, "console-explain")
    assert_clean(driver)


def test_override_a_learned_verdict_and_the_helper_follows(gateway: Gateway, driver: Any) -> None:
    assert helper_answer(gateway, "casino.test") == 302
    driver.get(f"{gateway.base}/console/review")
    shoot(driver, "console-review")
    row = by(driver, '#verdicts tr[data-key="casino.test/"]')
    assert row.find_element("css selector", ".action").text == "block"
    row.find_element("css selector", "button.override").click()
    wait_until("the flash", lambda: all_by(driver, "#flash"))
    assert "now answers allow" in by(driver, "#flash").text
    started = time.monotonic()
    wait_until(
        "the helper to allow the overridden host",
        lambda: helper_answer(gateway, "casino.test") == 200,
        seconds=10,
    )
    assert time.monotonic() - started < 5
    row = by(driver, '#verdicts tr[data-key="casino.test/"]')
    assert row.find_element("css selector", ".source").text == "override"
    assert row.find_element("css selector", ".action").text == "allow"
    shoot(driver, "console-review-overridden")
    assert_clean(driver)


def test_a_review_request_from_the_block_page_allows_in_one_click(
    gateway: Gateway, driver: Any
) -> None:
    assert helper_answer(gateway, "games.test") == 302
    driver.get(f"{gateway.base}/console/review")
    row = wait_until(
        "the review request",
        lambda: [r for r in all_by(driver, "#requests tbody tr") if "games.test" in r.text],
    )[0]
    assert "chess club" in row.text and "games" in row.text
    row.find_element("css selector", "button.allow-request").click()
    wait_until("the flash", lambda: all_by(driver, "#flash"))
    wait_until("the helper to allow it", lambda: helper_answer(gateway, "games.test") == 200)
    assert not [r for r in all_by(driver, "#requests tbody tr") if "games.test" in r.text]
    assert_clean(driver)


def test_the_policy_page(gateway: Gateway, driver: Any) -> None:
    driver.get(f"{gateway.base}/console/policy")
    assert "malware" in by(driver, "#categories").text
    assert by(driver, "#reloads tbody tr")
    shoot(driver, "console-policy")
    assert_clean(driver)


def test_a_forged_post_is_refused(gateway: Gateway, driver: Any) -> None:
    # Same site, the right session, a wrong anti-forgery token: 403, nothing changes.
    driver.get(f"{gateway.base}/console/review")
    row = by(driver, '#verdicts tr[data-key="casino.test/"]')
    for field in row.find_elements("css selector", "form input[name=csrf]"):
        driver.execute_script("arguments[0].value = 'forged'", field)
    row.find_element("css selector", "button.forget").click()
    detail = wait_until("the refusal", lambda: all_by(driver, "#detail"))[0]
    assert "anti-forgery" in detail.text
    shoot(driver, "console-forged-post")
    # Another site's page posting to the console: the SameSite=Strict cookie stays home
    # and Sec-Fetch-Site says cross-site: refused, nothing changes.
    page = (
        f'<form method="post" action="{gateway.base}/console/review">'
        '<input name="do" value="forget"><input name="url" value="http://casino.test/">'
        '<button id="go">go</button></form>'
    )
    driver.get(gateway.url("origin.test", "/forger"))  # another origin, through Squid
    driver.execute_script("document.body.innerHTML = arguments[0]", page)
    by(driver, "#go").click()
    # refused: no session came with it, so the answer is the login page
    wait_until("the refusal", lambda: driver.current_url == f"{gateway.base}/console/login")
    driver.get(f"{gateway.base}/console/review")
    row = by(driver, '#verdicts tr[data-key="casino.test/"]')  # not forgotten
    assert row.find_element("css selector", ".source").text == "override"
    driver.get_log("browser")


def test_an_expired_session_is_refused(gateway: Gateway, driver: Any) -> None:
    """A second service with sessions of 3 seconds: after them, back to the login."""
    port = free_port()
    config = gateway.directory / "short.toml"
    config.write_text(
        gateway.config.read_text("utf-8").replace("session_minutes = 30", "session_minutes = 0.05"),
        "utf-8",
    )
    with serve(config, port, gateway.directory / "short.log"):
        driver.get(f"http://127.0.0.1:{port}/console/login")
        by(driver, "#password").send_keys(PASSWORD)
        by(driver, "#login").click()
        wait_until("the live view", lambda: driver.current_url.endswith("/console/"))
        time.sleep(3.5)
        driver.get(f"http://127.0.0.1:{port}/console/review")
        assert driver.current_url.endswith("/console/login")
        shoot(driver, "console-session-expired")
