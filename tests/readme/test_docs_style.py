"""The writing rule of README.md and docs/*.md (docs/development.md#the-writing-rule states it for people):
sentences of at most 30 words on average per page, none over 60, one level of parentheses, and each how-to opens
with a command.

What counts is the prose only. Fenced code blocks, HTML comments, headings and table rows are skipped. A paragraph
(consecutive text lines) and a list item are each a run of sentences; a sentence ends at `.`, `!` or `?` followed
by a space, or at the end of its paragraph or item. An inline code span counts as one word and a link as its text;
its parentheses are not counted. `python tests/readme/test_docs_style.py` prints each page's figures and its
longest sentences.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
AVERAGE_WORDS, MAX_WORDS, MAX_DEPTH = 30, 60, 1

# What each page is (Diátaxis); a how-to opens with a command. A page missing here fails
# test_every_page_says_what_it_is, so a new page is sorted when it is added.
KINDS = {
    "README.md": "tutorial",
    "index.md": "explanation",
    "getting-started.md": "tutorial",
    "own-code.md": "tutorial",
    "local.md": "how-to",
    "slurm.md": "how-to",
    "gpu.md": "how-to",
    "optuna.md": "how-to",
    "results.md": "how-to",
    "notebook.md": "how-to",
    "data.md": "how-to",
    "config-by-example.md": "how-to",
    "development.md": "how-to",
    "configuration.md": "reference",
    "commands.md": "reference",
    "api.md": "reference",
    "sweep-files.md": "reference",
    "faults.md": "reference",
    "how-a-job-runs.md": "explanation",
    "reproducibility.md": "explanation",
    "tutorial-own-loop.md": "tutorial",
    "install.md": "how-to",
    "howto-slurm.md": "how-to",
    "howto-monitor.md": "how-to",
    "howto-pack.md": "how-to",
    "howto-budgets.md": "how-to",
    "howto-halving.md": "how-to",
    "howto-hydra-plugins.md": "how-to",
    "troubleshooting.md": "reference",  # symptoms and their fixes, looked up by a message's link
}


_FENCE = re.compile(r"^\s*(```|~~~)")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_ABBREVIATIONS = re.compile(r"\b(?:e\.g|i\.e|etc|vs|cf|approx|no)\.", re.IGNORECASE)
_END = re.compile(r"(?<=[.!?])[\"')\]*_]*\s+")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _plain(text: str) -> str:
    """Inline code as one word, a link or an image as its text, emphasis marks dropped."""
    text = re.sub(r"`[^`]*`", "CODE", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"!?\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    text = re.sub(r"<https?://[^>]*>", "LINK", text)
    return text.replace("**", "").replace("__", "")


def paragraphs(markdown: str) -> list[str]:
    """The page's prose: each paragraph and each list item as one line, inline markup made plain."""
    markdown = re.sub(r"<!--.*?-->", "", markdown, flags=re.S)
    found: list[str] = []
    current: list[str] = []
    in_fence = False

    def close() -> None:
        if current:
            found.append(_plain(" ".join(current)))
            current.clear()

    for line in markdown.splitlines():
        if _FENCE.match(line):
            close()
            in_fence = not in_fence
            continue
        stripped = line.strip()
        if in_fence or not stripped or stripped.startswith(("#", "|", "<", "---", "===")):
            close()
            continue
        if _ITEM.match(line):
            close()
            stripped = _ITEM.sub("", line, count=1)
        current.append(stripped)
    close()
    return found


def sentences(markdown: str) -> list[str]:
    out = []
    for paragraph in paragraphs(markdown):
        guarded = _ABBREVIATIONS.sub(lambda m: m.group(0).replace(".", "\0"), paragraph)
        out += [s.replace("\0", ".").strip() for s in _END.split(guarded) if s.strip()]
    return out


def words(sentence: str) -> int:
    return sum(1 for token in sentence.split() if re.search(r"\w", token))


def depth(sentence: str) -> int:
    deepest = level = 0
    for ch in sentence:
        if ch == "(":
            level += 1
            deepest = max(deepest, level)
        elif ch == ")":
            level = max(0, level - 1)
    return deepest


