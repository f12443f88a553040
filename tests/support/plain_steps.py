"""The training step of ``tests/support/plain_train.py --optimizers 0``: a module the script imports, so that
``ddprof launch --step-on plain_steps:train_step`` can count its calls (it knows nothing of ddprof)."""

from __future__ import annotations

import torch


def train_step(model: torch.nn.Module, data: torch.Tensor, lr: float = 0.01) -> None:
    """Forward, backward and a hand-written SGD update (no optimizer object)."""
    model(data).square().mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad
                p.grad = None
