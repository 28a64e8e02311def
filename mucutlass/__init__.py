"""mucutlass: an agent that makes PyTorch programs fast on NVIDIA Hopper GPUs with μCUTLASS."""

__version__ = "0.1.0"
