"""The docs cannot rot: every command of every ``bash`` block in README.md and docs/*.md runs, at tiny sizes.

The pages run in reading order in one working folder holding a copy of ``recipes/``, ``eval/`` and
``benchmarks/``, a tiny random model with the real tokenizer (``tiny/``), and a tiny reproduction scale. Right
before a command runs, the YAML configs it names are shrunk in the copy (the embedded model, or a model folder
that does not exist, becomes ``tiny``; rows, lengths and steps become small), so the commands run exactly as written. A
few flags that only set sizes are shrunk too (``SIZES``). Commands that need what a test machine lacks (GPUs,
an LLM server, hours) are listed in ``NOT_RUN`` with the reason; each of those is still checked to name files
that exist. The training audit is run at confidence 1 − 1e-4 (``SIZES``): its verdict is a random draw, and the
page's test checks that the command runs and reports, not a draw.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.helpers.launch import launch

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: Every page a reader is given: the README and every page of docs/ (found, not listed).
PAGES = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
#: A command matching the pattern is not run, for the reason given.
NOT_RUN = {
    r"^bash scripts/(quickstart|test)\.sh": "the README's two commands: CI runs the tests; the main job is timed",
    r"^pip install \.": "tests/test_wheel.py installs the built wheel into a fresh environment",
    r"--config_file recipes/accelerate/ddp\.yaml": "a GPU accelerate config",
    r"benchmarks/gpu_check\.sh(?!.*--dry-run)": "needs a GPU; the dry run below runs the same steps on the CPU",
    r"benchmarks/gpu_check\.sh --dry-run": "tests/test_gpu_check.py runs the dry run and checks every step's record",
    r"benchmarks/gpu_bundle\.sh": "tests/test_gpu_check.py builds a bundle (without the wheels' download)",
    r"\.\.\.": "an elided command (its options are documented around it)",
    r"--full": "the full grid takes hours",
    r"--scale paper(?!.*--dry-run)": "the paper's sizes need a GPU (the dry run below checks the plan)",
    # Run elsewhere through the same entry point, with stronger checks (merged there to save their minutes):
    r"reproduce study (pilot|main|report)": "tests/test_study.py runs pilot, main and report --readme in order",
    r"reproduce study amend": "tests/test_study.py amends a hand-made pilot's plan through this command",
    r"audit training .*--leak sft": "tests/test_audit.py runs the training audit with the SFT leak",
    r"reproduce table1 --scale cpu(?!.*--dry-run)": "tests/test_reproduce.py runs table1 end to end, then resumes it",
    r"-m squarechipo\.sim --smoke$": "the lab's first command above already runs at --smoke in this test",
    r"db\.example\.org|^createdb ": (
        "needs a team's PostgreSQL server: tests/test_team_registry.py runs init, grant, migrate and the releases "
        "against a real one; the page's one-machine server runs here"
    ),
    r"^python recipes/gold_judge\.py --config recipes/configs/gold_judge\.yaml$": (
        "the README's `squarechipo gold-judge` runs this config earlier in this test; "
        "tests/test_judge_reward_model.py runs recipes/gold_judge.py and checks it beats chance on held-out pairs"
    ),
    r"^torchrun --nproc_per_node 2 recipes/train\.py --config recipes/configs/square_chipo\.yaml$": (
        "tests/test_recipes.py runs recipes/train.py under torchrun in two gloo processes and checks both ranks train "
        "on the same released labels"
    ),
}
SMALL_DATA = ["--rows", "140", "--sft-rows", "40", "--judge-rows", "40"]
#: Size flags shrunk for the test: pattern → replacement.
SIZES = [
    (r"((?:squarechipo data finance|-m data_gen\.finance) --out data)", r"\1 " + " ".join(SMALL_DATA)),
    (r"--samples \d+", "--samples 20000"),
    # tests/test_recipes.py's two-process fixture runs the README's `squarechipo train … --num_processes 2` as written.
    (r"^(squarechipo train .*)--num_processes 2", r"\1--num_processes 1"),
    (r"--scale cpu", "--scale tiny_scale.yaml"),
    (r"(-m squarechipo\.sim)(?!.*--(smoke|full))", r"\1 --smoke"),
    (r"bench_privatize\.py", "bench_privatize.py --labels 100000 --rows 2000 --repeats 1"),
    # Two trainers in their own processes (the dry run below builds every trainer and checks ours against TRL's loss).
    (
        r"bench_trainer\.py(?!.*--dry-run)",
        "bench_trainer.py --models tiny --steps 1 --checkpointing off --runners trl_sigmoid ours_square_chipo"
        " --batch 2 --max-length 64",
    ),
    (r"bench_lineage\.py", "bench_lineage.py --layers 2 --hidden 256"),
    (r"bench_release\.py", "bench_release.py --rows 2000 --compare-minhash 600"),
    # PostgreSQL's side runs against a real server in tests/test_team_registry.py; the page's command runs on SQLite.
    (r"bench_registry\.py", "bench_registry.py --rows 2000 --earlier 2 --engines sqlite"),
    (r"bench_sft\.py", "bench_sft.py --model tiny --steps 1 --batch 2 --max-length 64"),
    (
        r"bench_mfu\.py",
        "bench_mfu.py --model tiny --batch 2 --max-length 64 --generate 4 --new-tokens 4 --repeats 1 --float32-only"
        " --kinds native",
    ),
    (r"(squarechipo gold-report .*)", r"\1 --max_eval_samples 4"),
    (r"bench_judge\.py", "bench_judge.py --pairs 4 --reward-model tiny_judge --model tiny"),
    # The small data's train split holds 119 rows: 16 training rows and 40 canaries after them. The release draws
    # fresh noise each run, so at the page's 95% an honest run is refuted with a chance of up to 5% (a CI run got
    # 10 of its 10 most confident guesses right): the test audits at 1 - 1e-4, which no honest run fails.
    (r"(-m squarechipo\.audit training)(?!.*--canaries)", r"\1 --canaries 40 --alpha 1e-4"),
]
#: What a page promises a command makes, checked after it runs: a pattern of the command → files (globs, relative to
#: the working folder) that must exist, and patterns its standard output must match.
PROMISES = {
    r"finance --out data": (["data/finance_preference_conversational/dataset_dict.json", "data/jsonl/*/train.jsonl"],
                            []),
    r"sft(\.py)? --config recipes/configs/sft\.yaml": (["outputs/sft/model.safetensors",
                                                      "outputs/sft/squarechipo_privacy.json"], []),
    r"--output_dir outputs/training/square_chipo": (["outputs/training/square_chipo/model.safetensors",
                                                     "outputs/training/sft/model.safetensors"], []),
    r"train(\.py)? --config recipes/configs/square_chipo\.yaml(?!.*--output_dir)": (
        ["outputs/square_chipo/model.safetensors", "outputs/square_chipo/squarechipo_privacy.json",
         "outputs/square_chipo/released_train/squarechipo_release.json"], []),
    r"gold[-_]judge(\.py)? --config": (["outputs/gold_judge/gold_judge.json", "outputs/gold_judge/model.safetensors"],
                                      []),
    r"gold-report": ([], [r"gold reward gain over SFT: [+-]\d\.\d{3} \[[+-]\d\.\d{3}, [+-]\d\.\d{3}\]",
                          r"gold expected win rate vs SFT: \d+\.\d% \[", r"\nreading: \w"]),
    r"preference_model\.yaml": (["outputs/general/preference_model/squarechipo_privacy.json"], []),
    r"self_play\.yaml": (["outputs/general/self_play/mixture.json",
                          "outputs/general/self_play/iterate_2/*.safetensors"], []),
    r"eval/judge\.py --policy": (["outputs/eval/square_chipo_ctl/seed0/summary.json",
                                  "outputs/eval/square_chipo_ctl/seed0/judgments.jsonl"], [r"win rate"]),
    r"eval/aggregate\.py": (["outputs/eval/table/table.md", "outputs/eval/table/table.json"], [r"CTL"]),
    r"select_policy\.yaml": (["outputs/quickstart/selected/squarechipo_privacy.json"], []),
    r"table1 --scale cpu --dry-run": ([], [r"\d+ cells \(\d+ to run\); expected about \d+ min"]),
    r"study --help": ([], [r"pilot"]),
    r"audit mechanisms": (["outputs/audit/mechanisms.md"], []),
    r"audit training": (["outputs/audit_s3_none/training_audit.json", "outputs/audit_s3_none/training_audit.md"], []),
    r"-m squarechipo\.sim$": (["outputs/sim/smoke/bandit.csv", "outputs/sim/smoke/*.png"], []),
    r"bench_privatize\.py": ([], [r"randomized_response, [\d,]+ labels: \d+\.\d+ s",
                                  r"release_dataset .*rows: \d+\.\d+ s"]),
    r"bench_trainer\.py": ([], [r"trl_sigmoid\s+\d+\.\d+", r"ours_square_chipo\s+\d+\.\d+"]),
    r"bench_lineage\.py": ([], [r"lineage of an unrecorded model .* \d+\.\d{3} s"]),
    r"bench_judge\.py": ([], [r"judgments/s"]),
    r"bench_release\.py": ([], [r"2,000 distinct rows: release \d+\.\d s wall, \d+\.\d s CPU",
                                r"words-fmix64/1 \(numpy .*; 200 of 200 planted near-copies found",
                                r"MinHash signatures and LSH keys: \d+\.\d\d s wall",
                                r"ledger: \d+\.\d\d MB", r"checking the signature \d+\.\d ms"]),
    r"shards copies": (["copies.json"], [r"\d+ of \d+ rows copy an earlier row \(\d+ exactly, \d+ as near-copies\)"]),
    r"shards split": (["shards/part-2.parquet"], [r"wrote \d+ rows of data/finance_preference as 3 shards"]),
    r"bench_registry\.py": ([], [r"sqlite: 2 earlier releases of 2,000 rows entered in \d+\.\d s; one more entered"]),
    r"registry server start": ([], [r"custodian: postgresql://custodian@localhost:54329/squarechipo"]),
    r"registry show --url": ([], [r'"registry": "postgresql://custodian@localhost:54329/squarechipo"']),
    r"registry grant --url postgresql://postgres@localhost": ([], [r'GRANT SELECT ON .* TO "analyst"']),
}  # fmt: skip
_MODEL_KEYS = ("model_name_or_path", "ref_model")
_SMALL = {"max_train_samples": 16, "max_eval_samples": 4, "max_samples": 8, "max_length": 512, "num_train_epochs": 1,
          "max_prompts": 4, "responses_max_new_tokens": 8, "train_rows_from": 16}  # fmt: skip
#: A training config (one with ``num_train_epochs``) trains this many steps at most.
_MAX_STEPS = 2


def commands(page: Path) -> list[str]:
    """The commands of a page's bash blocks: continuation lines joined, comments dropped."""
    found, inside = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = line.strip() == "```bash"
            continue
        if inside:
            found.append(line)
    joined = re.sub(r"\\\n\s*", " ", "\n".join(found))
    return [c for c in (re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines()) if c and c[0] != "#"]


