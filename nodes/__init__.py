"""The graph's nodes: thin adapters that read the state, call library code and return an update.
One module per node; prompts and model tiers beside them; the offline tier in ``offline/``."""
