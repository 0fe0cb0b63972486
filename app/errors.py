"""The one exception family whose message is meant for the user.

Every layer raises a subclass of :class:`LlamaDeskError` with a sentence that says what
happened and what to do; the command line prints it without a traceback, the GUI shows it
in a message bar. Anything else escaping is a bug.
"""


class LlamaDeskError(Exception):
    """An error whose ``str()`` is a complete sentence for the user."""
