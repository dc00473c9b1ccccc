"""The crash page's frames in chromium at 800 and 1400 px: long C++, Java and
Rust names and deep paths wrap between their parts (after ``::``, ``/``,
``.``, before ``(``, ``<``, ``+``), never inside an identifier — the page
broke ``SlotGuard::~SlotGua`` / ``rd()`` at 800 px (``overflow-wrap:
anywhere``). Where each line of a frame cell ends is measured in the page
(a Range per character). The store is this file's own: one crash, a real
core's report with its crashing thread's frames renamed.

The browser, the server and the login come from :mod:`test_ui_browser`
(skipped with it when chromium is missing)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fleetfactory import CoreSet, coreset  # noqa: F401
from test_ui_browser import Serving, browser, log_in, shoot, shots  # noqa: F401
from selenium import webdriver
from selenium.webdriver.common.by import By

from coreepi.ingest.artifacts import inspect_file
from coreepi.model.report import Frame, FrameTrust
from coreepi.serve import create_token
from coreepi.store import CoreStatus, CrashRecord, open_store

# (function, module, file): names as they come out of real C++, JVM and Rust stacks
LONG_FRAMES = (
    ("std::_Function_handler<void (folly::exception_wrapper&&), folly::futures::detail::"
     "Core<std::unique_ptr<apache::thrift::ResponseChannelRequest, folly::DelayedDestruction::"
     "Destructor> >::setCallback_<folly::Future<folly::Unit>::thenValue<apache::thrift::"
     "ThriftServer::handleRequest(std::unique_ptr<apache::thrift::ResponseChannelRequest>&&)"
     "::{lambda()#1}> >::{lambda(folly::Executor::KeepAlive<folly::Executor>&&, "
     "folly::Try<folly::Unit>&&)#1}>::_M_invoke",
     "/opt/services/thrift-gateway/lib/libthriftcpp2-2024.05.13.00.so",
     "/build/fbthrift/thrift/lib/cpp2/server/ThriftServerRequestDispatcher.cpp"),
    ("java.util.concurrent.ThreadPoolExecutor.runWorker(Ljava/util/concurrent/"
     "ThreadPoolExecutor$Worker;)V",
     "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so",
     "/build/openjdk-17/src/hotspot/share/runtime/javaCalls.cpp"),
    ("tokio::runtime::scheduler::multi_thread::worker::Context::run_task::{{closure}}",
     "/srv/ingest-router/target/release/ingest-router",
     "/root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/tokio-1.37.0/src/runtime/"
     "scheduler/multi_thread/worker.rs"),
    ("__GI___pthread_mutex_lock_full", "/usr/lib/x86_64-linux-gnu/libc.so.6",
     "./nptl/pthread_mutex_lock.c"),
)

# where a line may end: after a space or a separator, or before an argument list,
# a template's arguments or an offset (serve/routes/pages.py _NAME_BREAKS)
AFTER, BEFORE = set(" :/.,"), set(" (<+")

LINE_ENDS = """
// each cell's characters in order with their line's top; a line end between two
// characters of one block (the build-id is a block of its own under the module path)
const out = [];
for (const el of arguments[0]) {
  const chars = [];
  const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    let block = n.parentElement;
    while (block !== el && getComputedStyle(block).display !== "block") block = block.parentElement;
    for (let i = 0; i < n.data.length; i++) {
      const r = document.createRange();
      r.setStart(n, i);
      r.setEnd(n, i + 1);
      const box = r.getClientRects()[0];
      if (box) chars.push([n.data[i], box.top, box.height, block]);
    }
  }
  for (let i = 1; i < chars.length; i++) {
    const [a, b] = [chars[i - 1], chars[i]];
    if (a[3] === b[3] && b[1] > a[1] + a[2] / 2) out.push([a[0], b[0], el.textContent]);
  }
}
return out;
"""


@pytest.fixture(scope="module")
def long_names(tmp_path_factory: pytest.TempPathFactory,
               coreset: CoreSet) -> tuple[Path, str, str]:  # noqa: F811
    """A store holding one crash whose crashing thread has :data:`LONG_FRAMES`:
    (data dir, crash id, a read token)."""
    data = tmp_path_factory.mktemp("frames") / "data"
    report = inspect_file(coreset.cores[0], exe=coreset.binary)[0]
    thread = next(t for t in report.threads if t.crashed)
    thread.frames = [
        Frame(index=i, pc=0x7F5BE5C4524A + 0x40 * i, function=fn, function_offset=0x1A + i,
              module=mod, module_offset=0x2724A + i, build_id="93ac61ec5a8eb1396f9fbd350e3169a558528a40",
              file=src, line=120 + i, trust=FrameTrust.CFI)
        for i, (fn, mod, src) in enumerate(LONG_FRAMES)]
    with open_store(data) as store:
        store.add_crashes([CrashRecord(report, {}, CoreStatus.NOT_STORED)])
        token = create_token(store, ["read"], "frames-read")[1]
    return data, report.crash_id, token


@pytest.fixture(scope="module")
def frames_server(long_names: tuple[Path, str, str]) -> Iterator[Serving]:
    s = Serving(long_names[0], long_names[0].parent / "serve.log")
    yield s
    s.stop()


def test_frame_names_wrap_between_their_parts(browser: webdriver.Chrome,  # noqa: F811
                                              frames_server: Serving,
                                              long_names: tuple[Path, str, str],
                                              shots: Path) -> None:  # noqa: F811
    d = browser
    _, crash_id, token = long_names
    log_in(d, frames_server, token, "/")
    for width in (1400, 800):
        d.set_window_size(width, 1000)
        d.get(f"{frames_server.url}/crashes/{crash_id}")
        page = d.execute_script("const e = document.documentElement; "
                                "return [e.scrollWidth, e.clientWidth];")
        assert page[0] <= page[1], (width, page)  # the page never scrolls sideways
        frames = d.find_element(By.CSS_SELECTOR, "#threads table.frames")
        # the function (source line) and module (build-id) cells
        names = frames.find_elements(By.CSS_SELECTOR, "tbody td:nth-child(3), "
                                     "tbody td:nth-child(4)")
        assert len(names) == 2 * len(LONG_FRAMES)
        ends = d.execute_script(LINE_ENDS, names)
        cut = [(a, b, text[:60]) for a, b, text in ends if a not in AFTER and b not in BEFORE]
        assert cut == [], (width, cut)
        if width == 800:  # they did wrap: the check above judged real line ends
            assert len(ends) >= 10, ends
        # ... and still fit: every column on screen, nothing to scroll in the table's box
        # (the box would scroll, not the page, for a part wider than the window)
        box = d.execute_script("const b = arguments[0].parentElement; return [b.scrollWidth, "
                               "b.clientWidth, arguments[0].getBoundingClientRect().right, "
                               "getComputedStyle(b).overflowX];", frames)
        assert box[0] <= box[1] and box[2] <= page[1] and box[3] == "auto", (width, box)
    shoot(d, shots, "crash-long-names")
