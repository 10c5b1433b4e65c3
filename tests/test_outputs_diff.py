"""benchmarks/outputs_diff.py: what bench_analysis says differs between two analyses of one input."""

from outputs_diff import differences


def write(folder, files):
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_equal_files_counted_and_each_difference_named_by_column_and_size(tmp_path):
    base = write(tmp_path / "base", {
        "tidy/runs.csv": "run,time\na,1.0\n", "findings.md": "# same\n",
        "tables/fits.csv": "law,p,r2\namdahl,0.5,0.9\ngustafson,0.2,0.8\n",
        "tables/old.csv": "x\n1\n", "figures/speedup.png": "base pixels",
    })
    head = write(tmp_path / "head", {
        "tidy/runs.csv": "run,time\na,1.0\n", "findings.md": "# same\n",
        "tables/fits.csv": "law,p,r2,limited_by\namdahl,0.5000005,0.9,x\ngustafson,0.2,0.8,y\n",
        "tables/new.csv": "x\n1\n", "figures/speedup.png": "other pixels",
    })
    equal, differing = differences(base, head)
    assert equal == ["findings.md", "tidy/runs.csv"]  # figures are not compared
    how = dict(differing)
    assert set(how) == {"tables/fits.csv", "tables/old.csv", "tables/new.csv"}
    assert how["tables/fits.csv"] == ("columns added: limited_by; "
                                      "p: largest relative difference 1e-06 (1 rows)")
    assert how["tables/old.csv"] == "only in the base" and how["tables/new.csv"] == "new"


def test_text_columns_and_row_counts(tmp_path):
    base = write(tmp_path / "base", {"a.csv": "k,v\nx,1\ny,2\n", "b.csv": "k\nx\n"})
    head = write(tmp_path / "head", {"a.csv": "k,v\nx,1\nz,2\n", "b.csv": "k\nx\ny\n"})
    how = dict(differences(base, head)[1])
    assert how == {"a.csv": "k: 1 rows differ", "b.csv": "1 rows before, 2 now"}
