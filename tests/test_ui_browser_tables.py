"""The fleet tables in chromium at 800 px (breaker5 #4): the overview's
hardware-suspect hosts table was 973 px wide in a 753 px box, its evidence
column ~40 px (one clipped word per line), and a trigger value broke inside
itself ("kernel=6.1.0-" / "13-amd64"); /groups, /hosts and the group page
overflowed their boxes too. On each page: no table wider than its box
unless it scrolls in a box of its own, every evidence line and trigger
value wraps only at a space (where lines end is measured per character,
:data:`test_ui_browser_frames.LINE_ENDS`), and an evidence column at least
16em wide.

The browser, the server and the store come from :mod:`test_ui_browser`
(skipped with it when chromium is missing)."""

from __future__ import annotations

from pathlib import Path

from fleetfactory import coreset  # noqa: F401
from test_ui_browser import Serving, browser, log_in, server, shots, ui  # noqa: F401
from test_ui_browser_frames import LINE_ENDS
from selenium import webdriver
from selenium.webdriver.common.by import By
from uikit import ENV_GROUP, UiStore

from coreepi.serve.findings import group_id

# for each table of the page: [its width, its box's width, the nearest scroll
# container (the table or an ancestor with overflow-x auto / scroll) or null]
TABLE_FITS = """
const out = [];
for (const t of document.querySelectorAll("#main table")) {
  let s = t;
  while (s && !["auto", "scroll"].includes(getComputedStyle(s).overflowX)) s = s.parentElement;
  const box = t.parentElement;
  out.push([t.getBoundingClientRect().width, box.clientWidth, s ? s.tagName + "." + s.className : null,
            t.querySelector("th") ? t.querySelector("th").textContent : ""]);
}
return out;
"""


def test_tables_read_at_800_px(browser: webdriver.Chrome, server: Serving,  # noqa: F811
                               ui: UiStore, shots: Path) -> None:  # noqa: F811
    d = browser
    log_in(d, server, ui.read_token, "/")
    d.set_window_size(800, 1000)
    try:
        for path in ("/", "/groups", "/hosts", f"/groups/{group_id('signature', ENV_GROUP)}"):
            d.get(server.url + path)
            page = d.execute_script("const e = document.documentElement; "
                                    "return [e.scrollWidth, e.clientWidth];")
            assert page[0] <= page[1], (path, page)  # the page never scrolls sideways
            for width, box, scroller, head in d.execute_script(TABLE_FITS):
                assert width <= box + 0.5 or scroller is not None, (path, head, width, box)
            cells = d.find_elements(By.CSS_SELECTOR, "ul.evidence li, a[href^='/groups?attr'] code")
            ends = d.execute_script(LINE_ENDS, cells)
            cut = [(a, b, text[:60]) for a, b, text in ends if " " not in (a, b)]
            assert cut == [], (path, cut)
            for code in d.find_elements(By.CSS_SELECTOR, "a[href^='/groups?attr'] code"):
                assert d.execute_script("return arguments[0].getClientRects().length;",
                                        code) == 1, (path, code.text)
            for ul in d.find_elements(By.CSS_SELECTOR, "ul.evidence"):
                em = d.execute_script("const s = getComputedStyle(arguments[0]); return "
                                      "arguments[0].getBoundingClientRect().width / "
                                      "parseFloat(s.fontSize);", ul)
                assert em >= 16, (path, em)
        d.save_screenshot(str(shots / "ui-tables-800.png"))
    finally:
        d.set_window_size(1400, 1000)
