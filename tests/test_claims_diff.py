"""claims.csv against a reference: matched on ids, relative tolerance, verdicts, added and removed claims."""

import pandas as pd

from attnrepro.report.claims_diff import compare


def _claims(rows):
    return pd.DataFrame(rows, columns=["id", "measured", "holds"])


def test_compare_lists_exactly_what_changed():
    ref = _claims([("a", 1.0, True), ("b", 2.0, True), ("c", 3.0, False), ("gone", 0.0, True),
                   ("nan", float("nan"), False)])
    now = _claims([("b", 2.0 * (1 + 1e-7), True), ("a", 1.0 + 1e-5, True), ("c", 3.0, True), ("new", 5.0, True),
                   ("nan", float("nan"), False)])
    diff = compare(now, ref).set_index("id")
    assert diff.loc["a", "change"] == "value" and diff.loc["a", "reference"] == 1.0  # moved by 1e-5 > 1e-6
    assert "b" not in diff.index  # within the tolerance; and the order of rows does not matter
    assert diff.loc["c", "change"] == "verdict"
    assert diff.loc["new", "change"] == "added" and diff.loc["gone", "change"] == "removed"
    assert "nan" not in diff.index  # not enough data on both sides is no change
    assert compare(ref, ref).empty
    assert compare(now, ref, rtol=1e-3).set_index("id").index.tolist() == ["c", "new", "gone"]


def test_a_run_of_some_figures_is_compared_with_those_figures_claims_only(tmp_path, monkeypatch):
    from attnrepro.report import claims_diff

    ref = pd.DataFrame([("f1/a", "f1", 1.0, True), ("f2/b", "f2", 2.0, True)],
                       columns=["id", "figure", "measured", "holds"])
    ref.to_csv(tmp_path / "claims_paper.csv", index=False)
    monkeypatch.setattr(claims_diff, "REFERENCE_DIR", tmp_path)
    now = pd.DataFrame([("f1/a", "f1", 1.0, True)], columns=["id", "figure", "measured", "holds"])
    diff, note = claims_diff.against_reference(now, "paper", ["f1"])
    assert diff.empty and note.endswith(": 0 claims differ; 1 claims in this run, 1 in the reference")
    diff, note = claims_diff.against_reference(now, "paper")  # every figure drawn: f2's claim is missing
    assert diff.set_index("id").loc["f2/b", "change"] == "removed"
    assert note.endswith(": 1 claims differ (1 removed); 1 claims in this run, 2 in the reference")
    moved = pd.DataFrame([("f1/a", "f1", 1.01, True), ("f2/b", "f2", 2.5, True)],
                         columns=["id", "figure", "measured", "holds"])
    diff, note = claims_diff.against_reference(moved, "paper")  # moves of 0.01/1.01 and 0.5/2.5
    assert note.endswith(": 2 claims differ (2 value; values moved by a median 0.1 and at most 0.2, relative); "
                         "2 claims in this run, 2 in the reference")


def test_refreshing_the_reference_for_some_figures_keeps_the_others(tmp_path, monkeypatch):
    """refresh_reference with figures=: those figures' rows are this run's, every other figure's rows stay."""
    from types import SimpleNamespace

    import pandas as pd

    from attnrepro.commands import figures
    from attnrepro.report import claims_diff

    monkeypatch.setattr(claims_diff, "REFERENCE_DIR", tmp_path)
    old = pd.DataFrame({"id": ["a/x", "b/y", "b/z"], "figure": ["a", "b", "b"], "measured": [1.0, 2.0, 3.0]})
    old.to_csv(tmp_path / "claims_paper.csv", index=False)
    run = pd.DataFrame({"id": ["b/y"], "figure": ["b"], "measured": [5.0]})
    figures._refresh(SimpleNamespace(claims=run, errors=[]), "paper", ["b"])
    new = pd.read_csv(tmp_path / "claims_paper.csv")
    assert sorted(zip(new["id"], new["measured"])) == [("a/x", 1.0), ("b/y", 5.0)]
