"""Every `torch.optim` optimizer with settings that exercise its options, and learning-rate
schedulers whose rates change within a few steps: shared by the eager and compiled training tests."""

from __future__ import annotations

import torch

OPTIMIZERS = {
    "SGD": dict(lr=0.05, momentum=0.9, weight_decay=1e-3, nesterov=True),
    "Adam": dict(lr=1e-2, weight_decay=1e-3),
    "AdamW": dict(lr=1e-2),
    "RMSprop": dict(lr=1e-3, momentum=0.5, centered=True),
    "Adagrad": dict(lr=0.05, lr_decay=1e-3),
    "Adadelta": dict(lr=1.0),
    "Adamax": dict(lr=1e-2),
    "NAdam": dict(lr=1e-2, decoupled_weight_decay=True, weight_decay=1e-3),
    "RAdam": dict(lr=1e-2),
    "Rprop": dict(lr=1e-2),
    "ASGD": dict(lr=1e-2, t0=2),
    "LBFGS": dict(lr=0.5, max_iter=3, history_size=4),
}

#: The optimizers with a foreach form (`foreach=True`: one `_foreach_*` call per update over
#: every parameter); on the jax device and the CPU the default is the single-tensor form.
FOREACH = [name for name in OPTIMIZERS if name != "LBFGS"]

SCHEDULERS = {
    "CosineAnnealingLR": lambda opt: torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=40),
    "StepLR": lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7),
    "ExponentialLR": lambda opt: torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.97),
    "LinearLR": lambda opt: torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.2, total_iters=40),
    "OneCycleLR": lambda opt: torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-2, total_steps=100),
    "CyclicLR": lambda opt: torch.optim.lr_scheduler.CyclicLR(opt, 1e-3, 1e-2, step_size_up=5),
    "CosineAnnealingWarmRestarts": lambda opt: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=4),
    "PolynomialLR": lambda opt: torch.optim.lr_scheduler.PolynomialLR(opt, total_iters=60, power=2.0),
    "LambdaLR": lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step)),
}
