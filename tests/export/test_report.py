"""The HTML report: aggregation (every Python version) and the page in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from typing import Any

import pytest

import framescope
from framescope.export import _report as report



def leaf() -> int:
    return 1


def mid() -> int:
    return leaf() + leaf()


def top() -> int:
    return mid() + leaf()


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def node_paths(tree: report.ThreadTree, names: list[str]) -> dict[tuple[str, ...], int]:
    """calls per call path (names from the thread root down)."""
    out = {}
    for n in range(1, len(tree.name)):
        path = []
        p = n
        while p > 0:
            path.append(names[tree.name[p]].rsplit(": ", 1)[-1].rsplit(".", 1)[-1])
            p = tree.parent[p]
        out[tuple(reversed(path))] = tree.calls[n]
    return out


def profile_program() -> framescope.profile:
    with framescope.profile() as prof:
        top()
        top()
        with framescope.record_function("block"):
            mid()
    return prof


def test_paths_are_aggregated_with_calls_and_self_time() -> None:
    prof = profile_program()
    data = report.from_trace(prof.trace, "t")
    (main,) = [t for t in data.threads if "MainThread" in t.label]
    paths = {p[-3:]: c for p, c in node_paths(main, data.names.names).items()}
    test_fn = "profile_program"
    assert paths[(test_fn, "top", "mid")] == 2
    assert paths[("top", "mid", "leaf")] == 4
    assert paths[(test_fn, "top", "leaf")] == 2
    assert paths[(test_fn, "block", "mid")] == 1
    payload = report._payload(data, report.DEFAULT_MAX_NODES, 100)
    (t,) = [t for t in payload["threads"] if "MainThread" in t["label"]]
    for i in range(1, len(t["name"])):
        kids = [j for j in range(len(t["name"])) if t["parent"][j] == i]
        assert t["self"][i] == t["total"][i] - sum(t["total"][j] for j in kids)
        assert t["self"][i] >= 0
    assert t["total"][0] == sum(t["total"][j] for j in range(1, len(t["name"]))
                                if t["parent"][j] == 0)
    rows = {r[0].rsplit(": ", 1)[-1]: r for r in payload["table"]}
    assert rows["leaf"][2] == 8 and rows["mid"][2] == 3 and rows["block"][1] == "user_annotation"


def test_a_range_open_across_a_return_goes_under_the_caller(tmp_path: Any) -> None:
    # as torch.profiler.record_function does: the range opens inside one function (__enter__)
    # and closes inside another (__exit__)
    r = framescope.record_function("crossing")

    def begin() -> None:
        r.__enter__()

    def end() -> None:
        r.__exit__(None, None, None)

    def caller() -> None:  # as a with-block: enter, the body, exit
        begin()
        mid()
        end()

    with framescope.profile() as prof:
        caller()
    prof.export_chrome_trace(tmp_path / "t.json")
    for data in (report.from_trace(prof.trace, "t"), report.load(tmp_path / "t.json")):
        (main,) = [t for t in data.threads if "MainThread" in t.label]
        paths = {p[-3:]: c for p, c in node_paths(main, data.names.names).items()}
        assert paths[("caller", "crossing", "mid")] == 1, paths
        assert ("caller", "begin", "crossing") not in paths
        for n in range(1, len(main.name)):  # no slice is wider than its parent
            assert main.total[n] <= main.total[main.parent[n]] or main.parent[n] == 0


def test_chrome_json_gives_the_same_tree_as_the_trace(tmp_path: Any) -> None:
    # differential: the report read back from framescope's Chrome export equals the one built
    # from the trace itself (paths, calls; times to the microsecond rounding of the JSON)
    prof = profile_program()
    path = tmp_path / "t.json"
    prof.export_chrome_trace(path)
    a = report.from_trace(prof.trace, "t")
    b = report.load(path)
    pa = {t.label: node_paths(t, a.names.names) for t in a.threads}
    pb = {t.label: node_paths(t, b.names.names) for t in b.threads}
    assert pa == pb
    ta = {t.label: t.total[0] for t in a.threads}
    tb = {t.label: t.total[0] for t in b.threads}
    assert all(abs(ta[k] - tb[k]) <= 2000 for k in ta)


def test_serialized_trace_and_gzip_load(tmp_path: Any) -> None:
    import gzip

    prof = profile_program()
    raw = tmp_path / "t.fstrace"
    prof.save(raw)
    gz = tmp_path / "t.json.gz"
    prof.export_chrome_trace(tmp_path / "t.json")
    gz.write_bytes(gzip.compress((tmp_path / "t.json").read_bytes()))
    for p in (raw, gz):
        data = report.load(p)
        assert any("leaf" in n for n in data.names.names)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a trace")
    with pytest.raises(ValueError, match="neither a Chrome JSON trace nor a saved"):
        report.load(bad)
    empty = tmp_path / "empty.json"
    empty.write_text('{"traceEvents": []}')
    with pytest.raises(ValueError, match="no complete"):
        report.load(empty)


def test_size_is_bounded_by_max_nodes(tmp_path: Any) -> None:
    with framescope.profile() as prof:
        fib(18)  # one call path per depth: ~18 paths, but 8,361 calls
        for i in range(300):  # 300 distinct paths
            exec(compile(f"def f{i}():\n    return {i}\nf{i}()", f"gen{i}.py", "exec"), {})
    data = report.from_trace(prof.trace, "big")
    total_paths = sum(len(t.name) - 1 for t in data.threads)
    assert total_paths > 300
    small = report._payload(data, 50, 100)
    kept = sum(len(t["name"]) - 1 for t in small["threads"])
    assert kept <= 50 + 10  # the budget, plus ancestors of kept paths
    assert any("folded" in n for n in small["notes"])
    for t in small["threads"]:  # still a tree: every parent kept, in preorder
        assert all(0 <= p < i for i, p in enumerate(t["parent"]) if i > 0)
    # the page of a big trace stays small
    page = report.render(data, max_nodes=50)
    assert len(page) < len(report.render(data)) and len(page) < 200_000


def test_page_is_self_contained_and_escapes_names() -> None:
    with framescope.profile() as prof:
        with framescope.record_function("</script><img src=x onerror=alert(1)>"):
            pass
    page = report.render(report.from_trace(prof.trace, "a <b> title"))
    assert "</script><img" not in page
    assert "<title>a &lt;b&gt; title</title>" in page
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", page)
    assert "http://" not in page and "https://" not in page


def test_cli_report(tmp_path: Any) -> None:
    script = tmp_path / "prog.py"
    script.write_text("def work():\n    return sum(range(1000))\nwork()\n")
    trace = tmp_path / "prog.json"
    env = dict(os.environ, PYTHONPATH="")
    subprocess.run([sys.executable, "-m", "framescope", "run", "-o", str(trace), str(script)],
                   check=True, capture_output=True, cwd=tmp_path, env=env)
    out = subprocess.run([sys.executable, "-m", "framescope", "report", str(trace)],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "prog.html").read_text()
    payload = json.loads(re.search(r'id="report-data" type="application/json">(.*?)</script>',
                                   page, re.S).group(1))
    assert any(n.endswith(": work") for n in payload["names"])
    bad = subprocess.run([sys.executable, "-m", "framescope", "report", str(script)],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert bad.returncode == 1 and "framescope report:" in bad.stderr


def test_export_html_and_the_export_dispatch(tmp_path: Any) -> None:
    prof = profile_program()
    prof.export_html(tmp_path / "x.html")
    prof.export(tmp_path / "y.html")
    for name in ("x.html", "y.html"):
        assert "report-data" in (tmp_path / name).read_text()
    # a saved trace converts to a report too
    prof.save(tmp_path / "t.fstrace")
    subprocess.run([sys.executable, "-m", "framescope", "convert", str(tmp_path / "t.fstrace"),
                    str(tmp_path / "z.html")], check=True, capture_output=True)
    assert "report-data" in (tmp_path / "z.html").read_text()
    with pytest.raises(ValueError, match="not compressed"):
        prof.export(tmp_path / "w.html.gz")


# ---- the page in a real browser (one Python version: the CI's Chromium run) -----------------

from tests.support.chromium_cdp import Browser, find_chromium  # noqa: E402

BROWSER_VERSION = (3, 11)
# In CI (scripts/test_all.sh installs Debian's chromium) a missing browser fails the tests.
needs_browser = pytest.mark.skipif(
    sys.version_info[:2] != BROWSER_VERSION or (find_chromium() is None and not os.environ.get("CI")),
    reason=f"browser tests run on Python {BROWSER_VERSION[0]}.{BROWSER_VERSION[1]} with Chromium",
)


def frames(b: Browser, thread: int = 0) -> list[dict[str, Any]]:
    return b.eval(
        f"""Array.from(document.querySelectorAll('.icicle')[{thread}].querySelectorAll('.frame'))
        .map(e => {{ const r = e.getBoundingClientRect();
          return {{text: e.textContent, cls: e.className, x: r.x, y: r.y, w: r.width,
                   h: r.height}}; }})"""
    )


@needs_browser
def test_report_renders_in_chromium(tmp_path: Any) -> None:
    # GIVEN a two-thread program's report
    done, release = threading.Event(), threading.Event()

    def worker() -> None:
        fib(12)
        done.set()
        release.wait()  # alive at stop: threads are named from threading.enumerate() then

    t = threading.Thread(target=worker, name="fib-worker")
    with framescope.profile() as prof:
        t.start()
        done.wait()
        for _ in range(3000):
            top()
    release.set()
    t.join()
    path = tmp_path / "r.html"
    prof.export_html(path)
    with Browser(find_chromium() or "") as b:
        b.open(path.as_uri())
        # THEN it renders one icicle per thread, with the program's frames
        assert b.eval("document.body.dataset.ready") == "1"
        headings = b.eval("Array.from(document.querySelectorAll('.thread h2 span:first-child'))"
                          ".map(e => e.textContent)")
        assert any(h.startswith("MainThread") for h in headings)
        assert any(h.startswith("fib-worker") for h in headings)
        fib_thread = next(i for i, h in enumerate(headings) if h.startswith("fib-worker"))
        texts = [f["text"] for f in frames(b, fib_thread)]
        assert any(t.endswith(": fib") for t in texts) and any(t.endswith("worker") for t in texts)
        main_texts = [f["text"] for f in frames(b, headings.index(
            next(h for h in headings if h.startswith("MainThread"))))]
        for name in ("top", "mid", "leaf"):
            assert any(t.endswith(": " + name) for t in main_texts), name
        # the summary table lists them
        table = b.eval("Array.from(document.querySelectorAll('#table tbody tr'))"
                       ".map(r => r.cells[0].textContent)")
        assert any(t.endswith(": fib") for t in table)
        # zoom: a click on the first fib frame makes it span the whole width
        f = [f for f in frames(b, fib_thread) if f["text"].endswith(": fib")][0]
        width = b.eval("document.querySelectorAll('.icicle')[%d].clientWidth" % fib_thread)
        assert f["w"] < width
        b.click(f["x"] + 2, f["y"] + f["h"] / 2)
        after = [g for g in frames(b, fib_thread) if g["text"] == f["text"] and g["y"] == f["y"]]
        assert after and after[0]["w"] >= width - 2
        info = b.eval("document.querySelectorAll('.thread .sub')[%d].textContent" % fib_thread)
        assert "zoomed to" in info
        # search: type into the box; matching frames are marked, the table is filtered
        b.eval("document.getElementById('search').focus()")
        b.type_text("leaf")
        marked = [g["text"] for g in frames(b) + frames(b, 1) if "match" in g["cls"].split()]
        assert marked and all("leaf" in m for m in marked)
        shown = b.eval("Array.from(document.querySelectorAll('#table tbody tr:not(.hidden)'))"
                       ".map(r => r.cells[0].textContent)")
        assert shown and all("leaf" in s for s in shown)
        assert "matching name" in b.eval("document.getElementById('search-result').textContent")
        # and nothing went wrong or left the machine
        assert b.errors() == []
        assert b.remote_requests() == []


@needs_browser
def test_torch_profiler_trace_in_chromium(tmp_path: Any) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as tp:
        model(torch.ones(2, 4))
    trace = tmp_path / "torch.json"
    tp.export_chrome_trace(str(trace))
    out = tmp_path / "torch.html"
    subprocess.run([sys.executable, "-m", "framescope", "report", str(trace), "-o", str(out)],
                   check=True, capture_output=True)
    with Browser(find_chromium() or "") as b:
        b.open(out.as_uri())
        texts = [f["text"] for f in frames(b)]
        assert "aten::linear" in texts and "aten::addmm" in texts
        assert b.errors() == []
