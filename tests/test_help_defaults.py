"""`finetune --help` says the training defaults come from the task's recipe, and lists each recipe."""

import pytest

from litebert.cli import main
from litebert.tasks.loading import RECIPES


def test_finetune_help_lists_the_recipes_it_applies(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    out = capsys.readouterr().out
    assert "training defaults come from the task's recipe" in out
    for name, recipe in RECIPES.items():
        line = next(row for row in out.splitlines() if row.split()[:1] == [name])
        assert line.split()[1:] == ["adamw", f"{recipe.lr:g}", str(recipe.batch_size), str(recipe.max_steps),
                                    str(recipe.warmup_steps)]