def problems(markdown: str) -> list[str]:
    """What breaks the rule on one page, worst first; empty when it keeps it."""
    found = sentences(markdown)
    counts = [words(s) for s in found]
    ranked = sorted(zip(found, counts, strict=True), key=lambda x: -x[1])
    out = [f"{n} words (at most {MAX_WORDS}): {s[:120]}..." for s, n in ranked if n > MAX_WORDS]
    out += [f"parentheses {depth(s)} deep (at most {MAX_DEPTH}): {s[:120]}..." for s in found if depth(s) > MAX_DEPTH]
    if counts and sum(counts) / len(counts) > AVERAGE_WORDS:
        out.append(f"{sum(counts) / len(counts):.1f} words a sentence on average (at most {AVERAGE_WORDS})")
    return out


def opens_with_a_command(markdown: str) -> bool:
    """The first fenced block is a shell block, and at most one paragraph of prose comes before it."""
    text = re.sub(r"<!--.*?-->", "", markdown, flags=re.S)
    fence = re.search(r"^```(\w*)\s*$", text, flags=re.M)
    if fence is None:
        return False
    return fence.group(1) in ("bash", "sh", "shell") and len(paragraphs(text[:fence.start()])) <= 1


def test_the_rule_reads_prose_only() -> None:
    """The counting itself: code, tables, headings and comments are not prose; links and code spans are words."""
    page = "\n".join([
        "# A heading of many many many many words that is not a sentence",
        "<!-- a comment (with (nested) parentheses) -->",
        "Run [the sweep](local.md) with `python train.py -m seed=0,1` now. It prints (in order) the rows!",
        "",
        "```bash",
        "echo one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen (a (b))",
        "```",
        "| a | table | row | (with (nested)) |",
        "- an item without a full stop",
        "- e.g. this item, i.e. one sentence.",
    ])
    assert sentences(page) == ["Run the sweep with CODE now.", "It prints (in order) the rows!",
                               "an item without a full stop", "e.g. this item, i.e. one sentence."]
    assert [words(s) for s in sentences(page)] == [6, 6, 6, 6]
    assert problems(page) == []
    long = " ".join(["word"] * (MAX_WORDS + 1)) + "."
    assert problems(long)[0].startswith(f"{MAX_WORDS + 1} words")
    assert any("2 deep" in p for p in problems("One (two (three) two) one."))
    assert any("on average" in p for p in problems(" ".join(["word"] * 31) + ". " + " ".join(["word"] * 31) + "."))
    assert opens_with_a_command("# Title\n\nOne line.\n\n```bash\nmake test\n```\n")
    assert not opens_with_a_command("# Title\n\nOne.\n\nTwo.\n\n```bash\nmake test\n```\n")
    assert not opens_with_a_command("# Title\n\nOne.\n\n```yaml\na: 1\n```\n")


def test_every_page_says_what_it_is() -> None:
    """Every page of the site and the README is sorted into KINDS (and only pages that exist are)."""
    names = {p.name for p in pages()}
    assert names - KINDS.keys() == set(), f"add these pages to KINDS in {Path(__file__).name}"
    assert KINDS.keys() - names == set(), "KINDS names pages that are gone"


NAV_SECTIONS = {"Tutorials": "tutorial", "How-to guides": "how-to", "Reference": "reference",
                "Explanation": "explanation"}


def test_the_sites_nav_groups_the_pages_by_their_kind() -> None:
    """mkdocs.yml's nav has one section per kind (Diataxis), and each page sits in the section of its kind in KINDS:
    KINDS is the one place a page's kind is written."""
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    sections = {title: entries for item in nav for title, entries in item.items() if isinstance(entries, list)}
    assert sorted(sections) == sorted(NAV_SECTIONS), sorted(sections)
    for title, entries in sections.items():
        for entry in entries:
            (page,) = entry.values()
            if (REPO / "docs" / page).exists():  # benchmarks.md is bench/RESULTS.md, added by the site's hook
                assert KINDS[page] == NAV_SECTIONS[title], f"{page} is a {KINDS[page]} page, under {title}"


@pytest.mark.parametrize("page", pages(),
                         ids=lambda p: p.name)
def test_every_page_keeps_the_writing_rule(page: Path) -> None:
    assert problems(page.read_text()) == [], f"{page.name} breaks the writing rule (docs/development.md)"


@pytest.mark.parametrize("page", [p for p in pages() if KINDS.get(p.name) == "how-to"], ids=lambda p: p.name)
def test_every_how_to_opens_with_a_command(page: Path) -> None:
    assert opens_with_a_command(page.read_text()), f"{page.name}: put the command first, after at most one line"


