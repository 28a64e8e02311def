"""The lowering's passes, in the order ``frontend.lower`` runs them over an ``OpGraph``:

1. ``grouping``: kernel anchors, epilogue fusion and, within the same walk, ``folding`` (BatchNorm into a kernel);
2. ``naming`` of the program's inputs and kernels;
3. ``precision`` (each kernel's math) and ``padding`` (each kernel's 16-byte padding): a plan per kernel;
4. ``emission`` of the program's declarations and steps from the output back, ``kernels`` writing each kernel;
5. ``precision.fold_store_casts`` on the steps, and the slice stores of ``frontend.concat``.

The static checks (``dsl_compiler.checks.check``) read the result; ``frontend.trace`` lowers again, with a kernel's
epilogue or the kernel itself left to PyTorch, until they pass.
"""
