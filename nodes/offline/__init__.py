"""The built-in offline tier (``policy``): trace a PyTorch reference into a μCUTLASS program
(``dsl_compiler.frontend``), rank kernel configurations by the config-aware SOL estimate
(``sol_models.search``), and serve both to the graph as a tier that needs no model endpoint."""
