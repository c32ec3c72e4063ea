"""The errors a user can cause, importable without torch or spaCy so the CLI reports them at once.

Input errors (a file, a flag, a config key) are `ValueError`s of the module that reads the input
(`ConfigError`, `SourceError`, `RatingsError`, `BenchmarkDataError`, ...). A `JobError` is a job that cannot
go on (an unreachable server, a damaged dataset, a non-finite loss); what it wrote so far stays and is
resumed. The CLI prints either as one line and exits with status 2.
"""


class JobError(RuntimeError):
    """A job that cannot go on; the message names the cause and the fix."""


class PlantError(JobError):
    """A plant run that cannot go on; what is written so far stays and is resumed."""


class CaptionerError(JobError):
    """A captioner that cannot work at all (unreachable server, missing model): stop before losing work."""


class TrainingError(JobError):
    """A training run that cannot go on (non-finite loss or weights, damaged data); checkpoints stay."""


class DatasetError(JobError):
    """A ConcreteBatch on disk that is damaged or incomplete: the message names the shard."""


class Interrupted(JobError):
    """A job stopped by Ctrl-C or SIGTERM after it saved what it had (the message says how to continue)."""
