"""Figure stage: outputs/results/ -> outputs/figures/<figure>.{png,pdf}, the estimates behind each
figure (outputs/results/<figure>.estimates.parquet, for figures that have any), outputs/report/index.html
(self-contained: images embedded as base64 PNG) and outputs/report/claims.csv (one row per claim, its
id first).

Reads only the saved tables and status.json: no training, no records.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import multiprocessing
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from attnrepro.jobs.grid import parts
from attnrepro.jobs.job import digest
from attnrepro.jobs.provenance import fingerprint
from attnrepro.jobs.records import atomic_write
from attnrepro.report.aggregate import read_status, read_table, results_dir, table_path, write_table
from attnrepro.report.claims import COLUMNS, Claim, fmt
from attnrepro.report.claims_diff import against_reference
from attnrepro.report.figure_spec import Rendered, render, specs
from attnrepro.report.plotting import close, save
from attnrepro.report.sweep_status import status_line

CSS = """
body { font-family: system-ui, sans-serif; max-width: 1400px; margin: 2em auto; padding: 0 1em; color: #222 }
img { max-width: 100%; border: 1px solid #ddd }
table { border-collapse: collapse; margin: .5em 0; font-size: 90% }
td, th { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top }
.ok { color: #1a7f37; font-weight: bold } .no { color: #cf222e; font-weight: bold }
.caption { color: #444; max-width: 1000px } pre { background: #f6f8fa; padding: .5em; overflow-x: auto }
.err { background: #ffebe9 } section { border-top: 2px solid #888; margin-top: 2em }
"""


def estimates_path(outputs: str | Path, figure: str) -> Path:
    return results_dir(outputs) / f"{figure}.estimates.parquet"


@dataclass
class Report:
    rendered: list[Rendered]
    claims: pd.DataFrame
    html_path: Path
    csv_path: Path
    reused: list[str]  # figures whose table and code had not changed: not drawn again
    reference_note: str = ""

    @property
    def errors(self) -> list[str]:
        return [f"{r.spec.name}: {e}" for r in self.rendered for e in r.errors]

    def summary(self) -> str:
        lines = [f"{_count(self.claims)} claims hold"]
        for r in self.rendered:
            c = self.claims[self.claims["figure"] == r.spec.name] if len(self.claims) else self.claims
            lines.append(f"  {r.spec.name}: {_count(c)}" + (" (ERRORS)" if r.errors else ""))
            for _, row in c.iterrows():
                lines.append(f"    [{'x' if row['holds'] else ' '}] {row['claim']}: {fmt(row['measured'])} "
                             f"{row['uncertainty']}")
        if self.reused:
            lines.append(f"{len(self.reused)} of {len(self.rendered)} figures unchanged, not drawn again")
        lines.append(f"claims: {self.reference_note} (report/claims_diff.csv)")
        lines.append(f"report: {self.html_path}")
        return "\n".join(lines)


def _count(claims: pd.DataFrame) -> str:
    return f"{int(claims['holds'].sum()) if len(claims) else 0}/{len(claims)}"


def _esc(x) -> str:
    return html.escape(str(x))


def _claims_html(rendered: Rendered) -> str:
    if not rendered.claims:
        return "<p>No claims.</p>"
    mark = lambda ok: "<td class='ok'>✓</td>" if ok else "<td class='no'>✗</td>"  # noqa: E731
    rows = "".join(
        f"<tr id='{_esc(c.id)}'><td title='{_esc(c.id)}'>{_esc(c.claim)}</td><td>{fmt(c.measured)}</td>"
        f"<td>{_esc(c.uncertainty)}</td>"
        f"{mark(c.holds)}<td>{_esc(c.detail)}</td></tr>" for c in rendered.claims)
    return ("<table><tr><th>claim</th><th>measured</th><th>uncertainty</th><th>holds</th><th>detail</th></tr>"
            f"{rows}</table>")


def _jobs_html(status: dict) -> str:
    """Counts and the list of failed (with reasons), corrupt and missing jobs of one experiment."""
    if not status:
        return "<p>No status: run `attnrepro aggregate`.</p>"
    parts = [f"<p>{_esc(status_line(status))}</p>"]
    if status.get("grid_error"):
        parts.append(f"<pre class='err'>grid could not be expanded: {_esc(status['grid_error'])}</pre>")
    items = [("failed", j.get("reason", ""), " ".join(j.get("overrides", []))) for j in status["failed"]]
    items += [("stale", j.get("reason", ""), " ".join(j.get("overrides", []))) for j in status.get("stale", [])]
    items += [("corrupt", j["error"], j["path"]) for j in status["corrupt"]]
    items += [("mixed protocols", "; ".join(f"{k}: {' | '.join(v)}" for k, v in j["train"].items()),
               " vs ".join(j["overrides"])) for j in status.get("mixed", [])]
    items += [("missing", "", " ".join(j["overrides"])) for j in status["missing"]]
    th = status.get("theory") or {}
    items += [("theory failed", j["reason"], j["curve"]) for j in th.get("failed", [])]
    items += [("theory stale", j["reason"], j["curve"]) for j in th.get("stale", [])]
    items += [("theory corrupt", j["error"], j["key"]) for j in th.get("corrupt", [])]
    items += [("theory missing", "run `attnrepro theory`", c) for c in th.get("missing", [])]
    if status.get("theory_error"):
        parts.append(f"<pre class='err'>theory not loaded: {_esc(status['theory_error'])}</pre>")
    if items:
        rows = "".join(f"<tr><td>{k}</td><td>{_esc(what)}</td><td>{_esc(why)}</td></tr>"
                       for k, why, what in items)
        parts.append(f"<table><tr><th>job</th><th>overrides / path</th><th>reason</th></tr>{rows}</table>")
    return "".join(parts)


def _configs_html(status: dict, profile: str) -> str:
    if not status:
        return ""
    grid = "\n\n".join("\n".join(f"{k}: {json.dumps(v)}" for k, v in part.items())
                       for part in parts(status.get("grid") or {}))
    example = status.get("example_config")
    ex = (f"<details><summary>one resolved job config ({_esc(' '.join(example['overrides']))})</summary>"
          f"<pre>{_esc(json.dumps(example['config'], indent=1))}</pre></details>") if example else ""
    return (f"<details><summary>grid of {_esc(status['experiment'])} for profile {_esc(profile)}</summary>"
            f"<pre>{_esc(grid)}</pre></details>{ex}")


def _section(r: Rendered, status: dict, fig_entry: dict, outputs: Path) -> str:
    profile = status.get("profile", "?")
    exps = status.get("experiments", {})
    holds = sum(c.holds for c in r.claims)
    errors = list(r.errors) + ([f"table: {fig_entry['error']}"] if fig_entry.get("error") else [])
    png = outputs / "figures" / f"{r.spec.name}.png"
    img = (f"<img src='data:image/png;base64,{base64.b64encode(png.read_bytes()).decode('ascii')}' "
           f"alt='{_esc(r.spec.name)}'>" if png.exists() else "")
    return (f"<section id='{_esc(r.spec.name)}'><h2>{_esc(r.spec.name)} "
            f"<small>({holds}/{len(r.claims)} claims hold)</small></h2>{img}"
            f"<p class='caption'>{_esc(r.spec.caption)}</p><h3>Claims</h3>{_claims_html(r)}"
            + "".join(f"<pre class='err'>{_esc(e)}</pre>" for e in errors)
            + "<h3>Jobs</h3>" + "".join(_jobs_html(exps.get(s, {})) for s in r.spec.sources)
            + f"<p>table behind the figure: results/{_esc(r.spec.name)}.parquet "
            f"({fig_entry.get('rows', 0)} rows)"
            + (f"; its estimates: results/{_esc(r.spec.name)}.estimates.parquet ({len(r.estimates)} rows)"
               if r.estimates is not None else "") + "</p>"
            + "<h3>Configs</h3>" + "".join(_configs_html(exps.get(s, {}), profile) for s in r.spec.sources)
            + "</section>")


def _signature(spec, table_file: Path) -> str:
    """What a figure's rendering depends on: its table's bytes and the code of its module (with
    everything it imports: report, stats, theory)."""
    return digest({"table": hashlib.sha256(table_file.read_bytes()).hexdigest(),
                   "code": fingerprint((spec.plot.__module__,), skip=())})


def _render(spec, outputs: Path) -> tuple[Rendered, bool]:
    """(the figure rendered from its saved table, whether it was reused): a figure whose table and
    code did not change since its last error-free rendering keeps its files, estimates and claims."""
    path = table_path(outputs, spec.name)
    cache = results_dir(outputs) / f"{spec.name}.render.json"
    signature = _signature(spec, path) if path.exists() else None
    png = outputs / "figures" / f"{spec.name}.png"
    try:
        saved = json.loads(cache.read_text())
        if signature and saved["signature"] == signature and png.exists():
            est_path = estimates_path(outputs, spec.name)
            estimates = pd.read_parquet(est_path) if saved["estimates"] else None
            return Rendered(spec, None, estimates, [Claim(**c) for c in saved["claims"]]), True
    except (OSError, ValueError, KeyError, TypeError):
        pass
    cache.unlink(missing_ok=True)
    try:
        table, unreadable = read_table(path), ""
    except OSError as e:
        table, unreadable = None, str(e)
    r = render(spec, table)
    if table is None:
        r.errors.append(unreadable or f"no table at {path}: run `attnrepro aggregate` first")
    if r.figure is not None:
        save(r.figure, outputs / "figures", spec.name)
    est_path = estimates_path(outputs, spec.name)
    if r.estimates is not None:  # what the plot and claims used (all NaN without a table)
        write_table(r.estimates, est_path)
    else:  # none, or they failed: no stale file from an earlier run
        est_path.unlink(missing_ok=True)
    if not r.errors and signature:
        atomic_write(cache, lambda f: json.dump({"signature": signature, "estimates": r.estimates is not None,
                                                 "claims": [c.row() for c in r.claims]}, f, allow_nan=True))
    return r, False


def _render_apart(name: str, outputs: Path) -> tuple:
    """_render of the figure `name` in a worker process (one torch thread): its files written and its figure
    closed there; (estimates, claims, errors, reused), what the report needs of it."""
    import torch

    torch.set_num_threads(1)
    r, reused = _render(specs([name])[0], outputs)
    if r.figure is not None:
        close([r.figure])
    return r.estimates, r.claims, r.errors, reused


def _render_all(selected: list, outputs: Path, workers: int) -> list[tuple[Rendered, bool]]:
    """_render of every spec, in `workers` forked processes where there are several figures and this process
    runs no other thread (a fork copies one thread only: one holding a lock would leave it held), else here
    one after the other. Each figure's files and numbers are the same either way."""
    if workers <= 1 or len(selected) < 2 or threading.active_count() > 1:
        return [_render(spec, outputs) for spec in selected]
    context = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(min(workers, len(selected)), mp_context=context) as pool:
        done = list(pool.map(_render_apart, [s.name for s in selected], [outputs] * len(selected)))
    return [(Rendered(spec, None, estimates, claims, errors), reused)
            for spec, (estimates, claims, errors, reused) in zip(selected, done, strict=True)]


def _diff_html(diff: pd.DataFrame | None, note: str) -> str:
    if diff is None or diff.empty:
        return f"<p>{_esc(note)}.</p>"
    rows = "".join(f"<tr><td><a href='#{_esc(r.id)}'>{_esc(r.id)}</a></td><td>{_esc(r.change)}</td>"
                   f"<td>{fmt(r.reference)}</td><td>{fmt(r.measured)}</td><td>{_esc(r.reference_holds)}</td>"
                   f"<td>{_esc(r.holds)}</td></tr>" for r in diff.itertuples())
    return (f"<p>{_esc(note)}:</p><table><tr><th>claim</th><th>change</th><th>reference</th><th>now</th>"
            f"<th>held</th><th>holds</th></tr>{rows}</table>")


def build_report(outputs: str | Path, names: Sequence[str] | None = None, workers: int = 1) -> Report:
    """Render every selected figure from outputs/results/ (reusing those whose table and code did not
    change; in `workers` processes), save it, compare the claims with the profile's reference, and write the
    report."""
    outputs = Path(outputs)
    status = read_status(outputs)
    rendered, reused = [], []
    for r, was_reused in _render_all(list(specs(names)), outputs, workers):
        rendered.append(r)
        if was_reused:
            reused.append(r.spec.name)
    claims = pd.DataFrame([c.row() for r in rendered for c in r.claims], columns=COLUMNS)
    diff, note = against_reference(claims, status.get("profile"),
                                   [r.spec.name for r in rendered] if names is not None else None)
    report_dir = outputs / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    csv_path, html_path = report_dir / "claims.csv", report_dir / "index.html"
    atomic_write(csv_path, lambda f: claims.to_csv(f, index=False), newline="")
    if diff is not None:
        atomic_write(report_dir / "claims_diff.csv", lambda f: diff.to_csv(f, index=False), newline="")
    toc = "".join(f"<li><a href='#{_esc(r.spec.name)}'>{_esc(r.spec.name)}</a>: "
                  f"{sum(c.holds for c in r.claims)}/{len(r.claims)} claims hold"
                  + (" <span class='no'>errors</span>" if r.errors else "") + "</li>" for r in rendered)
    body = (f"<h1>attnrepro report</h1><p>profile <b>{_esc(status.get('profile', '?'))}</b>, "
            f"generated {time.strftime('%Y-%m-%d %H:%M:%S')}. <b>{_count(claims)} claims hold.</b> "
            "A claim that does not hold is reported as measured.</p><ul>" + toc + "</ul>"
            + "<h2>Against the reference</h2>" + _diff_html(diff, note)
            + "".join(_section(r, status, status.get("figures", {}).get(r.spec.name, {}), outputs) for r in rendered))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>attnrepro report</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>")
    atomic_write(html_path, lambda f: f.write(page))
    close([r.figure for r in rendered if r.figure is not None])
    return Report(rendered, claims, html_path, csv_path, reused, note)
