"""The errors a user can fix. The CLI prints any LitebertError as one line (`litebert VERB: error: ...`) and
exits 2, and so an OSError (a missing file, a full disk, a permission), with the file it names; every other
exception is a bug and keeps its traceback (LITEBERT_DEBUG=1 shows one for these too).

They subclass ValueError because each is a bad value handed to litebert (a path, a file, a flag), and so that
callers that caught ValueError before this hierarchy existed keep working.
"""


class LitebertError(ValueError):
    """Base class: a message that names the problem and, where there is one, the file or the flag."""


class ConfigError(LitebertError):
    """A bad option, recipe or config.json value."""


class InputError(ConfigError):
    """One input of a call that the model cannot take, found while it was featurized, with its index among the
    call's inputs: a server that batched several requests into the call refuses the one that sent it alone."""

    def __init__(self, index: int, reason: str):
        super().__init__(f"input {index}: {reason}")
        self.index, self.reason = index, reason

    def __reduce__(self):  # pickled as its arguments: it crosses processes (data workers, a process pool)
        return type(self), (self.index, self.reason)


class DataError(LitebertError):
    """Input data that cannot be read. The message starts with where it is: file:line, or file: JSON path."""


class CheckpointError(LitebertError):
    """A model or checkpoint directory that is missing, damaged, or does not match what it is used with."""


class NonFiniteError(CheckpointError):
    """NaN or infinite weights, embeddings or scores: a result that would be wrong without a word."""
