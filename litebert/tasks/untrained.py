"""The families of models that were not fine-tuned, for pipelines only: fill-mask on a pretrained model's MLM
head, and its encoder's hidden states (feature extraction, sentence embeddings). Nothing is trained or scored."""

from __future__ import annotations

from dataclasses import dataclass, field

from litebert.config import AlbertConfig
from litebert.errors import ConfigError, InputError
from litebert.heads import model_class
from litebert.model import AlbertForMaskedLM, AlbertForPreTraining, AlbertModel, encoder_of
from litebert.tasks.answers import MaskFill
from litebert.tasks.families import Family, _softmax
from litebert.tasks.features import Feature, featurize_classification
from litebert.tasks.records import TextExample, nonblank, text_example
from litebert.text.conventions import SPECIALS


@dataclass
class MaskFeature(Feature):
    mask_positions: list[int] = field(default_factory=list)


class MaskedLanguageModel(Family):
    """Fill-mask on a pretrained model: the MLM head's distribution at each [MASK] of a text. For pipelines
    only: nothing is fine-tuned or scored."""

    kind, head = "masked_lm", AlbertForMaskedLM
    mask = SPECIALS["mask_token"]

    def example(self, raw, index):
        text = nonblank(raw, "the text")
        if self.mask not in text:
            raise ConfigError(f"no {self.mask} in the text: fill-mask predicts the tokens at {self.mask}")
        return TextExample(str(index), text)

    def load(self, directory):
        """The checkpoint's own class when it has the MLM head (pretraining checkpoints are AlbertForPreTraining),
        so that nothing is reported unused; a fine-tuned head has no MLM weights left."""
        config = AlbertConfig.load(directory)
        cls = model_class(config)
        if cls not in (AlbertForMaskedLM, AlbertForPreTraining):
            raise ConfigError(f"{directory} holds an {cls.__name__}, without the masked-LM head fill-mask needs; "
                              "use a pretrained checkpoint (AlbertForPreTraining or AlbertForMaskedLM)")
        return cls.from_pretrained(directory)

    def featurize(self, examples, tok, labels, settings):
        features = []
        for i, ex in enumerate(examples):
            ids = tok.encode(ex.text_a, max_length=settings.max_length)
            self.check_masks_kept(i, ex.text_a, ids, tok, settings.max_length)
            positions = [t for t, token in enumerate(ids) if token == tok.mask_id]
            features.append(MaskFeature(ids, [0] * len(ids), None, i, None, positions))
        return features

    def check_masks_kept(self, index: int, text: str, ids: list[int], tok, max_length: int) -> None:
        """Refuse an input that max_length cut a [MASK] off: its answer would silently lack that mask's row
        (InputError: the input's fault, named by its index). Only a text that filled max_length can have lost
        one, so only that one is tokenized again, uncut."""
        kept = ids.count(tok.mask_id)
        given = kept if len(ids) < max_length else tok.encode(text).count(tok.mask_id)
        if kept < given:
            raise InputError(index, f"{given - kept} of its {given} {self.mask} tokens are cut off by max_length "
                                    f"{max_length}")

    def scores(self, output, features):
        logits = output.logits if hasattr(output, "logits") else output.prediction_logits  # AlbertForPreTraining
        return [_softmax(logits[j, f.mask_positions]) for j, f in enumerate(features)]  # (num_masks, V) each

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        return [MaskFill(f.input_ids, f.mask_positions, s) for f, s in zip(features, scores)]


class Encoder(Family):
    """The encoder's last hidden states: every token's vector (pooling None), or one vector per text, the mean
    over its tokens ([CLS] and [SEP] included, as sentence-transformers does) or the [CLS] vector. For
    pipelines only."""

    kind, head = "encoding", AlbertModel
    POOLING = ("mean", "cls")

    def __init__(self, pooling: str | None = None):
        if pooling is not None and pooling not in self.POOLING:
            raise ConfigError(f"pooling must be one of {self.POOLING}, got {pooling!r}")
        self.pooling = pooling

    def example(self, raw, index):
        return text_example(raw, index)

    def load(self, directory):
        """The encoder of whatever the checkpoint holds (a head's `albert`), loaded without unused weights."""
        return encoder_of(model_class(AlbertConfig.load(directory)).from_pretrained(directory))

    def featurize(self, examples, tok, labels, settings):
        return featurize_classification(examples, tok, settings.max_length, None)

    def scores(self, output, features):
        hidden = output.last_hidden_state.float().cpu().numpy()  # (B, T, H)
        return [hidden[j, :len(f.input_ids)] for j, f in enumerate(features)]  # (T, H) each, without padding

    def answers(self, examples, features, scores, labels, settings, calibration=None):
        if self.pooling is None:
            return list(scores)
        return [s.mean(0) if self.pooling == "mean" else s[0] for s in scores]  # (H,)
