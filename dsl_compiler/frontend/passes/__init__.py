"""The lowering's passes over an ``OpGraph`` (``frontend.graph``): ``naming`` of the program's tensors and kernels,
``precision`` (each kernel's math) and ``padding`` (each kernel's 16-byte padding)."""