def test_the_one_make_test_figure_is_the_last_run_its_raw_file_records() -> None:
    """docs/development.md gives one `make test` time and test count, dated, naming its raw file; they are that
    file's last `make test` summary line, and no other page of the README or the site gives a test count."""
    text = (REPO / "docs" / "development.md").read_text()
    figures = re.findall(r"it took (\d+) min (\d+) s for (\d+) tests", text)
    assert len(figures) == 1, figures
    minutes, seconds, tests = (int(x) for x in figures[0])
    raw = re.findall(r"`(bench/results/test-suite/[^`]+\.txt)`", text)
    assert len(raw) == 1 and raw[0] == sorted(str(p.relative_to(REPO)) for p in
                                              (REPO / "bench" / "results" / "test-suite").glob("*.txt"))[-1]
    summaries = [line for line in (REPO / raw[0]).read_text().splitlines()
                 if re.search(r"\d+ passed.* in [\d.]+s \(0:(\d+):(\d+)\)", line) and " skipped" in line]
    last = re.search(r"(\d+) passed, (\d+) skipped.*\(0:(\d+):(\d+)\)", summaries[-1])
    assert last is not None
    assert (int(last[1]) + int(last[2]), int(last[3]), int(last[4])) == (tests, minutes, seconds), summaries[-1]
    for page in pages():
        if page.name != "development.md":
            assert not re.search(r"\b\d{3,} (tests|passed)\b", page.read_text()), f"{page.name} gives a test count"



def todays_figures() -> list[list[str]]:
    """The rows of bench/RESULTS.md's summary table, each a list of its cells."""
    text = (REPO / "bench" / "RESULTS.md").read_text()
    section = text.split("## Today's figures", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # past the header and its rule
    return [[cell.strip() for cell in row.strip("|").split(" | ")] for row in rows]


def test_every_row_of_todays_figures_names_a_raw_file_that_exists() -> None:
    """Each benchmark's latest figure in bench/RESULTS.md names the command that printed it and its raw output under
    bench/results/, a file that exists; a figure whose output was not kept says so instead. The `make test` row
    links docs/development.md, the figure's one home, and names the same last raw file."""
    rows = todays_figures()
    assert len(rows) >= 10, rows
    for benchmark, figure, command, raw, history in rows:
        assert figure and re.fullmatch(r"`[^`]+`", command), (benchmark, figure, command)
        assert re.fullmatch(r"\[[^\]]+\]\(#[a-z0-9-_]+\)", history), (benchmark, history)
        if raw.startswith("none kept: "):
            continue
        path = re.fullmatch(r"`(bench/results/[^`]+)`", raw)
        assert path is not None, (benchmark, raw)
        assert (REPO / path[1]).is_file(), f"{benchmark}: {path[1]} is not a file"
    make_test = next(row for row in rows if row[0].startswith("`make test`"))
    development = (REPO / "docs" / "development.md").read_text()
    assert make_test[1].startswith("[docs/development.md](../docs/development.md)"), make_test[1]
    assert not re.search(r"\d+ min \d+ s", make_test[1]), make_test[1]
    assert f"`{make_test[3].strip('`')}`" in development, make_test[3]



def test_every_troubleshooting_link_of_a_message_has_its_section() -> None:
    """A message in src/ that says `See docs/troubleshooting.md#anchor` names a section of that page ({#anchor})."""
    linked = {m for p in (REPO / "src").rglob("*.py") for m in re.findall(r"docs/troubleshooting\.md#([\w-]+)",
                                                                          p.read_text())}
    anchors = set(re.findall(r"^## .* \{#([\w-]+)\}$", (REPO / "docs" / "troubleshooting.md").read_text(), re.M))
    assert linked and linked <= anchors, linked - anchors


if __name__ == "__main__":
    for path in (Path(a) for a in sys.argv[1:]) if sys.argv[1:] else pages():
        text = path.read_text()
        counts = [words(s) for s in sentences(text)]
        print(f"{path.name}: {len(counts)} sentences, {sum(counts) / max(1, len(counts)):.1f} average, "
              f"{max(counts, default=0)} longest, {sum(c > MAX_WORDS for c in counts)} over {MAX_WORDS}, "
              f"opens with a command: {opens_with_a_command(text)}")
        for p in problems(text)[:int(__import__('os').environ.get('SHOW', '0'))]:
            print("   ", p)