#: What a Python block's sizes become in the test: pattern → replacement (the model, rows and steps).
PYTHON_SIZES = [
    (r'resolve_model_path\("embedded"\)', 'resolve_model_path("tiny")'),
    (r"max_steps=\d+", "max_steps=1"),
]


def python_blocks(page: Path) -> list[str]:
    """The code of a page's ``python`` blocks."""
    return re.findall(r"^```python\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.S | re.M)


def _shrink_config(path: Path, work: Path) -> None:
    config = yaml.safe_load(path.read_text()) or {}
    for key in _MODEL_KEYS:
        value = config.get(key)
        if isinstance(value, str) and (value == "embedded" or not (work / value).exists()):
            config[key] = "tiny"
    if isinstance(config.get("candidates"), list):
        spare = iter(["tiny", "tiny_2", "tiny_3"])  # absent candidates become distinct tiny models
        config["candidates"] = [
            c if c != "embedded" and (work / c).exists() else next(spare) for c in config["candidates"]
        ]
    for key, small in _SMALL.items():
        if key in config:
            config[key] = small if config[key] is None else min(config[key], small)
    if "num_train_epochs" in config:
        config["max_steps"] = min(config.get("max_steps") or _MAX_STEPS, _MAX_STEPS)
    path.write_text(yaml.safe_dump(config, sort_keys=False))


def _argv(command: str, work: Path) -> list[str]:
    for pattern, replacement in SIZES:
        command = re.sub(pattern, replacement, command)
    argv = []
    for word in shlex.split(command):  # the shell would expand globs: so do we, in the working folder
        matches = sorted(str(p.relative_to(work)) for p in work.glob(word)) if "*" in word else []
        argv += matches or [word]
    for index, word in enumerate(argv):
        if word == "--config" and index + 1 < len(argv) and (work / argv[index + 1]).is_file():
            _shrink_config(work / argv[index + 1], work)
    head = argv[0]
    if head in (".venv/bin/python", "python"):
        argv[0] = sys.executable
    elif head in ("accelerate", "torchrun", "squarechipo"):
        argv[0] = str(BIN / head)
    return argv


#: The pages a reader follows in order, in one account and one folder (the documented day): README → training →
#: privacy → a team → evaluation. Each page's examples use rows of their own or reuse what an earlier page released,
#: so no command's release blocks a later one. Every other page needs only the data and runs in a folder of its own.
CHAIN = ("README.md", "docs/training.md", "docs/privacy.md", "docs/team.md", "docs/evaluation.md")


def _make_work(folder: Path, tokenizer) -> Path:
    from tests.helpers.models import make_tiny_classifier, make_tiny_model

    for name in ("recipes", "benchmarks", "eval"):
        shutil.copytree(ROOT / name, folder / name)
    shutil.copy(ROOT / "README.md", folder / "README.md")
    for seed, name in enumerate(("tiny", "tiny_2", "tiny_3")):
        make_tiny_model(tokenizer, seed=seed).save_pretrained(folder / name)
        tokenizer.save_pretrained(folder / name)
    make_tiny_classifier(tokenizer).save_pretrained(folder / "tiny_judge")
    tokenizer.save_pretrained(folder / "tiny_judge")
    (folder / "tiny_scale.yaml").write_text("base: tiny\nbase_model: tiny\nlearning_rate: 1.0e-3\n")
    return folder


@pytest.fixture
def work(tmp_path_factory, tokenizer):
    """A fresh working folder holding the README's data, made in this process by the README's own generator at the
    tests' small size."""
    from squarechipo.scripts.data import main as make_data

    folder = _make_work(tmp_path_factory.mktemp("docs"), tokenizer)
    make_data(["--out", str(folder / "data"), *SMALL_DATA])
    return folder


def _check_promises(page: str, command: str, work: Path, stdout: str) -> None:
    for pattern, (files, printed) in PROMISES.items():
        if re.search(pattern, command):
            missing = [f for f in files if not list(work.glob(f))]
            assert not missing, f"{page}: `{command}` ran but did not make {missing}"
            absent = [p for p in printed if not re.search(p, stdout)]
            assert not absent, f"{page}: `{command}` did not print {absent}:\n{stdout[-2500:]}"


#: docs/team.md's one-machine server: its commands run where a PostgreSQL server can start (as
#: tests/test_team_registry.py's do).
LOCAL_SERVER = r"registry server|@localhost:54329/"


def _run_page(page: str, work: Path, env: dict | None = None) -> None:
    from squarechipo.data.local_server import available

    env = env or {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    ran, excluded = 0, 0
    for command in commands(ROOT / page):
        reason = next((why for pattern, why in NOT_RUN.items() if re.search(pattern, command)), None)
        reason = reason or (available() if re.search(LOCAL_SERVER, command) else None)
        argv = _argv(command, work)
        named = [w for w in argv if re.match(r"^(recipes|benchmarks|eval|scripts|docs)/\S+\.(py|yaml|sh|md)$", w)]
        missing = [w for w in named if not (ROOT / w).exists()]
        assert not missing, f"{page}: `{command}` names files that do not exist: {missing}"
        if reason:
            excluded += 1
            continue
        started = time.perf_counter()
        done = launch(argv, cwd=work, env=env, timeout=1200)
        print(f"{page}: {time.perf_counter() - started:.1f} s `{command}`")  # the suite's budget, per command (-s)
        assert done.returncode == 0, f"{page}: `{command}` failed:\n{done.stdout[-2500:]}\n{done.stderr[-2500:]}"
        _check_promises(page, command, work, done.stdout)
        ran += 1
    assert ran or excluded, f"{page}: no command ran"


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("page", [p for p in PAGES if p not in CHAIN and commands(ROOT / p)])
def test_every_command_of_the_page_runs(page, work):
    _run_page(page, work)


def _fresh_machine_env(folder: Path) -> dict:
    """The environment of a machine no release, key or record ever touched (its folder: ``folder``)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}  # warnings shown, as users see them
    env.pop("PYTHONWARNINGS", None)
    env["SQUARECHIPO_TEST_MACHINE_DIR"] = str(folder)
    for variable in ("SQUARECHIPO_RELEASE_REGISTRY", "SQUARECHIPO_RECORD_STORE", "SQUARECHIPO_SIGNING_KEY"):
        env.pop(variable, None)
    return env


def _run_python_blocks(page: str, work: Path, env: dict) -> None:
    """Each Python block as written (the model and steps shrunk); the README's twice, as a reader runs it again: the
    second run reuses the first one's release (the same marker, no fresh noise) and saves the model again."""
    for index, code in enumerate(python_blocks(ROOT / page)):
        for pattern, replacement in PYTHON_SIZES:
            code = re.sub(pattern, replacement, code)
        script = work / f"block_{index}.py"
        script.write_text(code)
        before = None
        for run in range(2 if page == "README.md" else 1):
            done = launch([sys.executable, str(script)], cwd=work, env=env, timeout=600)
            failed = (
                f"{page}: python block {index}, run {run + 1}, failed:\n{done.stdout[-2500:]}\n{done.stderr[-2500:]}"
            )
            assert done.returncode == 0, failed
            if page == "README.md":
                marker = work / "outputs" / "in_python" / "released" / "squarechipo_release.json"
                assert before is None or marker.read_bytes() == before, "the second run drew another release"
                before = marker.read_bytes()
                assert (work / "outputs" / "in_python" / "squarechipo_privacy.json").is_file()


#: The common mistakes of a first day, each with what its one line must name: (argv of `squarechipo`, the fix).
#: The job's own process checks the last group, so they run through the job's entry point (script_main).
LAUNCHER_MISTAKES = [
    (
        ["train", "--config", "recipes/configs/square_chipo.yaml", "--lable_epsilon", "2"],
        r"did you mean --label_epsilon",
    ),
    (["train", "--config", "recipes/configs/typo.yaml"], r"did you mean --label_epsilon"),
    (
        ["train", "--config", "recipes/configs/square_chipo.yaml", "--accelerate_config", "zero9"],
        r"not one of the configs that ship with squarechipo \(cpu, ddp, fsdp2, zero2, zero3\)",
    ),
    (
        ["train", "--config", "recipes/configs/square_chipo.yaml", "--method", "square_chpo"],
        r"invalid choice: 'square_chpo' \(choose from .*'square_chipo'",
    ),
    (
        ["train", "--config", "recipes/configs/squre_chipo.yaml"],
        r"no such file or folder: recipes/configs/squre_chipo",
    ),
    (["trian"], r"no command 'trian': did you mean 'train'\? squarechipo --help lists the commands"),
    (
        [
            "gold-report",
            "--policy",
            "outputs/square_chipoo",
            "--sft",
            "outputs/sft",
            "--gold",
            "outputs/gold_judge",
            "--dataset_name",
            "data/finance_preference_conversational",
        ],
        r"--policy outputs/square_chipoo: no such model",
    ),
]
JOB_MISTAKES = [
    (["--config", "recipes/configs/raw.yaml"], r"Release them \(label_epsilon: .*train_labels_public: true"),
    (["--config", "recipes/configs/square_chipo.yaml", "--model_name_or_path", "outputs/sfft"],
     r"model outputs/sfft: no such folder\. Check the path, or make the model first"),
    (["--config", "recipes/configs/square_chipo.yaml", "--dataset_train_split", "trian"],
     r"has no split 'trian' .*set dataset_train_split to one of them"),
    (["--config", "recipes/configs/square_chipo.yaml", "--label_epsilon", "-1"], r"epsilon must be > 0"),
    (["--config", "recipes/configs/square_chipo.yaml", "--report_to", "no_such_tracker"], r"no such tracker \(known:"),
]  # fmt: skip


def _one_line(call, capsys) -> str:
    """What a failing command printed: exactly one line on stderr, no traceback, and a failing exit code."""
    try:
        code = call()
    except SystemExit as exit:
        code = exit.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code not in (0, None) and len(lines) == 1 and "Traceback" not in err, (code, err[-3000:])
    return lines[0]


def _make_mistakes(work: Path, env: dict, capsys, monkeypatch) -> None:
    import squarechipo.cli
    from squarechipo.scripts import train
    from squarechipo.scripts._common import script_main

    config = yaml.safe_load((work / "recipes/configs/square_chipo.yaml").read_text())
    typo = {("lable_epsilon" if key == "label_epsilon" else key): value for key, value in config.items()}
    (work / "recipes/configs/typo.yaml").write_text(yaml.safe_dump(typo))
    raw = {key: value for key, value in config.items() if not key.startswith("label_")}
    (work / "recipes/configs/raw.yaml").write_text(yaml.safe_dump({**raw, "output_dir": "outputs/raw"}))
    monkeypatch.chdir(work)
    capsys.readouterr()  # what the day printed so far
    for argv, fix in LAUNCHER_MISTAKES:
        line = _one_line(lambda argv=argv: squarechipo.cli.main(argv), capsys)
        assert line.startswith(f"squarechipo{' ' + argv[0] if len(argv) > 1 else ''}: error: "), line
        assert re.search(fix, line), (argv, line)
    for argv, fix in JOB_MISTAKES:
        line = _one_line(lambda argv=argv: script_main(train.main, train.make_parser, "train", argv), capsys)
        assert line.startswith("squarechipo train: error: ") and re.search(fix, line), (argv, line)
    # Through the real launcher (Accelerate's process and the job's), the same one line:
    # tests/test_recipes.py::test_an_error_inside_a_training_job_reaches_the_user_as_the_jobs_one_line.


@pytest.mark.slow
@pytest.mark.integration
def test_the_documented_day_runs_in_order_on_a_fresh_machine(tmp_path_factory, tokenizer, capsys, monkeypatch):
    """The first day as a new user lives it, in one folder on a machine no release, key or record touched: the README's
    Python example twice, its commands, a 1-step smoke test of its training command twice, the common mistakes (each
    answered by one line that names the fix), then docs/training.md and docs/evaluation.md, which use what the README
    made. The examples once collided, a re-run was refused, a smoke test's unchanged weights were recorded as trained
    on its rows so the same command was refused, and a mistake ended in 40-126 lines of tracebacks."""
    work = _make_work(tmp_path_factory.mktemp("docs_day"), tokenizer)
    machine = work / "machine"
    env = _fresh_machine_env(machine)
    from squarechipo.scripts.data import main as make_data

    make_data(["--out", str(work / "data"), *SMALL_DATA])
    _run_python_blocks("README.md", work, env)
    assert (machine / "releases.sqlite").is_file() and (machine / "signing_key.pem").is_file()  # started, and said so
    _run_page("README.md", work, env)
    smoke = _argv("squarechipo train --config recipes/configs/square_chipo.yaml --max_steps 1", work)
    marker = work / "outputs" / "square_chipo" / "released_train" / "squarechipo_release.json"
    released = marker.read_bytes()  # the README's `squarechipo train` drew it
    for run in range(2):  # warm-up makes step 1's learning rate 0: no weight changes, and the re-run is not refused
        done = launch(smoke, cwd=work, env=env, timeout=600)
        assert done.returncode == 0, f"smoke test, run {run + 1}:\n{done.stdout[-2000:]}\n{done.stderr[-2500:]}"
        assert marker.read_bytes() == released, "a re-run drew fresh noise"  # the same release, reused
    _make_mistakes(work, env, capsys, monkeypatch)
    try:
        for page in CHAIN[1:]:
            _run_page(page, work, env)
    finally:  # a page that failed between docs/team.md's server start and stop leaves no server behind
        if (work / "team_db").exists():
            from squarechipo.data.local_server import stop_local_server

            stop_local_server(work / "team_db")


def test_every_python_block_is_on_a_page_the_documented_day_runs():
    """Python blocks run in the documented day (the README's twice): a page outside it would hold untested code."""
    assert not [p for p in PAGES if p not in CHAIN and python_blocks(ROOT / p)], "add the page to CHAIN"
    assert python_blocks(ROOT / "README.md")


def test_every_command_left_out_is_on_a_page_and_its_stand_in_test_exists():
    """An exclusion outliving its command would hide the next command it matches; one naming a test file that was
    renamed would point at nothing."""
    every = [command for page in PAGES for command in commands(ROOT / page)]
    for pattern, why in NOT_RUN.items():
        assert any(re.search(pattern, command) for command in every), f"NOT_RUN {pattern!r} matches no command"
        for named in re.findall(r"tests/\w+\.py", why):
            assert (ROOT / named).is_file(), f"NOT_RUN {pattern!r}: {named} does not exist"
