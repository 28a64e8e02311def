"""The built-in offline tier: trace a PyTorch reference into a μCUTLASS program
(``dsl_compiler.frontend``), rank kernel configurations by the config-aware SOL estimate
(``search``), and serve both to the graph as a tier that needs no model endpoint (``policy``)."""
