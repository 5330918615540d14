"""The error users can fix themselves: bad data, settings or paths.

Every benchmark's data errors, the settings errors and the judge set-up errors derive from
``InputError``, so that a command line can report any of them in one line (what to fix, no
traceback) while real bugs still surface as tracebacks.
"""


class InputError(ValueError):
    """Bad input: the message names the file, field or setting to fix."""


class StorageError(OSError):
    """Something paid for or produced could not be written (a full disk, a quota, a folder that cannot
    be written): the message names the file or database, how much was not stored, and what is kept."""
