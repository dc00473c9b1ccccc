"""`coreepi report --format html` in headless chromium (#20): identifiers
(signatures, phenotypes, host ids) wrap at their spaces only, never inside a
word, at 1400 and 800 px; the page itself never scrolls sideways."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from coreepi.model.fleet import ExposureInterval, HostRow
from coreepi.model.report import AnalysisInfo, CrashReport, Signature, Source
from coreepi.reporting import build_findings
from coreepi.reporting.html import html_report
from coreepi.store import CoreStatus, CrashRecord, DuckDBStore

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    if os.geteuid() == 0:
        raise RuntimeError("chromium and chromium-driver are missing: run ./scripts/setup.sh")
    pytest.skip("chromium / chromium-driver not installed (apt-get install chromium "
                "chromium-driver)", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

SPREAD = "return-to-null | SlotGuard::~SlotGuard | Tokenizer::tokenize | Index::update | main"
ONE_HOST = "stack-misaligned | kvstore"

# every line break inside a code element or a curve title that is not at a space
MID_WORD = r"""
const bad = [];
for (const el of document.querySelectorAll('code, h3')) {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  let top = null, prev = ' ', node;
  while ((node = walker.nextNode())) {
    const s = node.textContent;
    for (let i = 0; i < s.length; i++) {
      const r = document.createRange(); r.setStart(node, i); r.setEnd(node, i + 1);
      const rects = r.getClientRects(); if (!rects.length) continue;
      const t = Math.round(rects[0].top), before = i ? s[i - 1] : prev;
      if (top !== null && t > top + 2 && s[i] !== ' ' && before !== ' ')
        bad.push(s.slice(Math.max(0, i - 10), i) + ' / ' + s.slice(i, i + 10));
      top = t;
    }
    if (s.length) prev = s[s.length - 1];
  }
}
return [bad, document.documentElement.scrollWidth, window.innerWidth];
"""


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML report of a store where one long signature is spread over 30
    hosts and another sits on host h-086 alone (a hardware-suspect host)."""
    tmp = tmp_path_factory.mktemp("html")
    t0 = datetime(2024, 5, 1, tzinfo=UTC)
    hosts = [f"h-{i:03d}" for i in range(60, 100)]
    with DuckDBStore(tmp / "data") as store:
        store.add_hosts(HostRow(h, {}, i + 2) for i, h in enumerate(hosts))
        store.add_exposure(ExposureInterval(h, t0, t0 + timedelta(days=30), {}, 2)
                           for h in hosts)
        crashes = [(hosts[i % 30], SPREAD, i) for i in range(40)]
        crashes += [("h-086", ONE_HOST, 40 + i) for i in range(20)]
        store.add_crashes([CrashRecord(CrashReport(
            crash_id=f"c{n}", host_id=host, captured_at=t0 + timedelta(hours=n * 7),
            source=Source.ELF_CORE, signature=Signature(signature=sig),
            analysis=AnalysisInfo(analyzer_version="test")), {}, CoreStatus.NOT_STORED)
            for host, sig, n in crashes])
        html = html_report(build_findings(store))
    assert ONE_HOST in html and "h-086" in html
    (tmp / "report.html").write_text(html)
    return tmp / "report.html"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM  # type: ignore[assignment]
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--no-first-run", "--disable-background-networking"):
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('profile')}")
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.parametrize("width", [1400, 800])
def test_identifiers_are_never_split_mid_word(page: Path, browser: webdriver.Chrome,
                                             width: int) -> None:
    browser.set_window_size(width, 1000)
    browser.get(page.as_uri())
    bad, scroll_width, inner = browser.execute_script(MID_WORD)
    assert bad == []
    assert scroll_width <= inner
