"""The house rules that keep the package readable: imports flow one way, functions stay short, recipes
import the installed package."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "squarechipo"

#: The pipeline's order (README "Layout"): a package may import only itself and those before it.
LAYERS = (
    "_lazy",  # the re-exports of package __init__ files, resolved on first use
    "stats",
    "trust",  # the machine folder, keys and seals: what every record is sealed with, knowing nothing of rows
    "data",
    "privacy",
    "losses",
    "models",
    "trainer",
    "reward",
    "select",
    "judge",
    "evaluation",
    "sim",
    "reproduce",
    "audit",
    "scripts",  # every command's main(): the entry points sit on top of the library
    "cli",
)
MAX_FUNCTION_LINES = 60
#: A module longer than this does more than one job: split it by concern.
MAX_MODULE_LINES = 500
#: A longer function carries a comment starting with this marker that says why it is long.
LONG_FUNCTION_MARKER = "# Long:"


def _layer(module: str) -> str:
    parts = module.split(".")
    if parts[-1] == "__main__":  # `python -m squarechipo.<package>`: in its package's layer (no shim above it)
        return parts[1] if len(parts) > 2 else "cli"
    return parts[1] if len(parts) > 1 and parts[0] == "squarechipo" else ""


def _imported_modules(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path`` (relative imports resolved)."""
    package = list(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    source = path.read_text(encoding="utf-8") if source is None else source
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module))
    return found


