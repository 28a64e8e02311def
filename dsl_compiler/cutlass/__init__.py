"""The CUTLASS C++ emitters: a program's kernels as CUTLASS 3.x / 2.x C++ for sm_90a, one translation unit each.

``emit.emit_program`` is the entry point (GEMM, batched GEMM and the sm_90 conv); ``grouped_gemm`` and
``grouped_conv`` write the grouped GEMM and the grouped and depthwise conv; ``common`` holds what they share (ABI
types, preamble, expression writer, schedules).
"""
