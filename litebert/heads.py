"""Fine-tuning heads on the ALBERT encoder, with HuggingFace's class and weight names.

Each head is a few lines: the encoder, a dropout and a linear layer. Sequence-level heads read the pooled
[CLS] (and ask the encoder's last layer for that position alone); token-level heads read every position. Loss
functions follow HF's choices so that a litebert model and its transformers twin compute the same loss on the
same batch. Heads on (B, T) inputs also take `packed_positions` (litebert.model.packed_positions, which the
fine-tuning collate adds under --cuda-graphs): the padding-free encoder at a token count the host chose.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from litebert.config import IGNORE_INDEX, AlbertConfig
from litebert.errors import CheckpointError, ConfigError
from litebert.model import (
    AlbertForMaskedLM,
    AlbertForPreTraining,
    AlbertModel,
    ModelOutput,
    classifier_dropout,
    cls_position,
    given_inputs,
    model_output,
)
from litebert.weights import PretrainedMixin


@model_output
class ClassifierOutput(ModelOutput):
    loss: torch.Tensor | None
    logits: torch.Tensor  # (B, num_labels) | (B, T, num_labels) | (B, num_choices)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


@model_output
class QuestionAnsweringOutput(ModelOutput):
    loss: torch.Tensor | None
    start_logits: torch.Tensor  # (B, T)
    end_logits: torch.Tensor  # (B, T)
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


def sequence_loss(logits: torch.Tensor, labels: torch.Tensor, config: AlbertConfig) -> torch.Tensor:
    """HF's rule: one label -> regression (MSE); integer labels -> cross-entropy; else multi-label BCE."""
    problem = config.problem_type
    if problem is None:
        if config.num_labels == 1:
            problem = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem = "single_label_classification"
        else:
            problem = "multi_label_classification"
    if problem == "regression":
        if config.num_labels == 1:
            return F.mse_loss(logits.squeeze().float(), labels.squeeze().float())
        return F.mse_loss(logits.float(), labels.float())
    if problem == "single_label_classification":
        return F.cross_entropy(logits.view(-1, config.num_labels).float(), labels.view(-1))
    return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


class AlbertForSequenceClassification(PretrainedMixin, nn.Module):
    """GLUE-style classification or regression (num_labels=1) on the pooled [CLS]."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool | None = None,
                output_attentions: bool | None = None, packed_positions: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None) -> ClassifierOutput:
        output_hidden_states, output_attentions = self.config.outputs_asked(output_hidden_states, output_attentions)
        every = output_hidden_states or output_attentions  # those need every position of the last layer
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids,
                          None if every else cls_position(given_inputs(input_ids, inputs_embeds)),
                          output_hidden_states, output_attentions, packed_positions, inputs_embeds=inputs_embeds)
        logits = self.classifier(self.dropout(out.pooler_output))  # (B, num_labels)
        return ClassifierOutput(None if labels is None else sequence_loss(logits, labels, self.config), logits,
                                out.hidden_states, out.attentions)


class AlbertForTokenClassification(PretrainedMixin, nn.Module):
    """Per-token labels (NER, POS); label -100 marks positions without a label (sub-tokens, padding)."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool | None = None,
                output_attentions: bool | None = None, packed_positions: torch.Tensor | None = None,
                inputs_embeds: torch.Tensor | None = None) -> ClassifierOutput:
        loss_reads = None if labels is None else labels != IGNORE_INDEX  # HF's loss reads labels on padding too
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, None, output_hidden_states,
                          output_attentions, packed_positions, loss_reads, inputs_embeds)
        logits = self.classifier(self.dropout(out.last_hidden_state))  # (B, T, num_labels)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, self.config.num_labels).float(), labels.view(-1))
        return ClassifierOutput(loss, logits, out.hidden_states, out.attentions)