def _package_sources() -> list[Path]:
    """Every module but the top-level ``__init__`` (which re-exports the public API)."""
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def test_every_package_is_in_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    packages |= {p.stem for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    assert packages == set(LAYERS), f"add new packages to LAYERS in their pipeline position: {packages ^ set(LAYERS)}"


def test_imports_flow_one_way_through_the_layers():
    """data → privacy → losses → models → trainer → reward → select → judge → evaluation → sim: no package imports
    one after it, so the graph has no cycles. Recipes, eval scripts and tests sit on top."""
    violations = _against_the_order(_package_sources(), _layer, LAYERS)
    assert not violations, "imports against the layer order:\n" + "\n".join(violations)


def _against_the_order(paths, part_of, order: tuple[str, ...]) -> list[str]:
    """Each import of a module whose part (``part_of``) comes after the importing module's own in ``order``."""
    violations = []
    for path in paths:
        own = part_of("squarechipo." + ".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        for line, module in _imported_modules(path):
            target = part_of(module)
            if target and target != own and order.index(target) > order.index(own):
                violations.append(f"{path.relative_to(ROOT)}:{line} ({own}) imports {module} ({target})")
    return violations


#: Inside privacy/, the same rule: the mechanisms know nothing of a ledger, the ledger nothing of a release, the door
#: (which reads a ledger) nothing of the release that writes one, and provenance (records of trained models) sits last.
PRIVACY_LAYERS = ("_lazy", "mechanisms", "ledger", "door", "release", "provenance")


def _privacy_part(module: str) -> str:
    parts = module.split(".")
    if parts[:2] != ["squarechipo", "privacy"]:
        return ""
    return "_lazy" if len(parts) == 2 else parts[2]


def test_imports_flow_one_way_inside_privacy():
    parts = {p.name for p in (PACKAGE / "privacy").iterdir() if (p / "__init__.py").exists()}
    parts |= {p.stem for p in (PACKAGE / "privacy").glob("*.py") if p.name != "__init__.py"}
    assert parts == set(PRIVACY_LAYERS) - {"_lazy"}, f"place {parts ^ set(PRIVACY_LAYERS[1:])} in PRIVACY_LAYERS"
    lazy = PACKAGE / "privacy" / "__init__.py"  # the lazy re-exports of the public names
    paths = [p for p in sorted((PACKAGE / "privacy").rglob("*.py")) if p != lazy]
    violations = _against_the_order(paths, _privacy_part, PRIVACY_LAYERS)
    assert not violations, "imports against the order inside privacy/:\n" + "\n".join(violations)


def test_the_layer_check_sees_a_violation():
    """The walker itself: absolute and relative imports of a later layer from a data module are both seen."""
    probe = PACKAGE / "data" / "probe.py"  # parsed from the string below, never written
    source = "from squarechipo.trainer import SquareChiPOTrainer\nfrom ..select import selector\n"
    modules = [module for _, module in _imported_modules(probe, source)]
    assert modules == ["squarechipo.trainer", "squarechipo.select"]
    assert all(LAYERS.index(_layer(m)) > LAYERS.index("data") for m in modules)


def _long_functions(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            body = lines[node.lineno - 1 : node.end_lineno]
            if length > MAX_FUNCTION_LINES and not any(line.strip().startswith(LONG_FUNCTION_MARKER) for line in body):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    return found


@pytest.mark.parametrize("folder", ["squarechipo", "recipes", "eval", "data_gen"])
def test_no_function_is_long_without_a_reason(folder):
    long = [hit for path in sorted((ROOT / folder).rglob("*.py")) for hit in _long_functions(path)]
    assert not long, (
        f"functions over {MAX_FUNCTION_LINES} lines: split them, or say why in a '{LONG_FUNCTION_MARKER}' comment:\n"
        + "\n".join(long)
    )


def test_no_module_is_long():
    long = [
        f"{path.relative_to(ROOT)} ({n} lines)"
        for path in _package_sources()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines: split them by concern:\n" + "\n".join(long)


def test_scripts_import_the_installed_package():
    """No ``sys.path.insert`` hacks: scripts/install.sh installs the package (editable) into the venv."""
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("recipes", "eval", "benchmarks", "tests", "scripts")
        for path in (ROOT / folder).rglob("*.py")
        if "sys.path.insert(" in path.read_text(encoding="utf-8") and path.name != "test_architecture.py"
    ]
    assert not offenders, f"remove sys.path.insert from {offenders}"


#: A citation: "Surname et al. YEAR (key" on one line; the key ends at its first "," or ")".
CITATION = re.compile(r"\b([A-Z][a-z]+) et al\. (\d{4}) \(([^(),]+)[),]")
#: Any mention of "et al.", even one broken over lines or without a year.
ET_AL = re.compile(r"\b[A-Z][a-z]+\s+et\s+al\.")


def _reference_keys() -> set[str]:
    text = (ROOT / "docs" / "references.md").read_text()
    return set(re.findall(r"Cited as\s+\*([^*]+)\*", text.replace("\n  ", " ")))


def _citation_problems(text: str, keys: set[str]) -> list[str]:
    problems = []
    for mention in ET_AL.finditer(text):
        line = text.count("\n", 0, mention.start()) + 1
        cited = CITATION.match(text, mention.start())
        if cited is None:
            problems.append(f"line {line}: {text[mention.start() : mention.start() + 40]!r} is not a whole key")
        elif f"{cited[1]} et al. {cited[2]} ({cited[3]})" not in keys:
            problems.append(f"line {line}: {cited[0]!r} is not a key of docs/references.md")
    return problems


def test_papers_are_cited_by_a_key_of_the_references_on_one_line():
    keys = _reference_keys()
    assert "Zhou et al. 2025 (Square-χPO)" in keys and len(keys) >= 10
    # The check sees a broken key, a missing key and an unknown one.
    assert len(_citation_problems("(Zhou et al.\n2025 (Square-χPO))", keys)) == 1
    assert len(_citation_problems("Zhou et al. 2025, Alg. 3 and Huang et al. 2024 (chi)", keys)) == 2
    assert _citation_problems("(Zhou et al. 2025 (Square-χPO), Alg. 1)", keys) == []
    files = [
        p
        for folder in ("squarechipo", "recipes", "benchmarks", "eval", "data_gen")
        for p in (ROOT / folder).rglob("*.py")
    ]
    problems = [f"{p.relative_to(ROOT)}: {x}" for p in files for x in _citation_problems(p.read_text(), keys)]
    assert problems == [], "\n".join(problems)


def _module_name(path: Path) -> str:
    """``squarechipo.privacy.ledger.binding`` for its file; a package's name for its ``__init__.py`` or its folder."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, set[str]]:
    """Module → the package modules it imports, deferred (function-level) imports included: ``from a.b import c``
    points at ``a.b.c`` where that is a module, else at ``a.b``."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("squarechipo"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name in modules}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a cycle of imports."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_modules_import_each_other_deferred_imports_included():
    """privacy/ledger/binding.py and privacy/ledger/ledger.py imported each other through an import deferred into a
    function, which the layer check (between packages) could not see. Package ``__init__`` files, which re-export, are
    left out."""
    packages = {_module_name(p.parent) for p in PACKAGE.rglob("__init__.py")}
    graph = {m: targets - packages for m, targets in _module_graph().items() if m not in packages}
    assert not _cycles(graph), _cycles(graph)
    probe = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert _cycles(probe) == [["a", "b"]]


def test_importing_the_losses_or_the_package_loads_neither_datasets_nor_the_release_machinery():
    """`import squarechipo.losses` (pure maths) took about 2 s beyond torch: the package __init__ files loaded
    `datasets` and the whole privacy package. Their re-exports now resolve on first use, and every one resolves."""
    import subprocess
    import sys

    probe = (
        "import sys, squarechipo, squarechipo.losses; "
        "print(sorted(m for m in sys.modules if m == 'datasets' or m.startswith(('trl', 'squarechipo.privacy.r'))))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded
    import squarechipo
    import squarechipo.privacy

    for package in (squarechipo, squarechipo.privacy):
        exported = [name for names in package._EXPORTS.values() for name in names]
        assert sorted(set(package.__all__) - {"__version__"}) == sorted(exported)  # each name once
        assert all(getattr(package, name) is not None for name in exported)


def test_mutation_testing_covers_every_trust_privacy_data_and_study_module_with_test_files_that_exist():
    """transaction.py, fingerprint.py and reuse.py were missing from scripts/mutation.sh's table, so the documented
    command could not test them. Every module of trust/, privacy/, data/ and reproduce/study/ is in the table, and
    every test file it names exists."""
    import re

    script = (ROOT / "scripts" / "mutation.sh").read_text()
    block = script[script.index("declare -A TESTS=(") : script.index("declare -A ARGS=(")]
    table = dict(re.findall(r'^\s+\[(squarechipo/[\w/]+\.py)\]="([^"]+)"', block, flags=re.M))
    modules = {
        str(p.relative_to(ROOT))
        for folder in ("squarechipo/trust", "squarechipo/privacy", "squarechipo/data", "squarechipo/reproduce/study")
        for p in (ROOT / folder).rglob("*.py")
        if p.name != "__init__.py"
    }
    assert not modules - set(table), f"not in scripts/mutation.sh's table: {sorted(modules - set(table))}"
    missing = [test for tests in table.values() for test in tests.split() if not (ROOT / test).is_file()]
    assert not missing, missing


def test_every_command_lives_in_scripts_and_no_library_module_parses_arguments():
    """Eight of the eleven tool commands kept their argparse `main()` in library modules. Every `squarechipo`
    command is a module of `scripts/`, or the `cli.py` of a package that runs as `python -m squarechipo.<package>`
    (sim, audit, reproduce: their `__main__.py` then imports nothing above the package); no other module builds an
    argument parser."""
    from squarechipo.cli import TOOLS, TRAINING

    runnable = {p.parent.name for p in PACKAGE.glob("*/__main__.py")}
    assert runnable == {"sim", "audit", "reproduce"}
    assert all(
        module.startswith("squarechipo.scripts.") or module in {f"squarechipo.{name}.cli" for name in runnable}
        for module, _ in TOOLS.values()
    )
    assert all((PACKAGE / "scripts" / f"{module}.py").is_file() for module in TRAINING.values())
    parsers = [
        str(path.relative_to(ROOT))
        for path in _package_sources()
        if path.parent.name != "scripts"
        and path.name not in ("cli.py", "__main__.py")
        and "ArgumentParser(" in path.read_text(encoding="utf-8")
    ]
    assert not parsers, f"argument parsing outside squarechipo/scripts/: {parsers}"


#: Committed model files of the privacy-cost study's set-up (0.3.0): its sealed privacy record and the files beside it
#: are what the outside audit recomputed, so they stay byte for byte; records made since name the home folder "~".
_SEALED_SETUP = "results/privacy_cost/setup/"


def test_results_name_no_folder_of_the_machine_they_ran_on():
    """results/main_job_releases' scripts ran only from /work/wt64 with /work/main's venv. Nothing in results/ names
    a machine's folder (a home, /work, /tmp), so a reader can rerun it from a checkout."""
    machine = re.compile(r"(?<![\w.~])/(?:work|root|home|tmp|Users)/")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "results").rglob("*"))
        if path.is_file()
        and path.suffix in {".sh", ".py", ".md", ".json", ".yaml", ".csv", ".txt"}
        and not str(path.relative_to(ROOT)).startswith(_SEALED_SETUP)
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if machine.search(line)
    ]
    assert not found, f"machine paths in results/: {found[:20]}"


def test_every_module_the_package_or_the_docs_run_with_python_m_runs_when_executed():
    """``python -m squarechipo.data.finance`` did nothing once its ``main()`` moved to ``squarechipo.scripts.data``,
    and the study and table runners, which ran it for their data, went on without any. Each module run with ``-m``
    (in the package's commands, the README and docs) must have a ``__main__`` guard or a ``__main__.py``."""
    texts = [p.read_text(encoding="utf-8") for p in PACKAGE.rglob("*.py")]
    texts += [p.read_text(encoding="utf-8") for p in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))]
    found = (
        m.rstrip(".") for text in texts for m in re.findall(r'(?:"-m",\s*f?"|python -m )(squarechipo[\w.]*)', text)
    )
    named = set(found) - {"squarechipo.scripts"}  # launch.py's f"squarechipo.scripts.{script}": recipe tests run each
    assert {"squarechipo.scripts.data", "squarechipo.reproduce"} <= named

    def runs(module: str) -> bool:
        path = ROOT.joinpath(*module.split("."))
        if (path / "__main__.py").is_file():
            return True
        file = path.with_suffix(".py")
        return file.is_file() and 'if __name__ == "__main__":' in file.read_text(encoding="utf-8")

    assert [m for m in sorted(named) if not runs(m)] == []


