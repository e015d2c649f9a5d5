"""Draw the noisy over-optimisation study's own labels for its main seeds (design train_rows), as 24df551's code does
for a seed with no committed label file; the set-up study's 128-row files would otherwise be reused (a bug)."""
import json
from squarechipo.data import load_preference_dataset
from squarechipo.reproduce.study.design import load_design
from squarechipo.reproduce.study.runner import Study, _PREFERENCE

design = load_design("recipes/studies/overoptimisation_noisy.yaml")
study = Study(design, "outputs/overoptimisation_noisy", "results/overoptimisation_noisy")
study.setup()
assert study.portable
train = load_preference_dataset(str(study.data / _PREFERENCE), split="train")
plan = json.loads((study.results / "preregistration.json").read_text())["plan"]
for seed in plan["seeds"]:
    own = study.results / "labels" / f"seed{seed}.json"
    if own.exists():
        continue
    labelled, summary, kept = study._draw_labels(train, seed, None)
    assert len(kept["rows"]) == design.train_rows
    own.write_text(json.dumps({**kept, "summary": summary}))
    print(seed, summary)
