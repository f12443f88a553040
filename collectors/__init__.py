"""Collectors: capture Kineto traces and NCCL evidence from inside a training script (needs torch)."""