#: The most stays the walk of ε may take (it took 39 before issue 99 named the modules for what they hold).
MAX_EPSILON_STAYS = 30


def test_the_walk_of_epsilon_from_the_command_to_the_noise_is_short(tmp_path, tokenizer):
    """Following ε from ``squarechipo train`` to the noise, a reader stays in at most 30 modules in turn (the
    profiler of tests/helpers/epsilon_walk.py on the real command, which it stops at the draw); `-s` prints it."""
    from tests.helpers.epsilon_walk import describe, epsilon_walk

    found = epsilon_walk(tmp_path, tokenizer)
    print(describe(found))
    modules = [stay["module"] for stay in found]
    assert modules[0] == "squarechipo/cli.py", describe(found)
    noise = {"module": "squarechipo/privacy/mechanisms/binary.py", "functions": ["ctl", "randomized_response"]}
    assert found[-1] == noise, describe(found)
    assert "squarechipo/privacy/release/transaction.py" in modules, describe(found)  # through the one release path
    assert len(found) <= MAX_EPSILON_STAYS, describe(found)
    stated = re.search(r"ε passes through (\d+) modules in (\d+) stays", (ROOT / "docs/architecture.md").read_text())
    assert stated and (int(stated[1]), int(stated[2])) == (len(set(modules)), len(found)), describe(found)
