"""transformers' Trainer on litebert models: checkpoints that are model directories.

Trainer saves a model that is not its own PreTrainedModel as its weights alone (model.safetensors, beside the
tokenizer its collator holds), so a checkpoint could be loaded only with `from_pretrained(dir, config=...)`.
`SaveConfig` writes the model's config.json into each checkpoint as Trainer finishes it, naming the model's class,
so `from_pretrained(checkpoint)`, the Auto names and transformers' own classes read it as a model directory:

    from litebert.interop.trainer import SaveConfig
    trainer = Trainer(model=model, args=args, ..., callbacks=[SaveConfig()])

This module imports transformers (the Trainer's package); nothing else in litebert needs it.
"""

from __future__ import annotations

import os

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from litebert.config import AlbertConfig
from litebert.errors import ConfigError
from litebert.heads import class_name_of


class SaveConfig(TrainerCallback):
    """Writes config.json (with `architectures`, the model's class) into every checkpoint Trainer saves."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if not isinstance(getattr(model, "config", None), AlbertConfig):  # refused before any step is spent
            raise ConfigError(f"SaveConfig writes a litebert model's config.json; Trainer's model is a "
                              f"{type(model).__name__}")

    def on_save(self, args, state, control, model=None, **kwargs):
        if not state.is_world_process_zero:
            return
        model = model.get_base_model() if hasattr(model, "get_base_model") else model  # under a PEFT wrapper
        known = class_name_of(model)
        config = model.config.replace(architectures=[known]) if known else model.config  # as save_pretrained does
        config.save(os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))


__all__ = ["SaveConfig"]