class AlbertForQuestionAnswering(PretrainedMixin, nn.Module):
    """Extractive QA (SQuAD): a start and an end logit per token."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        # qa_outputs has two outputs whatever num_labels says, and HF's config says num_labels=2 for it too
        self.config = config = config if config.num_labels == 2 else config.replace(num_labels=2)
        self.albert = AlbertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                start_positions: torch.Tensor | None = None, end_positions: torch.Tensor | None = None,
                output_hidden_states: bool | None = None, output_attentions: bool | None = None,
                packed_positions: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None
                ) -> QuestionAnsweringOutput:
        # The loss is a softmax over every position, padding included (as transformers' and TF ALBERT's), so
        # training reads the padded path's states at padding: padding-free gives zeros there (logits = bias)
        # and a different loss. Logits alone, at real tokens, are the same either way.
        with_loss = start_positions is not None and end_positions is not None
        given = given_inputs(input_ids, inputs_embeds)
        loss_reads = torch.ones(given.shape[:2], dtype=torch.bool, device=given.device) if with_loss else None
        out = self.albert(input_ids, attention_mask, token_type_ids, position_ids, None, output_hidden_states,
                          output_attentions, None if with_loss else packed_positions, loss_reads, inputs_embeds)
        start_logits, end_logits = self.qa_outputs(out.last_hidden_state).float().unbind(-1)  # (B, T) each
        loss = None
        if with_loss:
            # Positions outside the sequence are ignored, as in HF (they clamp to T and ignore index T).
            T = start_logits.shape[1]
            start = start_positions.view(-1).clamp(0, T)
            end = end_positions.view(-1).clamp(0, T)
            loss = (F.cross_entropy(start_logits, start, ignore_index=T)
                    + F.cross_entropy(end_logits, end, ignore_index=T)) / 2
        return QuestionAnsweringOutput(loss, start_logits, end_logits, out.hidden_states, out.attentions)


class AlbertForMultipleChoice(PretrainedMixin, nn.Module):
    """RACE/SWAG-style: score each (context, option) pair on its pooled [CLS]; softmax over the options."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.config = config
        self.albert = AlbertModel(config)
        self.dropout = classifier_dropout(config)
        self.classifier = nn.Linear(config.hidden_size, 1)
        self.init_weights()

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool | None = None,
                output_attentions: bool | None = None, inputs_embeds: torch.Tensor | None = None) -> ClassifierOutput:
        given = given_inputs(input_ids, inputs_embeds)
        if given.dim() < (3 if input_ids is not None else 4):  # a row per choice, the choices of a question stacked
            raise ConfigError(f"AlbertForMultipleChoice takes (batch, choices, length) inputs, got shape "
                              f"{tuple(given.shape)}: encode each choice beside its question and stack them")
        B, C, T = given.shape[:3]

        def flat(t: torch.Tensor | None) -> torch.Tensor | None:  # (B, C, T, ...) -> (B * C, T, ...)
            return None if t is None else t.reshape(B * C, T, *t.shape[3:])

        input_ids, inputs_embeds = flat(input_ids), flat(inputs_embeds)
        output_hidden_states, output_attentions = self.config.outputs_asked(output_hidden_states, output_attentions)
        every = output_hidden_states or output_attentions  # those need every position of the last layer
        out = self.albert(input_ids, flat(attention_mask), flat(token_type_ids), flat(position_ids),
                          None if every else cls_position(given_inputs(input_ids, inputs_embeds)),
                          output_hidden_states, output_attentions, inputs_embeds=inputs_embeds)
        logits = self.classifier(self.dropout(out.pooler_output)).view(B, C)  # (B, C)
        return ClassifierOutput(None if labels is None else F.cross_entropy(logits.float(), labels), logits,
                                out.hidden_states, out.attentions)


HEADS = {cls.__name__: cls for cls in (AlbertForSequenceClassification, AlbertForTokenClassification,
                                        AlbertForQuestionAnswering, AlbertForMultipleChoice)}

# Every litebert model class by its (HF) name, as config.json's `architectures` records it.
MODEL_CLASSES: dict[str, type] = {cls.__name__: cls for cls in (AlbertModel, AlbertForPreTraining,
                                                                AlbertForMaskedLM)} | HEADS


def class_name_of(model: nn.Module) -> str | None:
    """The name of the litebert class `model` is (or subclasses), as config.json's `architectures` records it;
    None for a model of no litebert class."""
    return next((c.__name__ for c in type(model).__mro__ if MODEL_CLASSES.get(c.__name__) is c), None)


def model_class(config: AlbertConfig) -> type:
    """The litebert class that config.json's `architectures` names (AlbertModel when it names none)."""
    name = (config.architectures or ["AlbertModel"])[0]
    if name not in MODEL_CLASSES:
        raise CheckpointError(f"config.json names architecture {name!r}; litebert has {', '.join(MODEL_CLASSES)}")
    return MODEL_CLASSES[name]
