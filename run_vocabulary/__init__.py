"""The run vocabulary: what a run is told (settings, defaults), what it writes (records), how it decides to
stop (the stop rules), what it keeps (the floor), the agent variants, and the problem as the libraries see it.

Bottom-level: graph, nodes and evals import it; it imports nothing of theirs (records carry
``dsl_compiler.diagnostics`` values; settings check ``dsl_compiler.backend``'s names). ``run_vocabulary.problem``
and ``run_vocabulary.defaults`` import nothing of ours, so the compiler and the SOL models may type against them."""
