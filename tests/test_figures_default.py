"""`attnrepro figures` without figures= draws the figures with data only, says which it skipped, and keeps the
other figures' reference claims (issue 29's trap: it wrote "not enough data" for every other figure)."""

import json
import math

import pandas as pd
import pytest

from attnrepro import cli

# --- 1. figures without figures=: those with data ---------------------------------------------------


def _plot(table, estimates):
    from attnrepro.report.plotting import panels

    fig, (ax,) = panels(1)
    ax.plot(table["x"], table["y"])
    return fig


def _claims(name):
    def claims(table, estimates):
        from attnrepro.report.claims import judge

        mean = float(table["y"].mean()) if len(table) else math.nan
        return [judge(name, "y is positive", mean, lambda v: v > 0, key="positive")]

    return claims


def _experiment(name, complete=0, failed=0):
    return {"experiment": name, "profile": "smoke", "grid": {}, "grid_error": None, "expected": 2,
            "complete": complete, "stale": [], "corrupt": [], "mixed": [], "repeated_seeds": [], "other": 0,
            "failed": [{"key": f"f{i}", "overrides": ["task.d=4"], "reason": "RuntimeError: loss is nan"}
                       for i in range(failed)],
            "missing": [{"key": f"m{i}", "overrides": ["task.d=8"]} for i in range(2 - complete - failed)],
            "example_config": None}


@pytest.fixture
def house(tmp_path, monkeypatch):
    """Three fake figures of profile smoke: fig_a has a table with rows, fig_c's experiment has only a failed
    job (no rows: drawn, its failure is news), fig_b's experiment has no record at all (no data); a reference
    with rows for all three and for a figure no longer registered."""
    from attnrepro.report import claims_diff, figure_spec
    from attnrepro.report.aggregate import table_path, write_table

    figure_spec.specs()  # the real figure modules registered first, then set aside
    fakes = {n: figure_spec.FigureSpec(n, (f"exp_{n[-1]}",), f"{n} caption", table=lambda data: None, plot=_plot,
                                       claims=_claims(n)) for n in ("fig_a", "fig_b", "fig_c")}
    monkeypatch.setattr(figure_spec, "REGISTRY", fakes)
    monkeypatch.setattr(claims_diff, "REFERENCE_DIR", tmp_path / "reference")
    out = tmp_path / "outputs"
    (out / "results").mkdir(parents=True)
    write_table(pd.DataFrame({"x": [1.0, 2.0, 3.0], "y": [1.0, 2.0, 4.0]}), table_path(out, "fig_a"))
    for name in ("fig_b", "fig_c"):
        write_table(pd.DataFrame({"x": pd.Series([], dtype=float), "y": pd.Series([], dtype=float)}),
                    table_path(out, name))
    status = {"profile": "smoke",
              "experiments": {"exp_a": _experiment("exp_a", complete=2), "exp_b": _experiment("exp_b"),
                              "exp_c": _experiment("exp_c", failed=1)},
              "figures": {n: {"sources": [f"exp_{n[-1]}"], "rows": 3 if n == "fig_a" else 0, "error": ""}
                          for n in fakes}}
    (out / "results" / "status.json").write_text(json.dumps(status))
    (tmp_path / "reference").mkdir()
    reference = pd.DataFrame({"id": ["fig_a/positive", "fig_b/positive", "fig_c/positive", "gone/x"],
                              "figure": ["fig_a", "fig_b", "fig_c", "gone"], "claim": ["y is positive"] * 4,
                              "measured": [-1.0, 2.0, 3.0, 4.0], "uncertainty": "", "holds": [False, True, True, True],
                              "detail": ""})
    reference.to_csv(tmp_path / "reference" / "claims_smoke.csv", index=False)
    return out, tmp_path / "reference" / "claims_smoke.csv"


def test_figures_without_figures_draws_those_with_data_and_says_which_it_skipped(house, capsys):
    out, _ = house
    assert cli.main(["figures", f"outputs={out}"]) == 0
    stdout = capsys.readouterr().out
    skipped = [line for line in stdout.splitlines() if "skipped" in line]
    assert skipped == [f"1 of 3 registered figures skipped, no data in {out}/results: fig_b "
                       "(draw them anyway: figures=fig_b)"]
    claims = pd.read_csv(out / "report" / "claims.csv")
    assert sorted(claims["figure"].unique()) == ["fig_a", "fig_c"]  # no 'not enough data' row of fig_b
    html = (out / "report" / "index.html").read_text()
    assert "id='fig_a'" in html and "id='fig_c'" in html and "id='fig_b'" not in html
    assert "loss is nan" in html  # fig_c, drawn for its failed job
    diff = pd.read_csv(out / "report" / "claims_diff.csv")
    # compared with the drawn figures' reference claims only: fig_b's and gone's are not 'removed'
    assert sorted(diff["id"]) == ["fig_a/positive", "fig_c/positive"]


def test_named_figures_without_data_are_drawn_as_such(house):
    out, _ = house
    assert cli.main(["figures", "figures=fig_b", f"outputs={out}"]) == 0
    claims = pd.read_csv(out / "report" / "claims.csv")
    assert claims["figure"].tolist() == ["fig_b"] and not claims["holds"].any()
    assert claims["detail"].str.startswith("not enough data").all()


def test_reproduce_draws_every_figure_of_what_it_ran(house):
    """commands.reproduce calls render(outputs, figures, profile): every registered figure (figures=None), as
    before, data or not."""
    from attnrepro.commands.figures import render

    out, _ = house
    assert render(str(out), None, "smoke") == 0
    assert sorted(pd.read_csv(out / "report" / "claims.csv")["figure"].unique()) == ["fig_a", "fig_b", "fig_c"]


def test_refreshing_without_figures_replaces_the_drawn_figures_rows_only(house, capsys):
    out, path = house
    assert cli.main(["figures", f"outputs={out}", "refresh_reference=true"]) == 0
    new = pd.read_csv(path).set_index("id")
    assert sorted(new.index) == ["fig_a/positive", "fig_b/positive", "fig_c/positive", "gone/x"]
    assert new.loc["fig_a/positive", "measured"] == pytest.approx(7 / 3)  # this run's
    assert new.loc["fig_b/positive", "measured"] == 2.0 and new.loc["gone/x", "measured"] == 4.0  # kept
    assert "those of fig_a, fig_c from this run" in capsys.readouterr().out


def test_no_figure_with_data_is_one_line_and_writes_nothing(house, capsys):
    out, _ = house
    status_file = out / "results" / "status.json"
    status = json.loads(status_file.read_text())
    status["experiments"] = {e: _experiment(e) for e in status["experiments"]}
    status["figures"]["fig_a"]["rows"] = 0
    status_file.write_text(json.dumps(status))
    (out / "report").mkdir()
    (out / "report" / "claims.csv").write_text("earlier\n")
    assert cli.main(["figures", f"outputs={out}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no figure has data" in err and "figures=" in err
    assert (out / "report" / "claims.csv").read_text() == "earlier\n"
