"""Promises of issue 24 about what a user reads, checked on the files:
the README's "From Python" section starts with the pip command, the
performance page shows the three plots near its top, each with a caption
that names the host, the date and the command, and the current results
files (one per host kind and benchmark) carry host kind, CPU model, date
and command on every row (bench/record.py); a decode formats table the
page marks with its records is what bench/formats_table.py prints from
them."""
import glob
import json
import os
import re

top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read(*path):
    with open(os.path.join(top, *path)) as f:
        return f.read()


def test_readme_from_python_starts_with_pip():
    section = read("README.md").split("## From Python", 1)[1]
    first_code = section.split("```", 2)[1]
    lines = [l for l in first_code.splitlines()[1:] if l.strip()]
    assert "pip install --no-build-isolation ." in lines[0], lines[0]


def test_performance_page_shows_captioned_plots():
    text = read("docs", "PERFORMANCE.md")
    head = text[:text.index("\n## ")] if "\n## " in text else text
    for name in ("prefill", "decode", "ring"):
        m = re.search(r"!\[[^\]]*\]\(img/%s\.png\)\n\n(\*.*?\*)(?:\n\n|\n?$)" % name, head, re.S)
        assert m, "docs/PERFORMANCE.md shows img/%s.png before its first section, with a caption" % name
        cap = m.group(1)
        assert re.search(r"20\d\d-\d\d-\d\d", cap), (name, "date", cap[:80])
        assert re.search(r"Zen|Xeon|EPYC|family", cap), (name, "host", cap[:80])
        assert "`" in cap and ("bench/" in cap or "attn bench" in cap), (name, "command", cap[:80])
        assert os.path.exists(os.path.join(top, "docs", "img", name + ".png"))


def test_results_files_rows_name_host_date_command():
    files = [f for f in glob.glob(os.path.join(top, "bench", "results", "*", "*.jsonl"))
             if os.sep + "archive" + os.sep not in f]
    assert files
    kinds = {os.path.basename(os.path.dirname(f)) for f in files}
    for f in files:
        for n, line in enumerate(open(f)):
            if not line.strip():
                continue
            row = json.loads(line)
            for key in ("host_kind", "cpu_model_name", "date", "command"):
                assert row.get(key), "%s:%d has no %s" % (f, n + 1, key)
            assert row["host_kind"] in kinds and row["host_kind"] == os.path.basename(os.path.dirname(f))


def test_performance_formats_tables_match_their_records():
    """A decode formats table marked `<!-- bench/formats_table.py [--own] FILE
    ... -->` (records under bench/results/) is what the script prints from
    them."""
    import subprocess
    import sys
    text = read("docs", "PERFORMANCE.md")
    marks = re.findall(r"<!-- bench/formats_table\.py ([^>]*?) -->\n((?:\|.*\n)+)", text)
    assert marks, "docs/PERFORMANCE.md marks its formats table with its records"
    for files, table in marks:
        paths = [f if f.startswith("--") else os.path.join(top, "bench", "results", f) for f in files.split()]
        out = subprocess.run([sys.executable, os.path.join(top, "bench", "formats_table.py")] + paths,
                             capture_output=True, text=True, check=True).stdout
        want = "".join(l + "\n" for l in out.splitlines() if l.startswith("|"))
        assert table == want, (files, table, want)
