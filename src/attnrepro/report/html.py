"""Figure stage: outputs/results/ -> outputs/figures/<figure>.{png,pdf}, outputs/report/index.html
(self-contained: images embedded as base64 PNG) and outputs/report/claims.csv.

Reads only the saved tables and status.json: no training, no records.
"""

from __future__ import annotations

import html
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd

from attnrepro.report.aggregate import read_status, table_path
from attnrepro.report.claims import fmt
from attnrepro.report.figure_spec import Rendered, render, specs
from attnrepro.report.plotting import close, png_base64, save
from attnrepro.report.tables import status_line

CSS = """
body { font-family: system-ui, sans-serif; max-width: 1400px; margin: 2em auto; padding: 0 1em; color: #222 }
img { max-width: 100%; border: 1px solid #ddd }
table { border-collapse: collapse; margin: .5em 0; font-size: 90% }
td, th { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top }
.ok { color: #1a7f37; font-weight: bold } .no { color: #cf222e; font-weight: bold }
.caption { color: #444; max-width: 1000px } pre { background: #f6f8fa; padding: .5em; overflow-x: auto }
.err { background: #ffebe9 } section { border-top: 2px solid #888; margin-top: 2em }
"""


@dataclass
class Report:
    rendered: list[Rendered]
    claims: pd.DataFrame
    html_path: Path
    csv_path: Path

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
        f"<tr><td>{_esc(c.claim)}</td><td>{fmt(c.measured)}</td><td>{_esc(c.uncertainty)}</td>"
        f"{mark(c.holds)}<td>{_esc(c.detail)}</td></tr>" for c in rendered.claims)
    return ("<table><tr><th>claim</th><th>measured</th><th>uncertainty</th><th>holds</th><th>detail</th></tr>"
            f"{rows}</table>")


def _jobs_html(status: dict) -> str:
    """Counts and the list of failed (with reasons), corrupt and missing jobs of one experiment."""
    if not status:
        return "<p>No status: run pipelines/aggregate.py.</p>"
    parts = [f"<p>{_esc(status_line(status))}</p>"]
    if status.get("grid_error"):
        parts.append(f"<pre class='err'>grid could not be expanded: {_esc(status['grid_error'])}</pre>")
    items = [("failed", j.get("reason", ""), " ".join(j.get("overrides", []))) for j in status["failed"]]
    items += [("corrupt", j["error"], j["path"]) for j in status["corrupt"]]
    items += [("missing", "", " ".join(j["overrides"])) for j in status["missing"]]
    th = status.get("theory") or {}
    items += [("theory failed", j["reason"], j["curve"]) for j in th.get("failed", [])]
    items += [("theory corrupt", j["error"], j["key"]) for j in th.get("corrupt", [])]
    items += [("theory missing", "run pipelines/theory.py", c) for c in th.get("missing", [])]
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
    grid = "\n".join(f"{k}: {json.dumps(v)}" for k, v in (status.get("grid") or {}).items())
    example = status.get("example_config")
    ex = (f"<details><summary>one resolved job config ({_esc(' '.join(example['overrides']))})</summary>"
          f"<pre>{_esc(json.dumps(example['config'], indent=1))}</pre></details>") if example else ""
    return (f"<details><summary>grid of {_esc(status['experiment'])} for profile {_esc(profile)}</summary>"
            f"<pre>{_esc(grid)}</pre></details>{ex}")


def _section(r: Rendered, status: dict, fig_entry: dict) -> str:
    profile = status.get("profile", "?")
    exps = status.get("experiments", {})
    holds = sum(c.holds for c in r.claims)
    errors = list(r.errors) + ([f"table: {fig_entry['error']}"] if fig_entry.get("error") else [])
    img = (f"<img src='data:image/png;base64,{png_base64(r.figure)}' alt='{_esc(r.spec.name)}'>"
           if r.figure else "")
    return (f"<section id='{_esc(r.spec.name)}'><h2>{_esc(r.spec.name)} "
            f"<small>({holds}/{len(r.claims)} claims hold)</small></h2>{img}"
            f"<p class='caption'>{_esc(r.spec.caption)}</p><h3>Claims</h3>{_claims_html(r)}"
            + "".join(f"<pre class='err'>{_esc(e)}</pre>" for e in errors)
            + "<h3>Jobs</h3>" + "".join(_jobs_html(exps.get(s, {})) for s in r.spec.sources)
            + f"<p>table behind the figure: results/{_esc(r.spec.name)}.parquet "
            f"({fig_entry.get('rows', 0)} rows)</p>"
            + "<h3>Configs</h3>" + "".join(_configs_html(exps.get(s, {}), profile) for s in r.spec.sources)
            + "</section>")


def build_report(outputs: str | Path, names: Sequence[str] | None = None) -> Report:
    """Render every selected figure from outputs/results/, save it, and write the report."""
    outputs = Path(outputs)
    status = read_status(outputs)
    rendered = []
    for spec in specs(names):
        path = table_path(outputs, spec.name)
        table = pd.read_parquet(path) if path.exists() else None
        r = render(spec, table)
        if table is None:
            r.errors.append(f"no table at {path}: run pipelines/aggregate.py first")
        if r.figure is not None:
            save(r.figure, outputs / "figures", spec.name)
        rendered.append(r)
    claims = pd.DataFrame([c.row() for r in rendered for c in r.claims],
                          columns=["figure", "claim", "measured", "uncertainty", "holds", "detail"])
    report_dir = outputs / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    csv_path, html_path = report_dir / "claims.csv", report_dir / "index.html"
    claims.to_csv(csv_path, index=False)
    toc = "".join(f"<li><a href='#{_esc(r.spec.name)}'>{_esc(r.spec.name)}</a>: "
                  f"{sum(c.holds for c in r.claims)}/{len(r.claims)} claims hold"
                  + (" <span class='no'>errors</span>" if r.errors else "") + "</li>" for r in rendered)
    body = (f"<h1>attnrepro report</h1><p>profile <b>{_esc(status.get('profile', '?'))}</b>, "
            f"generated {time.strftime('%Y-%m-%d %H:%M:%S')}. <b>{_count(claims)} claims hold.</b> "
            "A claim that does not hold is reported as measured.</p><ul>" + toc + "</ul>"
            + "".join(_section(r, status, status.get("figures", {}).get(r.spec.name, {})) for r in rendered))
    html_path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>attnrepro report</title>"
                         f"<style>{CSS}</style></head><body>{body}</body></html>")
    close([r.figure for r in rendered if r.figure is not None])
    return Report(rendered, claims, html_path, csv_path)
