"""The runtime checks of a validation and a profile, one module per check, each a step of the list its
operation runs in order (``evals.judge.validation.STEPS``, ``evals.judge.profiling.STEPS``). A step makes
the calls its check needs through the operation's ``Attempt`` and raises a ``Finding`` for the rule the
candidate broke; what it measured goes into the operation's ``info``."""
