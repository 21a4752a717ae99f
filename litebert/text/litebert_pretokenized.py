"""transformers' AutoTokenizer class for a litebert tokenizer that segments morphemes before SentencePiece
(tokenizer_config.json's "pre_tokenizer"). save_tokenizer copies this file into the tokenizer directory and names
it in "auto_map", so AutoTokenizer says the directory holds custom code unless trust_remote_code=True.

transformers has no morpheme segmenter, and encoding the unsegmented text would give other ids without a word.
So the class delegates to litebert: with litebert (and the segmenter's package) installed, its ids, token type
ids and truncation are litebert.Tokenizer's, for single texts and pairs; without litebert it refuses, naming the
segmenter and `litebert.Tokenizer.from_pretrained(path)`. This file is read as text by litebert and imported only
by transformers, from the tokenizer directory.
"""

import os
from shutil import copyfile

from transformers import PreTrainedTokenizer

try:  # in a try block, so that transformers' import check lets __init__ say what is missing instead
    from litebert.text.encoding import truncate_pair
    from litebert.tokenizer import Tokenizer as LitebertTokenizer
except ImportError:
    LitebertTokenizer = truncate_pair = None

SPIECE_FILE = "spiece.model"


class LitebertPreTokenizedTokenizer(PreTrainedTokenizer):
    """litebert.Tokenizer behind transformers' slow-tokenizer interface (module docstring)."""

    vocab_files_names = {"vocab_file": SPIECE_FILE}
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]

    def __init__(self, vocab_file, pre_tokenizer=None, do_lower_case=True, keep_accents=False, remove_space=True,
                 **kwargs):
        segmenter = f"{(pre_tokenizer or {}).get('name')} ({(pre_tokenizer or {}).get('package')})"
        if LitebertTokenizer is None:
            raise ImportError(f"this tokenizer segments text into morphemes with {segmenter} before SentencePiece, "
                              f"which transformers cannot do: install litebert, and load it with "
                              f"litebert.Tokenizer.from_pretrained(path) (or here, once litebert is installed)")
        self.vocab_file = vocab_file
        self.litebert = LitebertTokenizer(vocab_file, do_lower_case=do_lower_case, keep_accents=keep_accents,
                                          remove_space=remove_space, pre_tokenizer=pre_tokenizer,
                                          model_max_length=kwargs.get("model_max_length", 512))
        self._vocab = {piece: i for i, piece in enumerate(self.litebert.pieces)}
        super().__init__(pre_tokenizer=pre_tokenizer, do_lower_case=do_lower_case, keep_accents=keep_accents,
                         remove_space=remove_space, **kwargs)

    @property
    def vocab_size(self):
        return self.litebert.vocab_size

    def get_vocab(self):
        return dict(self._vocab)

    def tokenize(self, text, **kwargs):
        # The whole text at once: litebert splits out typed special tokens itself and segments what lies between,
        # as its own encode does (transformers' split would segment other chunks).
        return self.litebert.tokenize(text)

    def _tokenize(self, text, **kwargs):
        return self.litebert.tokenize(text)

    def _convert_token_to_id(self, token):
        return self._vocab.get(token, self.litebert.unk_id)

    def _convert_id_to_token(self, index):
        return self.litebert.pieces[index]

    def convert_tokens_to_string(self, tokens):
        text = "".join(tokens).replace("\u2581", " ")
        return text[1:] if text[:1] == " " else text

    def build_inputs_with_special_tokens(self, token_ids_0, token_ids_1=None):
        cls, sep = [self.litebert.cls_id], [self.litebert.sep_id]
        return cls + token_ids_0 + sep + ([] if token_ids_1 is None else token_ids_1 + sep)

    def create_token_type_ids_from_sequences(self, token_ids_0, token_ids_1=None):
        first = [0] * (len(token_ids_0) + 2)
        return first if token_ids_1 is None else first + [1] * (len(token_ids_1) + 1)

    def get_special_tokens_mask(self, token_ids_0, token_ids_1=None, already_has_special_tokens=False):
        if already_has_special_tokens:
            return [int(self.litebert.special_table[i]) for i in token_ids_0]
        mask = [1] + [0] * len(token_ids_0) + [1]
        return mask if token_ids_1 is None else mask + [0] * len(token_ids_1) + [1]

    def truncate_sequences(self, ids, pair_ids=None, num_tokens_to_remove=0, truncation_strategy="longest_first",
                           stride=0):
        # A pair cut longest-first keeps litebert's (and the `tokenizers` library's) split of an odd token, where
        # transformers' slow tokenizers give it to the first text.
        if (pair_ids is None or num_tokens_to_remove <= 0 or self.truncation_side != "right"
                or str(getattr(truncation_strategy, "value", truncation_strategy)) != "longest_first"):
            return super().truncate_sequences(ids, pair_ids, num_tokens_to_remove, truncation_strategy, stride)
        budget = len(ids) + len(pair_ids) - num_tokens_to_remove
        return (*truncate_pair(ids, pair_ids, budget, "longest_first"), [])

    def num_special_tokens_to_add(self, pair=False):
        return 3 if pair else 2

    def save_vocabulary(self, save_directory, filename_prefix=None):
        out = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + SPIECE_FILE)
        if os.path.abspath(out) != os.path.abspath(self.vocab_file):
            copyfile(self.vocab_file, out)
        return (out,)
