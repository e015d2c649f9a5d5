"""Bad input gets a clear error that names the field or file and the fix (probes of a careless user)."""

from __future__ import annotations

import datasets
import pytest


def test_a_judge_template_without_the_response_fields_names_what_is_missing(tmp_path):
    from squarechipo.judge.templates import JudgeTemplate

    path = tmp_path / "judge.yaml"
    path.write_text('system: be fair\nuser: "{prompt} {response_a}"\n')
    with pytest.raises(ValueError, match=r"judge\.yaml: the `user` message must use .* missing \['response_b'\]"):
        JudgeTemplate.from_file(path)
    path.write_text("system: be fair\n")
    with pytest.raises(ValueError, match=r"the template needs the text fields \['user'\]"):
        JudgeTemplate.from_file(path)
    path.write_text('system: s\nuser: "{prompt} {response_a} {response_b} {{literal}}"\n')
    assert JudgeTemplate.from_file(path).messages("p", "a", "b")[1]["content"] == "p a b {literal}"
    with pytest.raises(ValueError, match="no such file"):
        JudgeTemplate.from_file(tmp_path / "missing.yaml")


def test_a_judge_model_folder_that_does_not_exist_is_named(tmp_path, monkeypatch):
    from squarechipo.judge.reward_model import RewardModelJudge

    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs").mkdir()
    with pytest.raises(ValueError, match=r"--judge-model outputs/gold_judg does not exist: give the folder"):
        RewardModelJudge("outputs/gold_judg")
    with pytest.raises(ValueError, match=r"--judge-model \./outputs is not a model folder \(no config\.json\)"):
        RewardModelJudge("./outputs")


def test_resume_from_checkpoint_true_means_the_last_checkpoint_or_a_clear_error(tmp_path):
    from squarechipo.trainer import SquareChiPOConfig

    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"resume_from_checkpoint='true': .*run holds no checkpoint-N folder"):
        SquareChiPOConfig(output_dir=str(out), resume_from_checkpoint="true", report_to="none")
    (out / "checkpoint-4").mkdir(parents=True)
    (out / "checkpoint-12").mkdir()
    config = SquareChiPOConfig(output_dir=str(out), resume_from_checkpoint="true", report_to="none")
    assert config.resume_from_checkpoint == str(out / "checkpoint-12")
    assert SquareChiPOConfig(output_dir=str(out), resume_from_checkpoint="false").resume_from_checkpoint is None
    with pytest.raises(ValueError, match="is not a folder: give a checkpoint-N folder"):
        SquareChiPOConfig(output_dir=str(out), resume_from_checkpoint=str(out / "checkpoint-99"))


def test_audit_sizes_confidence_and_options_are_checked(capsys):
    from squarechipo.audit.cli import main  # in process: an argument error needs no fresh interpreter

    with pytest.raises(SystemExit) as stopped:
        main(["mechanisms", "--samples", "0"])
    assert stopped.value.code == 2 and "--samples must be a positive number (got 0)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["training", "--config", "unused.yaml", "--alpha", "1"])
    assert stopped.value.code == 2 and "--alpha must be in (0, 1) (got 1.0)" in capsys.readouterr().err
    # An option of the other audit is refused, not ignored (the mechanism audit's confidence is fixed).
    with pytest.raises(SystemExit) as stopped:
        main(["mechanisms", "--alpha", "0.01"])
    assert stopped.value.code == 2 and "unrecognized arguments: --alpha 0.01" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--max_eval_samples", "--samples", "--generation_batch_size", "--max_new_tokens"])
def test_gold_report_sizes_below_one_are_refused_naming_the_flag(flag, capsys):
    from squarechipo.scripts.gold_report import main

    folders = ["--policy", "p", "--sft", "s", "--gold", "g", "--dataset_name", "d"]
    with pytest.raises(SystemExit) as stopped:
        main([*folders, flag, "0"])
    assert stopped.value.code == 2 and f"{flag} 0: must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main([*folders, "--dtype", "bf16"])
    assert stopped.value.code == 2 and "--dtype: invalid choice: 'bf16'" in capsys.readouterr().err
    from squarechipo.evaluation.gold_report import gold_comparison

    with pytest.raises(ValueError, match=r"dtype must be one of bfloat16, float16, float32 \(got 'float64'\)"):
        gold_comparison("p", "s", "g", "d", dtype="float64")  # in Python too, before any folder is read


def test_privatized_dir_pointed_at_raw_data_is_refused_and_left_untouched(tmp_path):
    from squarechipo.privacy import LabelPipeline
    from squarechipo.privacy.release.release_dataset import release_dataset

    rows = datasets.Dataset.from_dict({"prompt": ["p0", "p1"], "chosen": ["a", "c"], "rejected": ["b", "d"]})
    raw = tmp_path / "raw"
    rows.save_to_disk(str(raw))
    before = sorted((p.name, p.stat().st_mtime_ns) for p in raw.iterdir())
    with pytest.raises(ValueError, match=r"looks like raw data, not a release\. privatized_dir is the folder"):
        release_dataset(rows, LabelPipeline(epsilon=1.0), raw, seed=0)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in raw.iterdir()) == before


def test_data_help_lists_the_generators_and_a_missing_generator_is_named(capsys):
    from squarechipo.cli import main

    assert main(["data", "--help"]) == 0
    assert "finance" in capsys.readouterr().out.split("generators:", 1)[1]
    with pytest.raises(SystemExit, match="name a generator") as refused:
        main(["data"])
    assert "finance" in str(refused.value)


def test_train_rows_from_takes_rows_of_its_own_and_refuses_a_start_past_the_split(tmp_path, finance_splits):
    """`train_rows_from` (docs/privacy.md's LP-2ST takes rows 1024-1055, after those the README's command released):
    the rows from that index, max_train_samples of them; a start past the split is refused naming its size."""
    from accelerate import PartialState

    from squarechipo.scripts.script_args import TrainScriptArguments
    from squarechipo.scripts.splits import load_training_splits

    data = finance_splits["finance_preference"]
    data.save_to_disk(str(tmp_path / "data"))
    args = TrainScriptArguments(dataset_name=str(tmp_path / "data"), max_train_samples=5, train_rows_from=7)
    train, _ = load_training_splits(args, str(tmp_path / "out"), PartialState(), with_eval=False, release=False)
    assert train["id"] == data["train"]["id"][7:12]
    args.train_rows_from = len(data["train"])
    with pytest.raises(ValueError, match=rf"train_rows_from={len(data['train'])}: the training split 'train' has"):
        load_training_splits(args, str(tmp_path / "out"), PartialState(), with_eval=False, release=False)


@pytest.mark.slow
@pytest.mark.integration
def test_the_eval_wrappers_end_a_mistake_in_the_commands_one_line(tmp_path, finance_splits):
    """`python eval/judge.py` on raw test labels (no --public_splits) ends in the command's one line, as `squarechipo
    judge` does, not a Python traceback; `--debug` shows the traceback."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    data = tmp_path / "data"
    finance_splits["finance_preference_conversational"].save_to_disk(str(data))
    argv = [sys.executable, str(root / "eval" / "judge.py"), "--policy", "embedded", "--baseline", "embedded",
            "--dataset_name", str(data), "--max_eval_samples", "2", "--out", str(tmp_path / "eval")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("squarechipo judge: error: ") and "public_splits" in last and last.endswith("traceback)")
    debug = subprocess.run([*argv, "--debug"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert debug.returncode == 1 and "Traceback" in debug.stderr
