"""The tokenizer's parts (litebert.tokenizer.Tokenizer puts them together): ALBERT's text conventions, the call
shapes of transformers' tokenizers, the tokenizer directory in transformers' layout, and the morpheme segmenters
that may run before sentencepiece."""
