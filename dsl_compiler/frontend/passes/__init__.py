"""The lowering's passes over an ``OpGraph`` (``frontend.graph``): ``grouping`` (kernel anchors and epilogue fusion,
with ``folding`` of a BatchNorm into a kernel in the same walk), ``naming`` of the program's tensors and kernels,
``precision`` (each kernel's math) and ``padding`` (each kernel's 16-byte padding)."""
