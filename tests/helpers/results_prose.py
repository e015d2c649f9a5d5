"""Hand-written prose carries no result: outside the blocks generated from records, a statement that names two
methods, arms or policies with a figure or a comparison is refused, whatever its verb.

The names come from the project, not from a list kept here: the methods table (:data:`squarechipo.losses.
METHOD_NAMES`), every study design's arms (each arm's method and its setting: ε, β, rows, clean or private, the
label order) and the two policies the main job compares (its aligned policy and SFT). A *statement* is one sentence
or semicolon clause, one table row, one list item or CHANGELOG bullet, one comment or docstring, one plot caption or
image caption, each read alone. A figure is a number that states an outcome: not a design's setting (ε = 1, β 0.05,
512 rows), a convention (the 95% of an interval), a citation's year or a theorem's number. A comparison is a
comparative construction (an "-er than", ≥, "ahead of", "edges out", "level with", ...) between the named things.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Any generated block: ``<!-- NAME[:PART]:begin ... -->`` to its end marker.
GENERATED = re.compile(r"<!-- ([\w-]+)(:[\w-]+)?:begin.*?<!-- \1(:[\w-]+)?:end -->", re.S)
#: A number as a reader sees it (as the readings test reads it).
NUMBER = re.compile(r"(?<![\w.\-/])[+−-]?\d+(?:[.,]\d+)?%?(?!\w)")
#: Numbers that state no outcome: a design's setting after its symbol or noun, a theorem's or an equation's number,
#: a citation's year, a commit's hex, a file's name.
SETTING = re.compile(
    r"(?:(?:[εβαργσ§]|\b(?:c|d|lr|learning rate|flip rate|rank|epochs?|steps?|seeds?|Thm|Theorem|Assumption|Alg|Eq|App"
    r"|Sec|Fig|Table|et al\.?|issue|stop|Python|torch|version|v)\b)\s*[=:≈≤≥<>∈]?\s*\{?\s*"
    r"(?:[\d.]+\s*(?:,|and|or|to|–)\s*)*)$",  # a setting's list goes on: "ε = 1, 2 and 4"
    re.IGNORECASE,
)
#: What follows a count or a size of what was run ("on 128, 256 and 512 private rows", "20 MB").
COUNTED = re.compile(
    r"(?:\s*(?:,|and|or|to|–)\s*[\d.]+)*\s*(?:[\w-]+ ){0,2}(?:rows?|seeds?|epochs?|prompts?|pairs?|cells?|arms?"
    r"|claims?|tokens?|steps?|checkpoints?|samples?|layers?|MB|GB)\b"
)
#: The conventions every interval and power statement carries.
CONVENTIONS = {"95%", "80%", "0.05", "95", "80"}
#: A comparison, in the forms English builds one; the names it compares come from the project.
COMPARISON = re.compile(
    r"\b\w{2,}er than\b|\b(?:more|less|fewer|rather|other)\b[^.;]*?\bthan\b|\bas \w+ as\b|[≥≤><]"
    r"|\b(?:above|below|ahead|behind"
    r"|beats?|beaten|beating|edges?|edged|trail(?:s|ed|ing)?|outperform\w*|outdo\w*|exceed\w*|surpass\w*|better|worse"
    r"|higher|lower|level with|on par|tie[sd]?|(?<!expected )(?<!hard )wins?(?! rates?)|won|lose[sd]?|lost|leads?|led"
    r"|dominat\w*|superior|inferior|same as|advantage|prevail\w*|overtak\w*|clearly|ahead|over[- ]?performs?"
    r"|under[- ]?performs?|gaps?|significant(?:ly)?|differ(?:s|ed|ence|ences)?|between"
    # a verdict stated of the things named: a claim's outcome, whatever it compares
    r"|holds?|held|reversed|decided|confirm(?:s|ed)?|support(?:s|ed)?|shown|proves?|proven)\b",
    re.IGNORECASE,
)
#: How often the main job reads one way, counted by hand: "9 of 10 read", "nine of ten releases read better".
_COUNT = r"(?:\d+|one|two|three|four|five|six|seven|eight|nine|ten|all|none)"
RELIABILITY = re.compile(
    rf"\b{_COUNT} of (?:the )?{_COUNT}\b[^.;]{{0,40}}?\b"
    r"(?:reads?(?=\s*(?:[.;,]|$))|reads? \W?(?:better|not)|better|distinguishable)",
    re.IGNORECASE,
)
#: A paper's citation key names a method ("Zhou et al. 2025 (Square-χPO)"): a citation, not a mention.
CITATION = re.compile(r"\b[A-Z][\w-]+ et al\.? \d{4}(?: \([^)]*\))?")
#: A statement that attributes what it says to a paper states the paper's result, not ours.
PAPERS_SAY = re.compile(r"et al\.? \d{4}[^.;]*?\b(reports?|claims?|poses?|proves?|Thm|Theorem|Eq|Alg|App)\b")


@functools.cache
def names() -> dict[str, tuple[str, re.Pattern]]:
    """Name → (kind, pattern): each method of the methods table, each arm's privacy setting and β in any study design
    (an arm is a method at its settings), and the two policies the main job compares."""
    from dataclasses import fields

    from squarechipo.losses import METHOD_NAMES
    from squarechipo.reproduce.study.design import StudyDesign, load_design

    found = {name: ("method", re.escape(name)) for name in METHOD_NAMES.values()}
    designs = [StudyDesign(), *(load_design(p) for p in sorted((ROOT / "recipes/studies").glob("*.yaml")))]
    settings: set[tuple[str, float]] = set()
    for design in designs:
        settings |= {("β", float(v)) for v in [getattr(design, "beta", None)] if isinstance(v, (int, float))}
        for arm in design.main_arms:
            values = {f.name: getattr(arm, f.name) for f in fields(arm)}
            settings |= {(symbol, float(values[key])) for symbol, key in (("ε", "epsilon"), ("β", "beta"))
                         if isinstance(values.get(key), (int, float))}  # fmt: skip
            settings |= {(symbol, float(v)) for symbol, v in re.findall(r"([εβ])\s*=\s*(\d+(?:\.\d+)?)", arm.label)}
    for symbol, value in settings:
        if value != float("inf"):
            kind, written = ("privacy" if symbol == "ε" else "beta"), re.escape(f"{value:g}")
            found[f"{symbol} = {value:g}"] = (kind, rf"{symbol}\s*=?\s*{written}(?!\d|\.\d)")
    found |= {
        # Clean labels are the reference every private arm is measured against: named with a method, two arms.
        "clean labels": ("reference", r"clean(?: labels| arm| gain)?"),
        # The SFT policy, not the SFT step, rows or model that make it.
        "SFT": (
            "policy",
            r"SFT(?: policy)?(?!'s| (?:step|steps|rows?|data|trainer|stage|model|samples|LoRA|adapter|set-up))",
        ),
        "the main job": ("policy", r"(?:the )?main job(?:'s (?:policy|alignment))?(?!'s)"),
        "the aligned policy": ("policy", r"(?:aligned|trained|private|our) polic(?:y|ies)"),
    }
    return {name: (kind, re.compile(rf"(?<![\w-]){pattern}(?![\w-])")) for name, (kind, pattern) in found.items()}


def named(statement: str) -> set[str]:
    """The methods, arms and policies ``statement`` names (a longer name first: Square-χPO is not also χPO)."""
    found, rest = set(), CITATION.sub(" ", statement)
    for name, (_, pattern) in sorted(names().items(), key=lambda item: -len(item[0])):
        if pattern.search(rest):
            found.add(name)
            rest = pattern.sub(" ", rest)
    return found


@functools.cache
def against() -> re.Pattern:
    """A named method or policy set against another: "over DPO", "versus clean labels", "relative to SFT" (a metric's
    name, "gain over SFT", "win rate over SFT", is not a comparison)."""
    from squarechipo.losses import METHOD_NAMES

    named = "|".join(re.escape(n) for n in sorted([*METHOD_NAMES.values(), "SFT", "clean"], key=len, reverse=True))
    return re.compile(
        rf"(?<!gain )(?<!win )(?<!rate )\b(?:over|versus|vs\.?|relative to|compared (?:to|with))\s+(?:the\s+)?"
        rf"(?:{named})(?![\w-])",
        re.IGNORECASE,
    )


def two_compared(said: set[str]) -> bool:
    """Whether the names say two things that can be compared: two methods, two privacy settings, two β, two
    policies, or a method and a policy (one method at one setting is one arm)."""
    kinds = [names()[name][0] for name in said]
    methods_and = "method" in kinds and ("policy" in kinds or "reference" in kinds)
    return any(kinds.count(kind) >= 2 for kind in set(kinds)) or methods_and or {"privacy", "reference"} <= set(kinds)


def figures(statement: str) -> list[str]:
    """The numbers of ``statement`` that state an outcome (see SETTING and CONVENTIONS for those that do not)."""
    found = []
    statement = CITATION.sub(" ", statement)
    for match in NUMBER.finditer(statement):
        token = match.group(0)
        if token in CONVENTIONS or token in ("0", "1") or SETTING.search(statement[: match.start()]):
            continue
        if re.match(r"-\d\d-\d\d", statement[match.end() :]) or re.match(
            r"\d{4}-\d\d-$", statement[: match.start()][-8:]
        ):
            continue  # a date
        if COUNTED.match(statement[match.end() :]):
            continue  # a count or a size of what was run
        found.append(token)
    return found


def refused(statement: str) -> str | None:
    """Why a hand-written ``statement`` carries a result (None: it carries none)."""
    if PAPERS_SAY.search(statement) or re.search(r"\bwhether\b", statement):
        return None  # a paper's result, or the question a study asks
    if match := RELIABILITY.search(statement):
        return f"counts the main job's readings by hand ({match.group(0)!r})"
    said = named(statement)
    if not two_compared(said):
        return None
    if numbers := figures(statement):
        return f"names {', '.join(sorted(said))} with figures {numbers}"
    if match := COMPARISON.search(statement) or against().search(CITATION.sub(" ", statement)):
        return f"compares {', '.join(sorted(said))} ({match.group(0)!r})"
    return None


def statements(text: str) -> list[str]:
    """A page's hand-written statements: generated blocks, code, quotes and headings out; each table row, list item
    (a CHANGELOG bullet) and image caption alone; sentences and semicolon clauses split."""
    text = GENERATED.sub("\n\n", text)
    text = re.sub(r"```.*?```", "\n\n", text, flags=re.S)
    text = re.sub(r"(?m)^#+ .*$", "\n\n", text)
    found = [alt for alt in re.findall(r"!\[([^\]]*)\]", text)]
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.splitlines()
        rows = [i for i, line in enumerate(lines) if line.strip().startswith("|")]
        headers = {i - 1 for i in rows if re.fullmatch(r"[|\s:-]+", lines[i].strip())}
        found += [lines[i] for i in rows if i not in headers and not re.fullmatch(r"[|\s:-]+", lines[i].strip())]
        prose = "\n".join(line for i, line in enumerate(lines) if i not in rows)
        for item in re.split(r"\n(?=\s*(?:[-*] |\d+\. ))", prose):  # each list item (a CHANGELOG bullet) alone
            found += sentences(item)
    return [s for s in found if s.strip()]


def sentences(block: str) -> list[str]:
    block = re.sub(r"^\s*(?:[-*]|\d+\.) ", "", block)  # a list item's marker
    block = re.sub(r"`[^`]*`", " ", block.replace("\n", " "))
    block = re.sub(r"\"[^\"]*\"|“[^”]*”", " ", block)
    block = re.sub(r"\b(et al|e\.g|i\.e|vs|Alg|App|Eq|Sec|Fig|Thm)\.", r"\1", block)
    return [s.strip() for s in re.split(r"(?<=[.;!?])\s+(?=\S)|;\s+", block) if s.strip()]


def source_statements(path: Path) -> list[str]:
    """A Python file's statements: each docstring and comment block alone, split into sentences, and each plot
    caption (a string given to a title, a label or a legend)."""
    from tests.helpers.prose import source_prose

    found = [s for paragraph in source_prose(path).split("\n\n") for s in sentences(paragraph)]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("set_title", "suptitle", "set_xlabel", "set_ylabel", "title", "xlabel", "ylabel",
                                  "text", "annotate", "figtext"):  # fmt: skip
                found += [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            found += [k.value.value for k in node.keywords if k.arg in ("label", "title")
                      and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)]  # fmt: skip
    return found


def hand_written_results(text: str) -> list[tuple[str, str]]:
    """(statement, why) for each hand-written statement of ``text`` that carries a result."""
    return [(s, why) for s in statements(text) if (why := refused(s))]
